#!/usr/bin/env bash
# Builds KWOK (the soak's simulated kubelets, module tests/cluster/kwok) once and prints the
# directory that holds it. The cache lives in tests/.cache (or $ALFRED_E2E_CACHE).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1 == "require" && $2 == "sigs.k8s.io/kwok" {print $3}' "$here/kwok/go.mod")"
out="${ALFRED_E2E_CACHE:-$here/../.cache}/kwok-$version"
if [[ ! -x "$out/kwok" ]]; then
  command -v go >/dev/null || { echo "Go is needed to build KWOK" >&2; exit 1; }
  echo "building KWOK $version into $out (once; about 2 minutes on 2 cores)" >&2
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/kwok" sigs.k8s.io/kwok/cmd/kwok) >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
echo "$out"

#!/usr/bin/env bash
# Builds Helm from this Go module once per version and prints its path. The cache lives in
# tests/.cache (or $ALFRED_E2E_CACHE), beside the control plane.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(grep -Eo 'helm.sh/helm/v3 v[0-9.]+' "$here/go.mod" | head -1 | cut -d" " -f2)"
out="${ALFRED_E2E_CACHE:-$here/../.cache}/helm-$version"
if [[ ! -x "$out/helm" ]]; then
  command -v go >/dev/null || { echo "Go is needed to build Helm" >&2; exit 1; }
  echo "building helm $version into $out (once; a few minutes on 2 cores)" >&2
  mkdir -p "$out.tmp"
  start=$SECONDS
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/" helm.sh/helm/v3/cmd/helm) >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "built in $((SECONDS - start)) s" >&2
fi
echo "$out/helm"

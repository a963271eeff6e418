#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler (the oracle of the simulator's tests) and etcd once per
# version and prints the directory that holds them; kubectl too when the machine has none.
# The Kubernetes version is $K8S: one of the modules in tests/cluster/kubernetes/. The cache lives
# in tests/.cache (or $ALFRED_E2E_CACHE).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# The default is the newest version the simulator is proven against (the oracle, 0 disagreements).
k8s="${K8S:-v1.37.2}"
module="$here/kubernetes/$k8s"
if [[ ! -f "$module/go.mod" ]]; then
  echo "no module for Kubernetes $k8s; built ones: $(ls "$here/kubernetes" | tr '\n' ' ')(tests/cluster/gen-module.sh $k8s writes one)" >&2
  exit 1
fi
etcd="$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$here/etcd/go.mod")"
out="${ALFRED_E2E_CACHE:-$here/../.cache}/control-plane-$k8s-etcd-$etcd"
if [[ ! -x "$out/kube-apiserver" || ! -x "$out/etcd" || ! -x "$out/kube-scheduler" ]]; then
  command -v go >/dev/null || { echo "Go is needed to build kube-apiserver and etcd" >&2; exit 1; }
  echo "building kube-apiserver, kube-scheduler $k8s and etcd $etcd into $out (once; about 10 minutes on 2 cores)" >&2
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  start=$SECONDS
  (cd "$module" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler) >&2
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" .) >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "built in $((SECONDS - start)) s" >&2
fi
if ! command -v kubectl >/dev/null && [[ ! -x "$out/kubectl" ]]; then
  echo "no kubectl on PATH: building kubectl $k8s into $out" >&2
  (cd "$module" && go build -trimpath -ldflags "-s -w" -o "$out/" k8s.io/kubernetes/cmd/kubectl) >&2
fi
echo "$out"

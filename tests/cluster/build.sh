#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler (the oracle of the simulator's tests) and etcd from
# this Go module once per version and prints the directory that holds them; kubectl too when
# the machine has none. The cache lives in tests/.cache (or $ALFRED_E2E_CACHE).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
k8s="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")"
etcd="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$here/go.mod")"
out="${ALFRED_E2E_CACHE:-$here/../.cache}/control-plane-$k8s-etcd-$etcd"
if [[ ! -x "$out/kube-apiserver" || ! -x "$out/etcd" || ! -x "$out/kube-scheduler" ]]; then
  command -v go >/dev/null || { echo "Go is needed to build kube-apiserver and etcd" >&2; exit 1; }
  echo "building kube-apiserver, kube-scheduler $k8s and etcd $etcd into $out (once; about 15 minutes on 2 cores)" >&2
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  start=$SECONDS
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler ./etcd) >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "built in $((SECONDS - start)) s" >&2
fi
if ! command -v kubectl >/dev/null && [[ ! -x "$out/kubectl" ]]; then
  echo "no kubectl on PATH: building kubectl $k8s into $out" >&2
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$out/" k8s.io/kubernetes/cmd/kubectl) >&2
fi
echo "$out"

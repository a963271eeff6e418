#!/usr/bin/env bash
# Writes the Go module that builds kube-apiserver, kube-scheduler and kubectl of one Kubernetes
# version: tests/cluster/kubernetes/VERSION, with every staging module replaced by its published
# v0.X.Y (as k8s.io/kubernetes's own go.mod lists them). Run once per new version, then commit.
#   tests/cluster/gen-module.sh v1.37.2
set -euo pipefail
version="${1:?usage: gen-module.sh vX.Y.Z}"
here="$(cd "$(dirname "$0")" && pwd)"
dir="$here/kubernetes/$version"
mkdir -p "$dir"
staging="v0.${version#v1.}"
upstream="$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
go_version="$(awk '$1 == "go" {print $2; exit}' "$upstream")"
{
  printf '// Builds kube-apiserver, kube-scheduler and kubectl %s for the end-to-end tests\n' "$version"
  printf '// (written by tests/cluster/gen-module.sh).\nmodule alfred.test/kubernetes\n\ngo %s\n\n' "$go_version"
  printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$version"
  awk '/^replace \(/ {on = 1; next} on && /^\)/ {on = 0} on && /=>/ {print $1}' "$upstream" |
    while read -r module; do printf '\t%s => %s %s\n' "$module" "$module" "$staging"; done
  printf ')\n'
} >"$dir/go.mod"
cat >"$dir/tools.go" <<'GO'
//go:build tools

// Keeps kube-apiserver, kube-scheduler and kubectl in this module's dependency graph.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
(cd "$dir" && go mod tidy)
echo "wrote $dir" >&2

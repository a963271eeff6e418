#!/usr/bin/env bash
# Packs the plugin for this machine's platform as a krew-installable release: the archive
# (kubectl-alfred, kubectl_complete-alfred, LICENSE, README.md) and a krew plugin manifest
# naming it with its sha256.
#   dist/package.sh BIN_DIR OUT_DIR RELEASE_URL
# BIN_DIR holds the built kubectl-alfred (make dist builds it in release); RELEASE_URL is
# where the archive will be downloaded from (the manifest's uri is RELEASE_URL/ARCHIVE).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin_dir="$1"
out="$2"
version="v$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -1)"
release_url="${3:?the release URL the archive is downloaded from}"

case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) echo "unsupported OS $(uname -s)" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac

[[ -x "$bin_dir/kubectl-alfred" ]] || { echo "$bin_dir/kubectl-alfred is missing: build it first" >&2; exit 1; }
archive="kubectl-alfred_${version}_${os}_${arch}.tar.gz"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$bin_dir/kubectl-alfred" "$here/kubectl-alfred/kubectl_complete-alfred" "$stage/"
# The release profile keeps debug info for profiling; users get the binary without it.
command -v strip >/dev/null || { echo "strip is missing (Debian: apt-get install binutils)" >&2; exit 1; }
strip "$stage/kubectl-alfred"
install -m 0644 "$here/LICENSE" "$here/README.md" "$stage/"
mkdir -p "$out"
# Sorted names, fixed owner and time: the same binaries give the same archive.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf - \
  kubectl-alfred kubectl_complete-alfred LICENSE README.md | gzip -n > "$out/$archive"
sha="$(sha256sum "$out/$archive" | cut -d' ' -f1)"

cat > "$out/alfred.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: alfred
spec:
  version: $version
  shortDescription: Keep OME GPU clusters packed, healthy and safely rolled out
  description: |
    Alfred reads a cluster running OME (Open Model Engine) or a snapshot of one and
    advises: each GPU pool's fragmentation and the fewest safe moves that free whole
    nodes, node-health and maintenance evacuations, joint drain plans, and what an
    OMENative rollout will do or why it stopped. In execute mode it carries out one
    safe move at a time through OME's migration API, journaled and bounded by a
    circuit breaker, rate caps and cooldowns.
  caveats: |
    * The admission webhook is installed separately (Helm chart or kustomize
      manifests in the project).
    * Reading needs get/list on nodes, pods, ConfigMaps and OME's kinds; \`migrate\`
      also needs the RBAC in manifests/rbac/ (patch on InferenceServices, the
      dispatch journal ConfigMap).
    * Completion: kubectl 1.26+ completes \`kubectl alfred\` through
      kubectl_complete-alfred, which krew does not put on PATH. Copy it to a
      directory on your PATH that krew does not manage (never krew's own bin/,
      which krew then refuses to use once the plugin is uninstalled), e.g.:
        mkdir -p ~/.local/bin && cp "\${KREW_ROOT:-\$HOME/.krew}/store/alfred/$version/kubectl_complete-alfred" ~/.local/bin/
      and remove it with the plugin: rm ~/.local/bin/kubectl_complete-alfred
  platforms:
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $release_url/$archive
    sha256: $sha
    files:
    - from: kubectl-alfred
      to: .
    - from: kubectl_complete-alfred
      to: .
    - from: LICENSE
      to: .
    bin: kubectl-alfred
YAML
echo "$out/$archive"
echo "$out/alfred.yaml"

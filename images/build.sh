#!/usr/bin/env bash
# Builds the images named (default: every directory under images/) without a Docker daemon: a
# statically linked release binary, then buildah from the image's Containerfile, tagged
# $IMAGE_REGISTRY/NAME:$IMAGE_TAG (default: the name the chart and kustomize pull).
#   images/build.sh [NAME...]      IMAGE_REGISTRY, IMAGE_TAG, CARGO_TARGET_DIR, STORAGE_DRIVER
set -euo pipefail
cd "$(dirname "$0")/.."
command -v buildah >/dev/null || { echo "buildah is required (Debian: apt-get install buildah)" >&2; exit 1; }
# vfs works wherever buildah does (no overlay mounts); the images are a file or two.
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"
registry="${IMAGE_REGISTRY:-ghcr.io/kubectl-alfred}"
tag="${IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}"
target_dir="${CARGO_TARGET_DIR:-target}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
if (($#)); then images=("$@"); else images=(); for d in images/*/; do images+=("$(basename "$d")"); done; fi
for image in "${images[@]}"; do
  test -f "images/$image/Containerfile" || { echo "no images/$image/Containerfile" >&2; exit 2; }
  # glibc linked statically: the image holds no loader and no libraries.
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --release --target "$triple" --bin "$image"
  context="$target_dir/image/$image"
  mkdir -p "$context"
  objcopy --strip-all "$target_dir/$triple/release/$image" "$context/$image"
  buildah bud --quiet --isolation chroot -f "images/$image/Containerfile" -t "$registry/$image:$tag" "$context" >/dev/null
  echo "$registry/$image:$tag"
done

#!/usr/bin/env bash
# Proves the images `images/build.sh` made run: each image's entrypoint is a static binary that
# starts as the image's non-root user and answers --help, and the image holds nothing else.
#   images/test.sh [NAME...]      IMAGE_REGISTRY, IMAGE_TAG, STORAGE_DRIVER as for build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"
registry="${IMAGE_REGISTRY:-ghcr.io/kubectl-alfred}"
tag="${IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}"
if (($#)); then images=("$@"); else images=(); for d in images/*/; do images+=("$(basename "$d")"); done; fi
fail() { echo "FAIL $1: $2" >&2; exit 1; }
for image in "${images[@]}"; do
  ref="$registry/$image:$tag"
  user="$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$ref")"
  entry="$(buildah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$ref")"
  [ "$user" = "65532:65532" ] || fail "$image" "runs as '$user', not 65532:65532"
  [ "$entry" = "[/$image]" ] || fail "$image" "entrypoint $entry"
  container="$(buildah from --quiet "$ref")"
  root="$(buildah mount "$container")"
  trap 'buildah umount "$container" >/dev/null; buildah rm "$container" >/dev/null' EXIT
  files="$(cd "$root" && find . -mindepth 1 -not -path './dev*' -not -path './proc*' -not -path './sys*' -not -path './etc*' -not -path './run*' | sort | tr '\n' ' ')"
  [ "$files" = "./$image " ] || fail "$image" "holds more than its binary: $files"
  file -b "$root/$image" | grep -Eq "static(-pie)? linked|statically linked" || fail "$image" "not statically linked: $(file -b "$root/$image")"
  # As the image's user, from the image's own file system.
  out="$(setpriv --reuid 65532 --regid 65532 --clear-groups "$root/$image" --help)" || fail "$image" "--help failed"
  grep -q "Usage:" <<<"$out" || fail "$image" "--help printed no usage"
  # What the chart runs it as, where there is more than one thing it can be.
  if [ "$image" = kubectl-alfred ]; then
    out="$(setpriv --reuid 65532 --regid 65532 --clear-groups "$root/$image" caretaker --help)" || fail "$image" "caretaker --help failed"
    grep -q -- "--leader-elect" <<<"$out" || fail "$image" "caretaker --help names no --leader-elect"
  fi
  size="$(du -k "$root/$image" | cut -f1)"
  buildah umount "$container" >/dev/null; buildah rm "$container" >/dev/null; trap - EXIT
  echo "ok $image: static, runs as 65532 from the image's file system, $size KiB"
done
echo "${#images[@]} passed, 0 failed"

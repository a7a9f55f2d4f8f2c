#!/usr/bin/env bash
# Builds colo's container images from the Containerfile with buildah, podman
# or docker (the first that is installed; Debian's packages: buildah, podman).
# buildah and podman build with --isolation chroot, which needs no user
# namespaces or OCI runtime, so they also build inside unprivileged
# sandboxes and CI containers.
#
#   scripts/k8s-image.sh [--target runtime-cpu|runtime-cuda|fetch|all] [--name NAME] [--version V]
#                        [--base IMAGE | --debootstrap-base] [--tool buildah|podman|docker]
#
#   --target            which image (default runtime-cpu); all = the three
#   --name, --version   tag NAME:V-cpu, NAME:V-cuda, NAME:V-fetch (default localhost/colo, 0.1.0)
#   --base IMAGE        the Debian 12 base (default docker.io/library/debian:bookworm-slim)
#   --debootstrap-base  no registry: make the base with debootstrap from Debian's
#                       mirror and import it as localhost/colo-bookworm-base
#                       (scripts/rootfs-check.sh --import-base)
#
# Exit status: 0 built, 1 a build failed, 2 usage, 77 no container tool.
set -euo pipefail
cd "$(dirname "$0")/.."

target=runtime-cpu name=localhost/colo version=0.1.0 base="" tool="" debootstrap_base=0
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=${2:?}; shift 2 ;;
    --name) name=${2:?}; shift 2 ;;
    --version) version=${2:?}; shift 2 ;;
    --base) base=${2:?}; shift 2 ;;
    --debootstrap-base) debootstrap_base=1; shift ;;
    --tool) tool=${2:?}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "k8s-image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$target" in
  runtime-cpu|runtime-cuda|fetch) targets=("$target") ;;
  all) targets=(runtime-cpu runtime-cuda fetch) ;;
  *) echo "k8s-image: --target takes runtime-cpu, runtime-cuda, fetch or all" >&2; exit 2 ;;
esac

if [ -z "$tool" ]; then
  for t in buildah podman docker; do
    if command -v "$t" >/dev/null; then tool=$t; break; fi
  done
fi
if [ -z "$tool" ] || ! command -v "$tool" >/dev/null; then
  echo "k8s-image: no buildah, podman or docker (apt-get install buildah)" >&2
  exit 77
fi

if [ "$debootstrap_base" = 1 ]; then
  scripts/rootfs-check.sh --import-base
  base=localhost/colo-bookworm-base:latest
fi

for t in "${targets[@]}"; do
  tag="$name:$version-${t#runtime-}"
  args=(--target "$t" -t "$tag" -f Containerfile)
  [ -z "$base" ] || args+=(--build-arg "BASE_IMAGE=$base")
  echo "k8s-image: $tool: $tag (target $t${base:+, base $base})"
  case "$tool" in
    buildah) buildah bud --isolation chroot --layers "${args[@]}" . ;;
    podman) podman build --isolation chroot --layers "${args[@]}" . ;;
    docker) docker build "${args[@]}" . ;;
    *) echo "k8s-image: --tool takes buildah, podman or docker" >&2; exit 2 ;;
  esac
done

#!/usr/bin/env bash
# Prepares a GPU run from a machine that has nvcc and colo's build
# dependencies but no GPU:
#   build-gpu/  colo built with CUDA for sm_90 (H100/H200), Release, tests included
#   .devpkgs/   the Debian packages of the shared libraries those binaries need
#               beyond glibc, libstdc++ and CUDA (libevent, jansson, libyaml,
#               OpenBLAS, gfortran, cmocka...), fetched with apt-get download
#   .gpu-pack/colo-gpu.tar.xz  both, in one archive of about 20 MB (build-gpu/
#               is about 170 MB unpacked: 80 programs, each with colo and its
#               CUDA kernels linked in)
# Carry the archive with the source tree to the GPU machine and run
# scripts/gpu-check.sh or scripts/gpu-run.sh there (docs/GPU.md); they unpack
# it. All three are git-ignored.
#
#   scripts/gpu-pack.sh [--keep-objects]
# --keep-objects keeps object files and static libraries in build-gpu/ (by
# default they are deleted after the build to keep the folder small; the next
# build there recompiles everything).
set -euo pipefail
cd "$(dirname "$0")/.."

keep_objects=0
for a in "$@"; do
  case "$a" in
    --keep-objects) keep_objects=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "gpu-pack: unknown argument $a" >&2; exit 2 ;;
  esac
done

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu-pack: nvcc not found" >&2; exit 1; }
cmake -S . -B build-gpu -DCOLO_CUDA=ON -DCOLO_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j"$(nproc)"

# Shared libraries of the built programs, minus the C/C++ runtime and CUDA
# (both present on any machine that runs CUDA programs), mapped to packages.
libs=$(for f in build-gpu/test_* build-gpu/colo-*; do [ -x "$f" ] && ldd "$f"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  grep -v -E 'libcuda|libcudart|libcublas|libnvidia|/cuda[^/]*/' || true)
pkgs=""
for l in $libs; do
  p=$(dpkg -S "$(readlink -f "$l")" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -z "$p" ] && p=$(dpkg -S "$l" 2>/dev/null | head -1 | cut -d: -f1) || true
  if [ -z "$p" ]; then echo "gpu-pack: no package owns $l; it will be missing on the GPU machine" >&2; continue; fi
  pkgs="$pkgs $p"
done
pkgs=$(echo "$pkgs" | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
echo "gpu-pack: runtime packages: $pkgs"
mkdir -p .devpkgs
rm -rf .devpkgs/*.deb .devpkgs/root
# shellcheck disable=SC2086
(cd .devpkgs && apt-get download $pkgs >/dev/null)

if [ "$keep_objects" = 0 ]; then
  find build-gpu -name '*.o' -delete
  find build-gpu -maxdepth 1 -name 'lib*.a' -delete
fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
echo "$commit" > build-gpu/colo-commit.txt
mkdir -p .gpu-pack
rm -f .gpu-pack/colo-gpu.tar.xz
tar --exclude='CompilerId*' --exclude='*.o' --exclude='*.a' -cf - build-gpu .devpkgs/*.deb | xz -6 -T"$(nproc)" > .gpu-pack/colo-gpu.tar.xz
touch build-gpu/colo-commit.txt # not older than the archive: gpu-env.sh leaves this build-gpu/ alone
du -sh build-gpu .devpkgs .gpu-pack/colo-gpu.tar.xz
tree=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
pack=$(stat -c %s .gpu-pack/colo-gpu.tar.xz)
echo "gpu-pack: commit $commit; source tree $((tree >> 20)) MiB + archive $((pack >> 20)) MiB to carry"
echo "gpu-pack: carry .gpu-pack/ with the tree; run scripts/gpu-check.sh or scripts/gpu-run.sh on the GPU machine"

#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: runs the whole test suite (the CUDA
# parity tests included) and the kernel benchmark on the CUDA device.
#
# Where the Debian libraries are installed and nvcc works, it builds
# build-gpu itself. On a GPU machine without them, build here first with
# scripts/gpu-pack.sh and carry build-gpu/ and .devpkgs/; this script then
# unpacks the packages into a private folder and points LD_LIBRARY_PATH at it.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ ! -d build-gpu ]; then
  cmake -S . -B build-gpu -DCOLO_CUDA=ON -DCOLO_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  cmake --build build-gpu -j"$(nproc)" || exit 1
fi
if [ -d .devpkgs ] && ls .devpkgs/*.deb >/dev/null 2>&1; then
  libs=$(mktemp -d)
  for f in .devpkgs/*.deb; do dpkg -x "$f" "$libs"; done
  export LD_LIBRARY_PATH="$libs/usr/lib/x86_64-linux-gnu:$libs/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}"
fi

echo "== nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
echo "== git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# The build folder may come from another path: run each test binary directly.
fail=0
echo "== tests"
for t in build-gpu/test_*; do
  [ -x "$t" ] || continue
  if out=$("$t" 2>&1); then
    echo "PASS $(basename "$t") $(echo "$out" | grep -c '\[       OK \]') ok, $(echo "$out" | grep -c '\[  SKIPPED \]') skipped"
  else
    echo "FAIL $(basename "$t")"; echo "$out" | grep -E 'ERROR|FAILED|error' | head -20; fail=1
  fi
done
echo "== kernel benchmark (cuda)"
build-gpu/colo-bench-kernels --device cuda --seconds 1 || fail=1
cd "$root"
exit $fail

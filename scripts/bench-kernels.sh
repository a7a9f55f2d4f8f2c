#!/usr/bin/env bash
# Builds and runs the kernel micro-benchmark (GFLOP/s of the F32 matmul,
# GB/s of the quantized mat-vec). Arguments go to colo-bench-kernels,
# e.g. --device cuda --threads 2 --seconds 2.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${COLO_BUILD_DIR:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target colo-bench-kernels >/dev/null
exec "$build/colo-bench-kernels" "$@"

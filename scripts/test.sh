#!/usr/bin/env bash
# The test command: installs what is missing, fetches the model weights (tests
# that need weights that could not be fetched report themselves skipped),
# builds colo twice (the normal build, with CUDA when nvcc is found, and an
# ASan+UBSan build without CUDA) and runs the whole ctest suite in each,
# then each libFuzzer target for 20 s (scripts/fuzz.sh, a clang build).
#
#   scripts/test.sh            everything
#   COLO_TEST_QUICK=1 ...      the normal build only (no sanitizers, no fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh
if [ -x scripts/fetch-models.sh ]; then
  scripts/fetch-models.sh || echo "test: model weights unavailable; the tests that need them will be skipped" >&2
fi

build() { # dir, cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j"$jobs"
}

echo "== build (default)"
mkdir -p build
build build
echo "== tests (default)"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600

if [ "${COLO_TEST_QUICK:-0}" != 1 ]; then
  echo "== build (ASan + UBSan)"
  mkdir -p build-asan
  build build-asan -DCOLO_SANITIZE=ON -DCOLO_CUDA=OFF
  echo "== tests (ASan + UBSan)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900
  echo "== fuzz (each target 20 s)"
  scripts/fuzz.sh 20
fi

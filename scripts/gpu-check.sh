#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and CUDA (driver and runtime), runs colo's
# whole test suite on it, the CUDA tests included, and the kernel benchmark.
#
#   scripts/gpu-check.sh [--sanitize] [--no-bench]
#
# It uses build-gpu/ as scripts/gpu-pack.sh made it on a machine with the
# build dependencies (carried here with the source tree), or builds it when
# this machine has them. When .devpkgs/ holds Debian packages (from
# gpu-pack.sh), they are unpacked with dpkg -x into .devpkgs/root and put on
# LD_LIBRARY_PATH: nothing is installed.
#
# Paths: CMake bakes the absolute path of the tree where build-gpu was made
# into the test list (CTestTestfile.cmake) and into the test programs (where
# test data lives). When this tree sits elsewhere, the script links that
# original path to this tree (if the path is free and can be created), so
# that every baked path resolves; otherwise (or with COLO_GPU_NO_LINK=1) it
# rewrites the test lists to this tree, and tests that read files through a
# baked path may fail: then move the tree to the original path.
#
# --sanitize  also runs the CUDA tests under compute-sanitizer (memcheck)
# --no-bench  skips the kernel benchmark
# Output goes to the terminal and to build-gpu/gpu-check.log (git-ignored).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)
sanitize=0 bench=1
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    --no-bench) bench=0 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $a" >&2; exit 2 ;;
  esac
done

if [ ! -f build-gpu/CMakeCache.txt ]; then
  echo "gpu-check: no build-gpu/: building it here (needs colo's build dependencies)"
  cmake -S . -B build-gpu -DCOLO_CUDA=ON -DCOLO_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  cmake --build build-gpu -j"$(nproc)" || exit 1
fi
exec > >(tee build-gpu/gpu-check.log) 2>&1

# ---- libraries -------------------------------------------------------------------
if ls .devpkgs/*.deb >/dev/null 2>&1; then
  rm -rf .devpkgs/root && mkdir -p .devpkgs/root
  for f in .devpkgs/*.deb; do dpkg -x "$f" .devpkgs/root || { echo "gpu-check: cannot unpack $f"; exit 1; }; done
  libdirs=$(find "$root/.devpkgs/root" -name '*.so*' -printf '%h\n' | sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:-}"
fi
# CUDA's own libraries, when the loader does not know them yet.
probe=build-gpu/test_backend_cuda
if [ -x "$probe" ] && ldd "$probe" | grep -q 'not found'; then
  for l in $(ldd "$probe" | awk '/not found/ {print $1}'); do
    hit=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
    [ -n "$hit" ] && export LD_LIBRARY_PATH="$(dirname "$hit"):$LD_LIBRARY_PATH"
  done
fi
if [ -x "$probe" ] && ldd "$probe" | grep 'not found'; then
  echo "gpu-check: shared libraries are missing (above); run scripts/gpu-pack.sh where colo builds"
  exit 1
fi

echo "== machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"
nvidia-smi 2>&1 | sed -n '1,12p'
echo "colo commit: $(cat build-gpu/colo-commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# ---- where the build thinks the tree is ------------------------------------------------
orig=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build-gpu/CMakeCache.txt)
testdir="$root/build-gpu"
if [ -n "$orig" ] && [ "$orig" != "$root" ]; then
  if [ -z "${COLO_GPU_NO_LINK:-}" ] && [ ! -e "$orig" ] && mkdir -p "$(dirname "$orig")" 2>/dev/null &&
     ln -s "$root" "$orig" 2>/dev/null; then
    echo "gpu-check: linked $orig -> $root (the build's original tree)"
    testdir="$orig/build-gpu"
  elif [ -e "$orig/build-gpu/CTestTestfile.cmake" ] && [ "$(cd "$orig" && pwd -P)" = "$root" ]; then
    testdir="$orig/build-gpu"
  else
    echo "gpu-check: rewriting test paths $orig -> $root (tests reading files through baked paths may fail)"
    find build-gpu -name CTestTestfile.cmake -exec sed -i "s#$orig#$root#g" {} +
  fi
fi

fail=0
echo "== tests (ctest)"
if command -v ctest >/dev/null; then
  ctest --test-dir "$testdir" -j4 --output-on-failure --timeout 300 || fail=1
else
  echo "gpu-check: no ctest here: running each test program"
  for t in build-gpu/test_*; do
    [ -x "$t" ] || continue
    if out=$(cd build-gpu && "./$(basename "$t")" 2>&1); then
      echo "PASS $(basename "$t") ($(echo "$out" | grep -c '\[       OK \]') ok, $(echo "$out" | grep -c '\[  SKIPPED \]') skipped)"
    else
      echo "FAIL $(basename "$t")"; echo "$out" | tail -30; fail=1
    fi
  done
fi

# The CUDA tests skip without a usable device: on a GPU machine that is a failure.
echo "== CUDA device as colo sees it"
if ! out=$("$testdir/test_backend_cuda" 2>&1) || echo "$out" | grep -q '\[  SKIPPED \]'; then
  echo "$out" | tail -20
  echo "gpu-check: colo found no usable CUDA device (driver older than the CUDA runtime it was built with?)"
  fail=1
else
  echo "$out" | grep -E '^cuda:|partitions' || true
fi

if [ "$sanitize" = 1 ]; then
  echo "== compute-sanitizer (memcheck)"
  if command -v compute-sanitizer >/dev/null; then
    for t in test_backend_cuda test_ops_parity_cuda test_ops_cuda_shapes; do
      [ -x "$testdir/$t" ] || continue
      compute-sanitizer --tool memcheck --error-exitcode 3 "$testdir/$t" >"build-gpu/sanitize-$t.log" 2>&1 &&
        echo "clean: $t" || { echo "ERRORS: $t"; tail -40 "build-gpu/sanitize-$t.log"; fail=1; }
    done
  else
    echo "compute-sanitizer not found"
  fi
fi

if [ "$bench" = 1 ] && [ -x build-gpu/colo-bench-kernels ]; then
  echo "== kernel benchmark (cuda)"
  build-gpu/colo-bench-kernels --device cuda --seconds 1 || fail=1
fi
echo "== gpu-check: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail

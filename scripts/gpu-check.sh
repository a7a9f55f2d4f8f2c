#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and CUDA (driver and runtime), runs colo's
# whole test suite on it, the CUDA tests included, and the kernel benchmark.
#
#   scripts/gpu-check.sh [--sanitize] [--no-bench] [--no-suite]
#
# It uses build-gpu/ as scripts/gpu-pack.sh made it on a machine with the
# build dependencies (carried here as .gpu-pack/colo-gpu.tar.xz with the
# source tree), or builds it when this machine has them. scripts/gpu-env.sh
# unpacks the archive, puts the carried Debian libraries on LD_LIBRARY_PATH
# (nothing is installed) and makes the paths baked into the build resolve.
#
# --sanitize  also runs every CUDA test under compute-sanitizer (memcheck;
#             racecheck and synccheck for the attention kernels' tests)
# --no-bench  skips the kernel benchmark
# --no-suite  skips the test suite (still checks that colo finds the device)
# Output goes to the terminal and to build-gpu/gpu-check.log (git-ignored).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
sanitize=0 bench=1 suite=1
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    --no-bench) bench=0 ;;
    --no-suite) suite=0 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $a" >&2; exit 2 ;;
  esac
done

if [ ! -f build-gpu/CMakeCache.txt ] && [ ! -f .gpu-pack/colo-gpu.tar.xz ]; then
  echo "gpu-check: no build-gpu/: building it here (needs colo's build dependencies)"
  cmake -S . -B build-gpu -DCOLO_CUDA=ON -DCOLO_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  cmake --build build-gpu -j"$(nproc)" || exit 1
fi
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh
gpu_env || exit 1
exec > >(tee build-gpu/gpu-check.log) 2>&1

echo "== machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"
nvidia-smi 2>&1 | sed -n '1,12p'
echo "colo commit: $(cat build-gpu/colo-commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
testdir=$GPU_TESTDIR
# The API-client tests install their clients with pip, and skip when they
# cannot; a GPU machine is often offline, so pip gives up at once.
export PIP_RETRIES=${PIP_RETRIES:-0} PIP_TIMEOUT=${PIP_TIMEOUT:-5}
jobs=$(( $(nproc) / 2 )); [ "$jobs" -lt 2 ] && jobs=2

fail=0
[ "$suite" = 1 ] && echo "== tests (ctest)"
if [ "$suite" = 0 ]; then
  :
elif command -v ctest >/dev/null; then
  ctest --test-dir "$testdir" -j"$jobs" --output-on-failure --timeout 300 || fail=1
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
  # Every CUDA test under memcheck; those with attention kernels also under
  # racecheck (shared memory) and synccheck. Each run is time-boxed
  # (SANITIZE_TIMEOUT seconds, default 240): a run that times out is
  # reported as such, not as clean. SANITIZE_TESTS (names) and
  # SANITIZE_TOOLS narrow it, e.g. to two tests under memcheck alone.
  echo "== compute-sanitizer"
  # CUDA's tools are not always on PATH
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/nvidia/*/bin; do
    command -v compute-sanitizer >/dev/null && break
    [ -x "$d/compute-sanitizer" ] && PATH=$PATH:$d
  done
  if command -v compute-sanitizer >/dev/null; then
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do # memcheck of every test first
      for t in "$testdir"/test_*cuda*; do
        [ -x "$t" ] || continue
        t=$(basename "$t")
        case " ${SANITIZE_TESTS:-$t} " in *" $t "*) ;; *) continue ;; esac
        case "$tool:$t" in memcheck:* | *:test_ops_cuda_shapes | *:test_ops_parity_cuda) ;; *) continue ;; esac
        log="build-gpu/sanitize-$tool-$t.log"
        (cd "$testdir" && timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
          "./$t") >"$log" 2>&1
        rc=$?
        if [ $rc = 0 ] && ! grep -q '\[  SKIPPED \]' "$log"; then
          echo "clean: $tool $t"
        elif [ $rc = 124 ]; then
          echo "TIMEOUT: $tool $t (after ${SANITIZE_TIMEOUT:-240} s)"; tail -5 "$log"; fail=1
        else
          echo "ERRORS: $tool $t (exit $rc)"; grep -m 20 -E '=====|FAILED|SKIPPED' "$log"; tail -20 "$log"; fail=1
        fi
      done
    done
  else
    echo "compute-sanitizer not found"; fail=1
  fi
fi

if [ "$bench" = 1 ] && [ -x build-gpu/colo-bench-kernels ]; then
  echo "== kernel benchmark (cuda)"
  build-gpu/colo-bench-kernels --device cuda --seconds 1 || fail=1
fi
echo "== gpu-check: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail

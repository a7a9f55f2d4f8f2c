#!/usr/bin/env bash
# The GPU run of docs/GPU.md, in stages sized for short calls on a GPU
# machine that has CUDA but none of colo's build dependencies. Prepare with
# scripts/gpu-pack.sh where colo builds, carry .gpu-pack/ with the tree, then:
#
#   scripts/gpu-run.sh [--out DIR] STAGE...
#
# A window of 15 minutes of GPU time (the machine's start included) takes two
# calls (docs/GPU.md, "A 15-minute window"):
#   window     one call of at most WINDOW seconds (480): cuda, matvec, then a
#              short replay (separate+priority, fair, partition; 10 s phases)
#              with whatever time is left; the replay's models are written in
#              the background while the tests run, and a failed stage does not
#              stop the next
#   sanitize   then, if 4 minutes remain: SANITIZE_TESTS under SANITIZE_TOOLS
#
# Stages:
#   cuda       the CUDA test programs alone (test_*cuda*), one after another,
#              each with its whole output, time-boxed (TIMEOUT_CUDA_TEST, 150)
#   check      the whole suite on the GPU, CUDA tests included (gpu-check.sh)
#   sanitize   CUDA tests under compute-sanitizer: SANITIZE_TESTS (default
#              every one) with SANITIZE_TOOLS (default memcheck, then racecheck
#              and synccheck for the op tests), SANITIZE_TIMEOUT s per run
#   matvec     mat-vec GB/s of MATVEC_TYPES (q4_k,q6_k,q8_0,q4_0) against a
#              device-to-device copy
#   kernels    colo-bench-kernels on the GPU: mat-vec GB/s of every weight type
#              against a device-to-device copy, prefill products against
#              cuBLAS's GEMM, batched rows, decode attention
#   decode     synthetic Llama-3.2-1B, Phi-3.5-mini and Llama-3.1-8B shapes
#              (Q4_K_M, written here by colo-mkmodel): prefill and decode
#              tokens/s at batch 1, 8 and 32 (bench-llm.sh); the two smaller
#              also with decode steps as CUDA graphs (--cuda-graphs)
#   memory     load and wake time of the 8B shape (bench-lifecycle.py --wake);
#              borrow and reclaim in CUDA virtual memory (bench-elastic.py)
#   replay     Phi-3.5-mini (hi: priority high, one connection) beside
#              DeepSeek-R1-Distill-Llama-8B (be: priority low, BE_CONC
#              connections), memory fractions 0.4 each: two separate
#              colo-servers, then one colo-server under each policy, each model
#              alone and together (bench-serve.sh colocation)
#
# Each stage writes DIR/STAGE.log as it goes (line-buffered); replay's JSON
# and TSV files go to DIR/replay-files.tar.gz, the sanitizer's logs to
# DIR/sanitize-files.tar.gz; DIR/summary.txt has a line per stage (exit
# status, seconds). DIR is $OUT when set, else gpu-out/. Every stage is
# time-boxed: TIMEOUT_<STAGE> seconds (defaults below), and within a window
# also by the time left, so a call ends with its logs even when a stage hangs.
#
# Environment: BUILD (build-gpu), DEVICE (cuda), MODELS (where synthetic
# models are written, default /tmp/colo-gpu-models), DURATION (12; 10 in a
# window), WARMUP (2), BE_CONC (16), MAX_TOKENS (64; 32 in a window), POLICIES (replay:
# "separate+timeslice spatial priority partition fair"; in a window
# "separate+priority fair partition"), LLAMA_BENCH (a llama-bench built with
# CUDA for sm_90: decode also runs it on the same files; by default the one
# carried as .gpu-pack/llama-bench.xz, if any). SMALL=1 uses tiny
# shapes: with BUILD=build DEVICE=cpu SMALL=1 every stage rehearses on a
# machine without a GPU (the CUDA tests then skip, which cuda reports as a
# failure).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

out=${OUT:-gpu-out}
stages=()
window=0
t_start=$(date +%s)
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,57p' "$0"; exit 0 ;;
    window) window=1; stages+=(cuda matvec replay); shift ;;
    cuda|check|sanitize|matvec|kernels|decode|memory|replay) stages+=("$1"); shift ;;
    *) echo "gpu-run: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#stages[@]} -gt 0 ] || { sed -n '2,57p' "$0"; exit 2; }

BUILD=${BUILD:-build-gpu}
DEVICE=${DEVICE:-cuda}
MODELS=${MODELS:-/tmp/colo-gpu-models}
WARMUP=${WARMUP:-2}
BE_CONC=${BE_CONC:-16}
MATVEC_TYPES=${MATVEC_TYPES:-q4_k,q6_k,q8_0,q4_0}
if [ "$window" = 1 ]; then
  # 32 tokens: at 16 connections an answer of the 8B shape must end inside a 10 s phase
  MAX_TOKENS=${MAX_TOKENS:-32}
  DURATION=${DURATION:-10}
  POLICIES=${POLICIES:-separate+priority fair partition}
  WINDOW=${WINDOW:-480}
else
  MAX_TOKENS=${MAX_TOKENS:-64}
  DURATION=${DURATION:-12}
  POLICIES=${POLICIES:-separate+timeslice spatial priority partition fair}
fi
: "${TIMEOUT_CUDA:=300}" "${TIMEOUT_CUDA_TEST:=150}" "${TIMEOUT_CHECK:=300}" "${TIMEOUT_SANITIZE:=420}"
: "${TIMEOUT_MATVEC:=60}" "${TIMEOUT_KERNELS:=240}" "${TIMEOUT_DECODE:=360}" "${TIMEOUT_MEMORY:=240}"
: "${TIMEOUT_REPLAY:=420}"
# In a window, the least a later stage is left (seconds): an earlier stage's
# box is cut so that these remain.
declare -A RESERVE=([cuda]=0 [matvec]=30 [replay]=200)
mkdir -p "$out" "$MODELS"
out=$(cd "$out" && pwd -P)

if [ "$BUILD" = build-gpu ]; then
  # shellcheck source=scripts/gpu-env.sh
  . scripts/gpu-env.sh
  gpu_env >"$out/env.log" 2>&1 || { cat "$out/env.log"; exit 1; }
  # a llama-bench built with CUDA for sm_90, carried beside the archive
  if [ -z "${LLAMA_BENCH:-}" ] && [ -f .gpu-pack/llama-bench.xz ]; then
    xz -dc .gpu-pack/llama-bench.xz >"$MODELS/llama-bench" && chmod +x "$MODELS/llama-bench" &&
      LLAMA_BENCH=$MODELS/llama-bench
  fi
  if [ -n "${LLAMA_BENCH:-}" ] && ! gpu_find_libs "$LLAMA_BENCH" >>"$out/env.log" 2>&1; then
    echo "gpu-run: $LLAMA_BENCH misses shared libraries (env.log): decode runs without it" >>"$out/env.log"
    LLAMA_BENCH=
  fi
  cat "$out/env.log"
fi

# model NAME: writes the synthetic model NAME (Q4_K_M) unless it is there;
# prints its path. Shapes from colo-mkmodel --help; SMALL=1 shrinks them.
# One writer per file: a second caller (the replay, while the window writes
# the models in the background) waits for the first.
model() {
  local f="$MODELS/$1.gguf" args rc=0
  case "$1" in
    llama-1b) args="--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --llama3-rope" ;;
    phi35-mini) args="--arch phi3 --layers 32 --dim 3072 --heads 32 --kv-heads 32 --ffn 8192 --vocab 32064 --untied" ;;
    llama-8b) args="--layers 32 --dim 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --llama3-rope
                    --rope-base 500000 --untied" ;;
  esac
  [ "${SMALL:-0}" = 1 ] && args=$(echo "$args" | sed -E 's/--layers [0-9]+/--layers 2/; s/--dim [0-9]+/--dim 256/;
    s/--ffn [0-9]+/--ffn 512/; s/--vocab [0-9]+/--vocab 4096/; s/--heads 32/--heads 8/; s/--kv-heads 32/--kv-heads 8/')
  until mkdir "$f.lock" 2>/dev/null; do # a lock left by a writer that is gone is taken over
    [ -f "$f.lock/pid" ] && ! kill -0 "$(cat "$f.lock/pid")" 2>/dev/null && rm -rf "$f.lock"
    sleep 0.5
  done
  echo $$ >"$f.lock/pid"
  if [ ! -s "$f" ]; then
    # shellcheck disable=SC2086 # args is several flags on purpose
    "$BUILD/colo-mkmodel" --out "$f.tmp" $args --ctx 4096 --type q4_k_m >&2 && mv "$f.tmp" "$f" || rc=1
  fi
  rm -rf "$f.lock"
  [ $rc = 0 ] && echo "$f"
}

# The CUDA test programs, one at a time, as ctest would run them (its
# environment), each with its whole output. A program that skips (colo found
# no device) counts as failed: on a GPU machine that means colo cannot use it.
stage_cuda() {
  local testdir=${GPU_TESTDIR:-$BUILD} t name rc fail=0 t0
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"
  echo "colo commit: $(cat "$BUILD/colo-commit.txt" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"
  for t in test_backend_cuda test_ops_parity_cuda test_ops_cuda_shapes test_families_cuda test_bert_cuda \
    test_engine_cuda; do
    [ -x "$testdir/$t" ] || { echo "MISSING $t"; fail=1; continue; }
    name=$(sed -n "s#^add_test(\[=\[\(.*/$t\)\]=\].*#\1#p" "$testdir"/CTestTestfile.cmake 2>/dev/null | head -1)
    echo "== $t"
    t0=$(date +%s)
    (cd "$testdir" && COLO_BINARY_DIR=$testdir XDG_STATE_HOME="$testdir/test-state/${name//\//_}" \
      timeout --kill-after=5 "$TIMEOUT_CUDA_TEST" $LB "./$t") 2>&1 | tee "$out/cuda-$t.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ] && grep -q '^\[  SKIPPED \] test_cuda_present' "$out/cuda-$t.log"; then
      echo "SKIPPED $t (no usable CUDA device, $(($(date +%s) - t0)) s)"; fail=1
    elif [ "$rc" = 0 ]; then # a case may skip for what the device lacks (it says why)
      echo "PASS $t ($(grep -c '^\[       OK \]' "$out/cuda-$t.log") ok, $(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' \
        "$out/cuda-$t.log" | head -1 | grep . || echo 0) skipped, $(($(date +%s) - t0)) s)"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      echo "TIMEOUT $t (after $TIMEOUT_CUDA_TEST s)"; fail=1
    else
      echo "FAIL $t (exit $rc, $(($(date +%s) - t0)) s): $(grep -E '^\[  FAILED  \]' "$out/cuda-$t.log" |
        sed -n 's/.*\] //p' | sort -u | tr '\n' ' ')"; fail=1
    fi
    rm -f "$out/cuda-$t.log"
  done
  return $fail
}

stage_check() { scripts/gpu-check.sh --no-bench; }

stage_sanitize() {
  SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-120} $LB scripts/gpu-check.sh --no-suite --sanitize --no-bench
  local rc=$?
  (cd build-gpu && tar -czf "$out/sanitize-files.tar.gz" sanitize-*.log) 2>/dev/null
  return $rc
}

stage_kernels() { $LB "$BUILD/colo-bench-kernels" --device "$DEVICE" --seconds 0.2; }

stage_matvec() { $LB "$BUILD/colo-bench-kernels" --device "$DEVICE" --matvec --types "$MATVEC_TYPES" --seconds 0.2; }

stage_decode() {
  local m f
  for m in llama-1b phi35-mini llama-8b; do
    f=$(model "$m") || { echo "gpu-run: cannot write $m"; return 1; }
    echo "== $m"
    COLO_BUILD_DIR=$BUILD REPEATS=2 scripts/bench-llm.sh "$f" --device "$DEVICE" || return 1
    if [ "$m" != llama-8b ] && [ "$DEVICE" = cuda ]; then # launch-bound shapes: decode steps as graphs
      echo "== $m+graphs"
      COLO_BUILD_DIR=$BUILD REPEATS=2 scripts/bench-llm.sh "$f" --device "$DEVICE" --cuda-graphs || return 1
    fi
    if [ -n "${LLAMA_BENCH:-}" ]; then # llama.cpp on the same file, every layer on the GPU
      echo "== $m: llama-bench"
      "$LLAMA_BENCH" -m "$f" -p 64 -n 64 -ngl 99 -r 3 || echo "gpu-run: llama-bench failed on $m"
    fi
  done
}

stage_memory() {
  local f
  f=$(model llama-8b) || return 1
  python3 scripts/bench-lifecycle.py --build "$BUILD" --device "$DEVICE" --model "llama-8b=$f:0.4" --runs 3 --wake ||
    return 1
  echo "== elastic memory: four models bursting in turn, static fractions against borrowing"
  python3 scripts/bench-elastic.py --build "$BUILD" --device "$DEVICE" --repeat 2
}

stage_replay() {
  local hi be
  hi=$(model phi35-mini) && be=$(model llama-8b) || return 1
  HI_MODEL=$hi BE_MODEL=$be MODEL=$hi BUILD=$BUILD DEVICE=$DEVICE MEM_FRACTION=0.4 HI_CONC=1 BE_CONC=$BE_CONC \
    MAX_TOKENS=$MAX_TOKENS DURATION=$DURATION WARMUP=$WARMUP ROUNDS=1 POLICIES=$POLICIES OUT="$out/replay" \
    scripts/bench-serve.sh colocation
}

# Programs write their output line by line, so a stage stopped by its box
# leaves everything it printed in its log.
LB=""
command -v stdbuf >/dev/null && LB="stdbuf -oL -eL"

echo "gpu-run: $(date -u +%Y-%m-%dT%H:%M:%SZ) stages ${stages[*]} (device $DEVICE, build $BUILD)" | tee -a "$out/summary.txt"
export -f model
export BUILD DEVICE MODELS DURATION WARMUP BE_CONC MAX_TOKENS POLICIES MATVEC_TYPES TIMEOUT_CUDA_TEST out SMALL
export LLAMA_BENCH LB GPU_TESTDIR
if [ "$window" = 1 ]; then # the replay's models, written while the tests run
  (model phi35-mini && model llama-8b) >"$out/models.log" 2>&1 &
fi
status=0
for i in "${!stages[@]}"; do
  st=${stages[$i]}
  var="TIMEOUT_${st^^}"
  box=${!var}
  if [ "$window" = 1 ]; then # what is left of the window, less what later stages need
    left=$((WINDOW - ($(date +%s) - t_start)))
    for later in "${stages[@]:$((i + 1))}"; do left=$((left - ${RESERVE[$later]:-0})); done
    [ "$left" -lt "$box" ] && box=$left
    [ "$box" -lt 10 ] && box=10
  fi
  t0=$(date +%s)
  echo "== stage $st (at most $box s)"
  # the stage runs in a child shell so that timeout can stop it and all it started
  export -f "stage_$st"
  timeout --kill-after=10 "$box" bash -c "stage_$st" >"$out/$st.log" 2>&1
  rc=$?
  tail -40 "$out/$st.log"
  [ $rc = 124 ] && echo "gpu-run: stage $st stopped after $box s"
  [ $rc = 0 ] || status=1
  if [ "$st" = replay ] && [ -d "$out/replay" ]; then
    tar -C "$out" -czf "$out/replay-files.tar.gz" replay && rm -rf "$out/replay"
  fi
  printf '%-9s exit %-3s %4s s\n' "$st" "$rc" "$(($(date +%s) - t0))" | tee -a "$out/summary.txt"
done
echo "gpu-run: $(($(date +%s) - t_start)) s in all" | tee -a "$out/summary.txt"
# What comes back from a lent machine is at most 8 files: past that, all but
# the summary travel as one archive.
if [ "$(find "$out" -mindepth 1 -maxdepth 1 | wc -l)" -gt 8 ]; then
  (cd "$out" && find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name gpu-run-files.tar.gz -printf '%P\0' |
    tar --null -czf gpu-run-files.tar.gz -T - --remove-files)
fi
exit $status

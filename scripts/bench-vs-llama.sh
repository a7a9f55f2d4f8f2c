#!/usr/bin/env bash
# Speed of colo against llama.cpp on the same GGUF file, side by side in one
# run: the two programs alternate REPEATS times and the median of each is
# printed with their ratio. A benchmark: it prints and asserts nothing.
#
#   LLAMA_BENCH=/path/to/llama-bench scripts/bench-vs-llama.sh MODEL.gguf [DEPTHS] [REPEATS]
#   LLAMA_BENCH=/path/to/llama-bench scripts/bench-vs-llama.sh --prefill MODEL.gguf [TOKENS] [REPEATS]
#
# Decode (the default): single-stream decode speed at several context
# depths. DEPTHS: comma-separated prompt lengths before decoding (default
# 0,256,1024,2000). colo's side is colo-generate with a prompt of DEPTH
# tokens (" the" repeated), greedy, 64 new tokens; llama.cpp's is
# `llama-bench -p 0 -n 64 -d DEPTH -r 1`.
# --prefill: prompt processing speed. TOKENS: comma-separated prompt lengths
# (default 512). colo's side is colo-generate's prefill figure for a prompt
# of exactly TOKENS tokens (" the" repeated, the count fitted to the
# model's tokenizer by a first run), one new token; llama.cpp's is
# `llama-bench -p TOKENS -n 0 -r 1`.
# REPEATS: default 3. llama-bench comes from llama.cpp (e.g. built from the
# llama-cpp-python sdist on PyPI); it is not part of colo. THREADS=N sets
# both sides' threads (default 2); LLAMA_ARGS adds arguments to every
# llama-bench run (e.g. "--poll 0": its threads sleep rather than spin while
# they wait, which matters on a shared machine). Each run and the load
# average go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=decode
if [ "${1:-}" = --prefill ]; then mode=prefill; shift; fi
model=${1:?usage: LLAMA_BENCH=... scripts/bench-vs-llama.sh [--prefill] MODEL.gguf [DEPTHS|TOKENS] [REPEATS]}
if [ $mode = prefill ]; then depths=${2:-512}; else depths=${2:-0,256,1024,2000}; fi
reps=${3:-3}
bench=${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench program of llama.cpp}
build=${COLO_BUILD_DIR:-build-rel}
threads=${THREADS:-2}
[ -x "$build/colo-generate" ] || { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build "$build" -j"$(nproc)" --target colo-generate >/dev/null; }

calc_median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

colo_tps() { # depth -> decode tokens/s
  local d=$1 prompt
  if [ "$d" -gt 0 ]; then prompt=$(printf ' the%.0s' $(seq 1 "$d")); else prompt="The"; fi
  "$build/colo-generate" --model "$model" --prompt "$prompt" --temperature 0 --max-tokens 64 --threads "$threads" \
    --memory-bytes $((4 << 30)) 2>&1 >/dev/null | sed -n 's/.*decode [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p'
}

llama_tps() {
  "$bench" -m "$model" -p 0 -n 64 -d "$1" -t "$threads" -r 1 ${LLAMA_ARGS:-} -o csv 2>/dev/null |
    python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); print(r[-1]["avg_ts"])'
}

colo_prefill() { # words -> "tokens tokens/s" of colo-generate's prefill
  local prompt
  prompt=$(printf ' the%.0s' $(seq 1 "$1"))
  "$build/colo-generate" --model "$model" --prompt "$prompt" --temperature 0 --max-tokens 1 --threads "$threads" \
    --memory-bytes $((4 << 30)) 2>&1 >/dev/null | sed -n 's/.*prefill \([0-9]*\) tokens x 1 in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1 \2/p'
}

llama_pp() {
  "$bench" -m "$model" -p "$1" -n 0 -t "$threads" -r 1 ${LLAMA_ARGS:-} -o csv 2>/dev/null |
    python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); print(r[-1]["avg_ts"])'
}

IFS=, read -ra ds <<<"$depths"
if [ $mode = prefill ]; then
  echo "model: $model; prefill; $threads threads; $reps alternating runs per length (medians)"
  printf '%8s %14s %14s %8s\n' tokens "colo tok/s" "llama.cpp tok/s" ratio
  for n in "${ds[@]}"; do
    read -r got _ <<<"$(colo_prefill "$n")"
    words=$((2 * n - got)) # the tokenizer's extra tokens (BOS) off the count
    c=() l=()
    for _ in $(seq 1 "$reps"); do
      read -r got tps <<<"$(colo_prefill "$words")"
      [ "$got" = "$n" ] || { echo "colo's prompt has $got tokens, not $n" >&2; exit 1; }
      c+=("$tps")
      l+=("$(llama_pp "$n")")
    done
    echo "  $n tokens runs: colo ${c[*]}; llama.cpp ${l[*]}; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    cm=$(printf '%s\n' "${c[@]}" | calc_median)
    lm=$(printf '%s\n' "${l[@]}" | calc_median)
    printf '%8s %14.1f %14.1f %8.2f\n' "$n" "$cm" "$lm" "$(python3 -c "print($cm / $lm)")"
  done
  exit 0
fi

echo "model: $model; $threads threads; $reps alternating runs per depth (medians)"
printf '%8s %14s %14s %8s\n' depth "colo tok/s" "llama.cpp tok/s" ratio
for d in "${ds[@]}"; do
  c=() l=()
  for _ in $(seq 1 "$reps"); do
    c+=("$(colo_tps "$d")")
    l+=("$(llama_tps "$d")")
  done
  echo "  depth $d runs: colo ${c[*]}; llama.cpp ${l[*]}; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  cm=$(printf '%s\n' "${c[@]}" | calc_median)
  lm=$(printf '%s\n' "${l[@]}" | calc_median)
  printf '%8s %14.1f %14.1f %8.2f\n' "$d" "$cm" "$lm" "$(python3 -c "print($cm / $lm)")"
done

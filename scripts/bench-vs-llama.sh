#!/usr/bin/env bash
# Single-stream decode speed of colo against llama.cpp on the same GGUF file,
# at several context depths, side by side in one run: for each depth, the
# two programs alternate REPEATS times and the median of each is printed
# with their ratio. A benchmark: it prints and asserts nothing.
#
#   LLAMA_BENCH=/path/to/llama-bench scripts/bench-vs-llama.sh MODEL.gguf [DEPTHS] [REPEATS]
#
# DEPTHS: comma-separated prompt lengths before decoding (default 0,256,1024,2000);
# REPEATS: default 3. llama-bench comes from llama.cpp (e.g. built from the
# llama-cpp-python sdist on PyPI); it is not part of colo. colo's side is
# colo-generate with a prompt of DEPTH tokens (" the" repeated), greedy, 64
# new tokens, 2 threads; llama.cpp's is `llama-bench -p 0 -n 64 -d DEPTH -t 2 -r 1`.
# THREADS=N sets both sides' threads. Each depth's runs and the load average
# go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: LLAMA_BENCH=... scripts/bench-vs-llama.sh MODEL.gguf [DEPTHS] [REPEATS]}
depths=${2:-0,256,1024,2000}
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
  "$bench" -m "$model" -p 0 -n 64 -d "$1" -t "$threads" -r 1 -o csv 2>/dev/null |
    python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); print(r[-1]["avg_ts"])'
}

echo "model: $model; $threads threads; $reps alternating runs per depth (medians)"
printf '%8s %14s %14s %8s\n' depth "colo tok/s" "llama.cpp tok/s" ratio
IFS=, read -ra ds <<<"$depths"
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

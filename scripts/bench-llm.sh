#!/usr/bin/env bash
# LLM throughput on the CPU (or --device cuda): prefill and decode tokens/s
# at batch 1, 8 and 32 with colo-generate, and resident memory. A benchmark:
# it prints and asserts nothing.
#   scripts/bench-llm.sh [MODEL.gguf] [extra colo-generate flags]
# REPEATS=N (default 1) runs the three batch sizes N times, alternating, and
# then prints each batch's median decode tokens/s and its ratio to batch 1's
# (ratios taken within one run hold up better than absolute figures on a
# shared machine), with the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-$(scripts/fetch-models.sh --print-dir)/SmolLM2-135M-Instruct.Q4_1.gguf}
shift || true
build=${COLO_BUILD_DIR:-build}
reps=${REPEATS:-1}
[ -x "$build/colo-generate" ] || { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build "$build" -j"$(nproc)" --target colo-generate; }
prompt="Once upon a time, in a small village by the sea, there lived an old fisherman who"
echo "model: $model ($(stat -c %s "$model") bytes)"
declare -A runs
for r in $(seq 1 "$reps"); do
  for b in 1 8 32; do
    out=$(/usr/bin/time -f "  max resident memory: %M KiB" "$build/colo-generate" --model "$model" --prompt "$prompt" \
      --temperature 0 --max-tokens 64 --batch "$b" "$@" 2>&1 >/dev/null | grep -E "prefill|resident" | sed "s/^/batch $b: /")
    echo "$out"
    runs[$b]+="$(echo "$out" | sed -n 's/.*decode [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p') "
  done
done
if [ "$reps" -gt 1 ]; then
  median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
  m1=$(echo "${runs[1]}" | median)
  for b in 1 8 32; do
    m=$(echo "${runs[$b]}" | median)
    printf 'batch %2d: decode tokens/s %s (median %s), %.2fx batch 1\n' "$b" "${runs[$b]}" "$m" "$(python3 -c "print($m / $m1)")"
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

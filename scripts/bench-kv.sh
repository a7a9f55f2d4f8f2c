#!/usr/bin/env bash
# Single-stream decode speed by KV cache type at several context depths:
# for each depth, colo-generate runs once per type, the types alternating,
# REPEATS times, and the median of each type is printed with its ratio to
# the first type's. A benchmark: it prints and asserts nothing.
#
#   scripts/bench-kv.sh MODEL.gguf [DEPTHS] [REPEATS] [TYPES]
#
# DEPTHS: comma-separated prompt lengths before decoding (default
# 256,1024,2000); REPEATS: default 5; TYPES: comma-separated KV types
# (default f16,q8_0). Each run is a prompt of DEPTH tokens (" the"
# repeated), greedy, 64 new tokens, THREADS threads (default 2), as
# scripts/bench-vs-llama.sh runs colo. Each depth's runs and the load
# average go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/bench-kv.sh MODEL.gguf [DEPTHS] [REPEATS] [TYPES]}
depths=${2:-256,1024,2000}
reps=${3:-5}
types=${4:-f16,q8_0}
build=${COLO_BUILD_DIR:-build-rel}
threads=${THREADS:-2}
[ -x "$build/colo-generate" ] || { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build "$build" -j"$(nproc)" --target colo-generate >/dev/null; }

calc_median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

colo_tps() { # depth type -> decode tokens/s
  local d=$1 t=$2 prompt
  prompt=$(printf ' the%.0s' $(seq 1 "$d"))
  "$build/colo-generate" --model "$model" --prompt "$prompt" --temperature 0 --max-tokens 64 --threads "$threads" \
    --kv-type "$t" --memory-bytes $((4 << 30)) 2>&1 >/dev/null |
    sed -n 's/.*decode [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p'
}

IFS=, read -ra ts <<<"$types"
echo "model: $model; $threads threads; $reps alternating runs per depth and KV type (medians)"
printf '%8s' depth
for t in "${ts[@]}"; do printf ' %12s' "$t tok/s"; done
for t in "${ts[@]:1}"; do printf ' %12s' "$t/${ts[0]}"; done
printf '\n'
IFS=, read -ra ds <<<"$depths"
for d in "${ds[@]}"; do
  declare -A runs=()
  for _ in $(seq 1 "$reps"); do
    for t in "${ts[@]}"; do runs[$t]+="$(colo_tps "$d" "$t") "; done
  done
  line="  depth $d runs:"
  for t in "${ts[@]}"; do line+=" $t ${runs[$t]};"; done
  echo "$line load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  printf '%8s' "$d"
  meds=()
  for t in "${ts[@]}"; do
    m=$(tr ' ' '\n' <<<"${runs[$t]}" | grep . | calc_median)
    meds+=("$m")
    printf ' %12.1f' "$m"
  done
  for m in "${meds[@]:1}"; do printf ' %12.2f' "$(python3 -c "print($m / ${meds[0]})")"; done
  printf '\n'
  unset runs
done

#!/usr/bin/env bash
# Decode and prefill on both x86 CPU classes, side by side in one run:
# colo's native path (AVX512-VNNI where the CPU has it) against a llama.cpp
# built for the machine, and colo's AVX2 path (COLO_CPU_GEMM_Q8=avx2, what
# a CPU without AVX512 runs) against a llama.cpp built with AVX512 off.
# Decode is also given as GB/s of weights read (each token reads every
# weight once) and as a share of the memory read bandwidth measured at the
# same thread count (colo-bench-kernels --bandwidth): the physical limit
# decode is held to. A benchmark: it prints and asserts nothing.
#
#   LLAMA_BENCH=PATH/llama-bench LLAMA_BENCH_AVX2=PATH/llama-bench \
#       scripts/bench-cpu-classes.sh MODEL.gguf [MODEL.gguf ...]
#
# The AVX2 llama.cpp comes from the same sources with
#   cmake -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
#         -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF
# (docs/BENCHMARKS.md, "Both CPU classes"). DEPTHS (default 0,256),
# TOKENS (prefill, default 512), REPEATS (default 3) and THREADS (default
# 2) are passed on to scripts/bench-vs-llama.sh, whose runs alternate the
# two programs; each class's runs go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: LLAMA_BENCH=... LLAMA_BENCH_AVX2=... $0 MODEL.gguf [...]" >&2; exit 2; }
native=${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench built for this machine}
avx2=${LLAMA_BENCH_AVX2:?set LLAMA_BENCH_AVX2 to a llama-bench built with AVX512 off}
build=${COLO_BUILD_DIR:-build-rel}
threads=${THREADS:-2}
depths=${DEPTHS:-0,256}
tokens=${TOKENS:-512}
reps=${REPEATS:-3}
export THREADS=$threads COLO_BUILD_DIR=$build
[ -x "$build/colo-bench-kernels" ] || cmake --build "$build" --target colo-bench-kernels >/dev/null

read_gbs=$("$build/colo-bench-kernels" --bandwidth --threads "$threads" --seconds 2 |
  sed -n 's/memory read: \([0-9.]*\) GB\/s.*/\1/p')
echo "memory read bandwidth: $read_gbs GB/s ($threads threads); load average $(cut -d' ' -f1-3 /proc/loadavg)"

# weights_mib MODEL: the MiB of weights colo-generate reports loading.
weights_mib() {
  "$build/colo-generate" --model "$1" --prompt "The" --max-tokens 1 --threads "$threads" \
    --memory-bytes $((4 << 30)) 2>&1 >/dev/null | sed -n 's/.*(\([0-9.]*\) MiB of weights).*/\1/p'
}

# rows CLASS OUT: bench-vs-llama.sh's table rows (decode, then prefill) for one class.
rows() {
  local class=$1 model=$2 bench=$native env=()
  if [ "$class" = avx2 ]; then bench=$avx2 env=(COLO_CPU_GEMM_Q8=avx2); fi
  env "${env[@]}" LLAMA_BENCH="$bench" scripts/bench-vs-llama.sh "$model" "$depths" "$reps" | awk 'NF == 4 && $1 ~ /^[0-9]+$/'
  env "${env[@]}" LLAMA_BENCH="$bench" scripts/bench-vs-llama.sh --prefill "$model" "$tokens" "$reps" |
    awk 'NF == 4 && $1 ~ /^[0-9]+$/ {print "p" $1, $2, $3, $4}'
}

echo
echo "| model | class | figure | colo tok/s | llama.cpp tok/s | ratio | colo GB/s of weights | of read bandwidth |"
echo "|---|---|---|---|---|---|---|---|"
for model in "$@"; do
  mib=$(weights_mib "$model")
  name=$(basename "$model" .gguf)
  for class in native avx2; do
    while read -r what colo llama ratio; do
      if [[ $what == p* ]]; then
        printf '| %s | %s | prefill %s | %s | %s | %sx | | |\n' "$name" "$class" "${what#p}" "$colo" "$llama" "$ratio"
      else
        gbs=$(python3 -c "print(f'{$mib * 1048576 * $colo / 1e9:.1f}')")
        share=$(python3 -c "print(f'{100 * $mib * 1048576 * $colo / 1e9 / $read_gbs:.0f}%')")
        printf '| %s | %s | decode, depth %s | %s | %s | %sx | %s | %s |\n' "$name" "$class" "$what" "$colo" "$llama" \
          "$ratio" "$gbs" "$share"
      fi
    done < <(rows "$class" "$model")
  done
done

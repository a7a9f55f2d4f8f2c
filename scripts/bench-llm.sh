#!/usr/bin/env bash
# LLM throughput on the CPU (or --device cuda): prefill and decode tokens/s
# at batch 1, 8 and 32 with colo-generate, and resident memory. A benchmark:
# it prints and asserts nothing.
#   scripts/bench-llm.sh [MODEL.gguf] [extra colo-generate flags]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-$(scripts/fetch-models.sh --print-dir)/SmolLM2-135M-Instruct.Q4_1.gguf}
shift || true
build=${COLO_BUILD_DIR:-build}
[ -x "$build/colo-generate" ] || { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build "$build" -j"$(nproc)" --target colo-generate; }
prompt="Once upon a time, in a small village by the sea, there lived an old fisherman who"
echo "model: $model ($(stat -c %s "$model") bytes)"
for b in 1 8 32; do
  /usr/bin/time -f "  max resident memory: %M KiB" "$build/colo-generate" --model "$model" --prompt "$prompt" \
    --temperature 0 --max-tokens 64 --batch "$b" "$@" 2>&1 >/dev/null | grep -E "prefill|resident" | sed "s/^/batch $b: /"
done

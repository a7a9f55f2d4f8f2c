#!/usr/bin/env bash
# The separate-process baseline on the CPU: SmolLM2-135M-Instruct served
# twice (models "chat" and "chat2", each with its own memory fraction), first
# as two colo-servers (one per model), then as one colo-server with both;
# each model alone, then both together; one command:
#
#   scripts/loadtest-baseline.sh [OUT_DIR] [extra colo-loadtest options]
#
# Writes OUT_DIR/config.yaml, baseline.json, baseline.html and
# baseline-requests.jsonl (default OUT_DIR: build/loadtest-baseline) and
# prints the table. The weights come from scripts/fetch-models.sh.
#
# Environment (defaults in brackets):
#   BUILD [build]  POLICY [priority] (scheduler.policy of both setups)  THREADS [0] (server.threads)
#   CONCURRENCY [2] (closed-loop connections per model)  DURATION [20]  WARMUP [3]
#   MAX_TOKENS [32]  COST [1.00] (USD per device-hour)  GOODPUT ['ttft:1000 tpot:100']
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
OUT=${1:-$BUILD/loadtest-baseline}
[ $# -gt 0 ] && shift
POLICY=${POLICY:-priority}
THREADS=${THREADS:-0}
CONCURRENCY=${CONCURRENCY:-2}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-3}
MAX_TOKENS=${MAX_TOKENS:-32}
COST=${COST:-1.00}
GOODPUT=${GOODPUT:-ttft:1000 tpot:100}

colo_build_missing colo-server colo-loadtest
cache=$COLO_MODELS
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -r "$model" ] || { echo "loadtest-baseline: no $model (run scripts/fetch-models.sh)" >&2; exit 2; }
mkdir -p "$OUT"
cat >"$OUT/config.yaml" <<YAML
# SmolLM2-135M-Instruct twice on the CPU, for colo-loadtest --baseline separate
server: { listen: "127.0.0.1:0", device: cpu, threads: $THREADS }
scheduler: { policy: $POLICY }
models:
  - name: chat
    kind: llama
    path: "$model"
    memory_fraction: 0.05
    max_seq_len: 512
    sla: { p99_ms: 5000, ttft_ms: 1000 }
  - name: chat2
    kind: llama
    path: "$model"
    memory_fraction: 0.05
    max_seq_len: 512
    sla: { p99_ms: 5000, ttft_ms: 1000 }
YAML
# shellcheck disable=SC2086 # GOODPUT is several words on purpose
"$BUILD/colo-loadtest" --baseline separate --config "$OUT/config.yaml" --server "$BUILD/colo-server" \
  --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" --stream --max-tokens "$MAX_TOKENS" \
  --goodput $GOODPUT --device-hourly-cost "$COST" \
  --json "$OUT/baseline.json" --html "$OUT/baseline.html" --requests-out "$OUT/baseline-requests.jsonl" "$@"

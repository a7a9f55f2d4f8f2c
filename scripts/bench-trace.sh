#!/usr/bin/env bash
# Many models, one memory budget: colo-loadtest's trace scenario (Zipf
# popularity over the models, bursty arrivals, one seed) against one
# colo-server serving eight models under one CPU budget that holds about
# three of them awake, and, when LLAMA_SERVER names a llama-server binary,
# against llama.cpp's router (--models-dir over the same files,
# --models-max 3, the same context per sequence) with the same requests at
# the same times:
#
#   scripts/bench-trace.sh [OUT_DIR] [extra colo-loadtest options]
#
# The models: SmolLM2-135M-Instruct (Q4_1) and Gemma 3 270M (Q4_K_M) from the
# model cache (scripts/fetch-models.sh), and six synthetic llama, qwen2 and
# qwen3 models at Q4_K_M written by colo-mkmodel (SYNTH: about 0.1 to 0.35
# GB each, so that a run fits a 2-core machine). Each colo model is
# guaranteed its file's size plus GUARANTEE_EXTRA_BYTES (activations, KV
# cache); the models whose guarantees fit the budget are in config.yaml, the
# others are loaded after start through POST /admin/models, putting idle
# models to sleep to make room, as every later wake does.
#
# For each rate of RATES, ROUNDS rounds alternate the sides (colo, router,
# colo, router...), each side a fresh server. Writes into OUT_DIR (default
# build/bench-trace): models/, config.yaml, RATE/ROUND/SIDE{.json,.html,
# -requests.jsonl,.log}, summary.json, and prints the medians over rounds,
# with the separate-servers baseline: how many of the models fit the budget
# as one colo-server each (a separate server holds its model all the time).
#
# Environment (defaults in brackets):
#   BUILD [build]  BUDGET_BYTES [943718400] (server.cpu_memory_bytes)
#   GUARANTEE_EXTRA_BYTES [104857600; 67108864 with MODELS=16]
#   MODELS_MAX [3] (the router's --models-max)
#   FILL [0.95] (the config's guarantees sum to at most this fraction of the
#   budget: the rest is room for the models' host memory past the overhead's
#   allowance, which the budget counts; docs/CONFIG.md, "Memory")
#   RATES ['0.25 0.5 1'] (requests/s over all models)  ROUNDS [3]
#   BURSTINESS [0.5]  ZIPF [1.0]  SEED [1]  DURATION [60]  INPUT_LEN [64]
#   OUTPUT_LEN [16]  GOODPUT ['ttft:2000 tpot:200']  CTX [512] (colo's
#   max_seq_len; the router's context per slot)  PARALLEL [4] (the router's
#   --parallel; its --ctx-size is CTX x PARALLEL)  LLAMA_SERVER (path;
#   unset: colo only)  COLO_PORT [18432]  ROUTER_PORT [18431]
#   MIN_RESIDENCY_MS (colo's server.min_residency_ms; unset: its default)
#   POLICY [deadline] (colo's scheduler.policy; with deadline every model
#   gets the SLOs of GOODPUT as its sla: first tokens by their deadlines)
#   MODELS [8] (8: the models above; 16: smollm2, gemma3 and fourteen
#   smaller synthetic models, SYNTH16, in the same budget)
#   LONG [0] (1: the long mode: ROUNDS 3 and each rate's DURATION long enough
#   for MIN_REQUESTS [200] requests per side per round, OUTPUT_LEN 8 unless
#   set; the summary gives attainment with its 95% interval over the rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
OUT=${1:-$BUILD/bench-trace}
[ $# -gt 0 ] && shift
BUDGET_BYTES=${BUDGET_BYTES:-943718400}
MODELS=${MODELS:-8}
# the 16 models' smaller shapes need less room for activations and KV cache
GUARANTEE_EXTRA_BYTES=${GUARANTEE_EXTRA_BYTES:-$([ "$MODELS" = 16 ] && echo 67108864 || echo 104857600)}
MODELS_MAX=${MODELS_MAX:-3}
FILL=${FILL:-0.95}
RATES=${RATES:-0.25 0.5 1}
ROUNDS=${ROUNDS:-3}
BURSTINESS=${BURSTINESS:-0.5}
ZIPF=${ZIPF:-1.0}
SEED=${SEED:-1}
DURATION=${DURATION:-60}
INPUT_LEN=${INPUT_LEN:-64}
OUTPUT_LEN_SET=${OUTPUT_LEN:-}
OUTPUT_LEN=${OUTPUT_LEN:-16}
GOODPUT=${GOODPUT:-ttft:2000 tpot:200}
CTX=${CTX:-512}
POLICY=${POLICY:-deadline}
PARALLEL=${PARALLEL:-4}
LONG=${LONG:-0}
MIN_REQUESTS=${MIN_REQUESTS:-200}
if [ "$LONG" = 1 ]; then
  ROUNDS=3
  OUTPUT_LEN=${OUTPUT_LEN_SET:-8}
fi
COLO_PORT=${COLO_PORT:-18432}
ROUTER_PORT=${ROUTER_PORT:-18431}
# name:arch:shape (colo-mkmodel), Q4_K_M
SYNTH=(
  "llama-s:llama:--layers 12 --dim 1024 --heads 16 --kv-heads 4 --ffn 2816"
  "llama-m:llama:--layers 16 --dim 1536 --heads 24 --kv-heads 8 --ffn 4096"
  "qwen2-s:qwen2:--layers 14 --dim 1024 --heads 16 --kv-heads 2 --ffn 3072"
  "qwen2-m:qwen2:--layers 20 --dim 1280 --heads 20 --kv-heads 4 --ffn 4096"
  "qwen3-s:qwen3:--layers 14 --dim 1024 --heads 16 --kv-heads 8 --head-dim 64 --ffn 3072"
  "qwen3-m:qwen3:--layers 24 --dim 1280 --heads 16 --kv-heads 8 --head-dim 128 --ffn 3584"
)
# MODELS=16: the same budget over fourteen smaller synthetic models (about
# 25 to 110 MB each at Q4_K_M) beside smollm2 and gemma3
SYNTH16=(
  "llama-xs:llama:--layers 8 --dim 512 --heads 8 --kv-heads 4 --ffn 1536"
  "llama-s:llama:--layers 10 --dim 768 --heads 12 --kv-heads 4 --ffn 2048"
  "llama-m:llama:--layers 12 --dim 1024 --heads 16 --kv-heads 4 --ffn 2816"
  "llama-l:llama:--layers 14 --dim 1024 --heads 16 --kv-heads 8 --ffn 3072"
  "qwen2-xs:qwen2:--layers 8 --dim 512 --heads 8 --kv-heads 2 --ffn 1536"
  "qwen2-s:qwen2:--layers 10 --dim 768 --heads 12 --kv-heads 2 --ffn 2048"
  "qwen2-m:qwen2:--layers 12 --dim 1024 --heads 16 --kv-heads 2 --ffn 2560"
  "qwen2-l:qwen2:--layers 14 --dim 1024 --heads 16 --kv-heads 2 --ffn 3072"
  "qwen3-xs:qwen3:--layers 8 --dim 512 --heads 8 --kv-heads 4 --head-dim 64 --ffn 1536"
  "qwen3-s:qwen3:--layers 10 --dim 768 --heads 12 --kv-heads 4 --head-dim 64 --ffn 2048"
  "qwen3-m:qwen3:--layers 12 --dim 1024 --heads 16 --kv-heads 8 --head-dim 64 --ffn 2816"
  "qwen3-l:qwen3:--layers 14 --dim 1024 --heads 16 --kv-heads 8 --head-dim 64 --ffn 3072"
  "llama-t:llama:--layers 6 --dim 512 --heads 8 --kv-heads 4 --ffn 1024"
  "qwen2-t:qwen2:--layers 6 --dim 512 --heads 8 --kv-heads 2 --ffn 1024"
)
case $MODELS in
  8) ;;
  16) SYNTH=("${SYNTH16[@]}") ;;
  *) echo "bench-trace: MODELS must be 8 or 16" >&2; exit 2 ;;
esac

colo_build_missing colo-server colo-loadtest colo-mkmodel
BUILD=$(cd "$BUILD" && pwd)
mkdir -p "$OUT/models"
OUT=$(cd "$OUT" && pwd)
colo_link_real_models "$OUT/models"
names=(smollm2 gemma3)
seed=1
for s in "${SYNTH[@]}"; do
  IFS=: read -r name arch shape <<<"$s"
  f="$OUT/models/$name.gguf"
  # a shape of another configuration under the same name is written again
  [ -s "$f" ] && [ "$(cat "$f.shape" 2>/dev/null)" != "$arch $shape" ] && rm -f "$f"
  # shellcheck disable=SC2086 # shape is several words on purpose
  [ -s "$f" ] || "$BUILD/colo-mkmodel" --out "$f" --arch "$arch" $shape --vocab 32000 --ctx 2048 --type q4_k_m \
    --seed "$seed" >/dev/null
  echo "$arch $shape" >"$f.shape"
  names+=("$name")
  seed=$((seed + 1))
done

# each model's guarantee; those that fit go in the file, the rest are loaded at run time
declare -A frac
in_file=() later=() sum=0
for n in "${names[@]}"; do
  size=$(stat -L -c %s "$OUT/models/$n.gguf")
  frac[$n]=$(awk -v s="$size" -v e="$GUARANTEE_EXTRA_BYTES" -v b="$BUDGET_BYTES" 'BEGIN { printf "%.4f", (s + e) / b }')
  if awk -v a="$sum" -v f="${frac[$n]}" -v m="$FILL" 'BEGIN { exit !(a + f <= m) }'; then
    in_file+=("$n")
    sum=$(awk -v a="$sum" -v f="${frac[$n]}" 'BEGIN { print a + f }')
  else
    later+=("$n")
  fi
done
# under deadline, every model's sla: GOODPUT's objectives (ttft:MS tpot:MS)
sla_json="" sla_yaml=""
if [ "$POLICY" = deadline ]; then
  for o in $GOODPUT; do
    sla_json+="${sla_json:+,}\"${o%%:*}_ms\":${o#*:}"
    sla_yaml+="${sla_yaml:+, }${o%%:*}_ms: ${o#*:}"
  done
  sla_json=",\"sla\":{$sla_json}" sla_yaml=", sla: { $sla_yaml }"
fi
{
  echo "# bench-trace: ${#names[*]} models under one CPU budget (the first ${#in_file[*]} here, the rest loaded at run time)"
  echo "server: { listen: \"127.0.0.1:$COLO_PORT\", device: cpu, cpu_memory_bytes: $BUDGET_BYTES${MIN_RESIDENCY_MS:+, min_residency_ms: $MIN_RESIDENCY_MS} }"
  echo "scheduler: { policy: $POLICY }"
  echo "models:"
  for n in "${in_file[@]}"; do
    echo "  - { name: $n, kind: llama, path: models/$n.gguf, memory_fraction: ${frac[$n]}, max_seq_len: $CTX$sla_yaml }"
  done
} >"$OUT/config.yaml"

model_args=()
for n in "${names[@]}"; do model_args+=(--model "$n"); done
# shellcheck disable=SC2206 # GOODPUT is several words on purpose
load=(--scenario trace "${model_args[@]}" --burstiness "$BURSTINESS" --zipf "$ZIPF" --seed "$SEED"
      --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --stream --path /v1/completions
      --goodput $GOODPUT)

# seconds of trace at RATE: DURATION, or in the long mode enough for
# MIN_REQUESTS requests (and 10% more, for the draw's spread)
duration_of() { # RATE
  if [ "$LONG" = 1 ]; then
    awk -v r="$1" -v n="$MIN_REQUESTS" -v d="$DURATION" 'BEGIN { s = int(n * 1.1 / r + 0.999); print (s > d ? s : d) }'
  else
    echo "$DURATION"
  fi
}

trap colo_stop_server EXIT

# the models named listed and settled (ready or sleeping)
wait_colo_models() { # NAME...
  for _ in $(seq 1 600); do
    curl -fs "http://127.0.0.1:$COLO_PORT/v1/models" | python3 -c '
import json, sys
want = set(sys.argv[1:])
got = {m["id"]: m.get("state") for m in json.load(sys.stdin)["data"]}
sys.exit(2 if any(got.get(n) == "failed" for n in want) else
         0 if want <= set(got) and all(got[n] in ("ready", "sleeping") for n in want) else 1)' "$@"
    case $? in 0) return 0 ;; 2) return 1 ;; esac
    sleep 0.5
  done
  return 1
}

run_colo() { # DIR RATE
  "$BUILD/colo-server" --config "$OUT/config.yaml" >"$1/colo.log" 2>&1 &
  server=$!
  colo_wait_health "http://127.0.0.1:$COLO_PORT/health/ready" "$server" "$1/colo.log"
  for n in "${later[@]}"; do
    curl -fs -X POST "http://127.0.0.1:$COLO_PORT/admin/models" -d "{\"name\":\"$n\",\"kind\":\"llama\",
      \"path\":\"models/$n.gguf\",\"memory_fraction\":${frac[$n]},\"max_seq_len\":$CTX$sla_json}" >/dev/null
    wait_colo_models "$n" || { echo "bench-trace: $n did not load; see $1/colo.log" >&2; return 1; }
  done
  "$BUILD/colo-loadtest" --url "http://127.0.0.1:$COLO_PORT" --server-pid "$server" "${load[@]}" --rate "$2" \
    --duration "$(duration_of "$2")" \
    --json "$1/colo.json" --html "$1/colo.html" --requests-out "$1/colo-requests.jsonl" "${extra[@]}" || true
  colo_stop_server
}

run_router() { # DIR RATE
  # --parallel slots share --ctx-size: give each slot colo's max_seq_len
  "$LLAMA_SERVER" --models-dir "$OUT/models" --models-max "$MODELS_MAX" --parallel "$PARALLEL" \
    --ctx-size $((CTX * PARALLEL)) --host 127.0.0.1 --port "$ROUTER_PORT" >"$1/router.log" 2>&1 &
  server=$!
  colo_wait_health "http://127.0.0.1:$ROUTER_PORT/health" "$server" "$1/router.log"
  "$BUILD/colo-loadtest" --url "http://127.0.0.1:$ROUTER_PORT" --server-pid "$server" "${load[@]}" --rate "$2" \
    --duration "$(duration_of "$2")" \
    --json "$1/router.json" --html "$1/router.html" --requests-out "$1/router-requests.jsonl" "${extra[@]}" || true
  colo_stop_server
}

extra=("$@")
echo "== ${#names[*]} models, budget $BUDGET_BYTES bytes (${#in_file[*]} in the file, ${#later[*]} loaded at run time);" \
  "rates $RATES; $ROUNDS rounds of $(for r in $RATES; do printf '%ss ' "$(duration_of "$r")"; done)at those rates; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for rate in $RATES; do
  for round in $(seq 1 "$ROUNDS"); do
    dir="$OUT/$rate/$round"
    mkdir -p "$dir"
    echo "-- rate $rate, round $round: colo"
    run_colo "$dir" "$rate"
    if [ -n "${LLAMA_SERVER:-}" ]; then
      echo "-- rate $rate, round $round: router"
      run_router "$dir" "$rate"
    fi
  done
done

sizes=()
for n in "${names[@]}"; do sizes+=("$n=$(awk -v f="${frac[$n]}" -v b="$BUDGET_BYTES" 'BEGIN { printf "%.0f", f * b }')"); done
python3 scripts/bench-trace-summary.py "$OUT" "$BUDGET_BYTES" "${sizes[@]}"

#!/usr/bin/env bash
# Many models, one memory budget: colo-loadtest's trace scenario (Zipf
# popularity over the models, bursty arrivals, one seed) against one
# colo-server serving SmolLM2-135M-Instruct and N synthetic models under one
# CPU budget, and, when LLAMA_SERVER names a llama-server binary, against
# llama.cpp's router (--models-dir, --models-max) with the same requests at
# the same times:
#
#   scripts/bench-trace.sh [OUT_DIR] [extra colo-loadtest options]
#
# Writes into OUT_DIR (default build/bench-trace): models/ (the GGUF files;
# SmolLM2 linked from the model cache, the synthetic ones written by
# colo-mkmodel), config.yaml, and per server SIDE.json, SIDE.html and
# SIDE-requests.jsonl (SIDE: colo, router); prints each table and a summary.
# The weights come from scripts/fetch-models.sh. Run the real comparison on a
# quiet machine; the defaults are a short check.
#
# Environment (defaults in brackets):
#   BUILD [build]  N_SYNTH [3] (synthetic models)  SYNTH_ARGS (colo-mkmodel shape)
#   ['--layers 4 --dim 256 --heads 4 --kv-heads 2 --ffn 768 --vocab 1024 --ctx 1024 --type q8_0']
#   BUDGET_BYTES [1073741824] (server.cpu_memory_bytes)  KEEP_ALIVE_MS [2000]
#   RATE [2] (requests/s over all models)  BURSTINESS [0.5]  ZIPF [1.0]  SEED [1]
#   DURATION [20]  WARMUP [0]  INPUT_LEN [64]  OUTPUT_LEN [16]  GOODPUT ['ttft:2000 tpot:200']
#   LLAMA_SERVER (path; unset: colo only)  MODELS_MAX [2] (the router's --models-max)
#   ROUTER_PORT [18431]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
OUT=${1:-$BUILD/bench-trace}
[ $# -gt 0 ] && shift
N_SYNTH=${N_SYNTH:-3}
SYNTH_ARGS=${SYNTH_ARGS:---layers 4 --dim 256 --heads 4 --kv-heads 2 --ffn 768 --vocab 1024 --ctx 1024 --type q8_0}
BUDGET_BYTES=${BUDGET_BYTES:-1073741824}
KEEP_ALIVE_MS=${KEEP_ALIVE_MS:-2000}
RATE=${RATE:-2}
BURSTINESS=${BURSTINESS:-0.5}
ZIPF=${ZIPF:-1.0}
SEED=${SEED:-1}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-0}
INPUT_LEN=${INPUT_LEN:-64}
OUTPUT_LEN=${OUTPUT_LEN:-16}
GOODPUT=${GOODPUT:-ttft:2000 tpot:200}
MODELS_MAX=${MODELS_MAX:-2}
ROUTER_PORT=${ROUTER_PORT:-18431}

for p in colo-server colo-loadtest colo-mkmodel; do
  if [ ! -x "$BUILD/$p" ]; then
    [ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target colo-server colo-loadtest colo-mkmodel >/dev/null
    break
  fi
done
cache=$COLO_MODELS
smol="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -r "$smol" ] || { echo "bench-trace: no $smol (run scripts/fetch-models.sh)" >&2; exit 2; }
mkdir -p "$OUT/models"
OUT=$(cd "$OUT" && pwd)
ln -sf "$smol" "$OUT/models/smollm2.gguf"
names=(smollm2)
for i in $(seq 1 "$N_SYNTH"); do
  f="$OUT/models/synth$i.gguf"
  # shellcheck disable=SC2086 # SYNTH_ARGS is several words on purpose
  [ -s "$f" ] || "$BUILD/colo-mkmodel" --out "$f" $SYNTH_ARGS --seed "$i" >/dev/null
  names+=("synth$i")
done

# equal guarantees summing to 1: the budget holds every model's guarantee,
# and an idle model sleeps after KEEP_ALIVE_MS, giving its memory back
frac=$(awk -v n="${#names[@]}" 'BEGIN { printf "%.4f", 0.999 / n }')
{
  echo "# bench-trace: ${#names[*]} models under one CPU budget"
  echo "server: { listen: \"127.0.0.1:0\", device: cpu, cpu_memory_bytes: $BUDGET_BYTES }"
  echo "models:"
  for n in "${names[@]}"; do
    echo "  - { name: $n, kind: llama, path: models/$n.gguf, memory_fraction: $frac, max_seq_len: 512,"
    echo "      keep_alive_ms: $KEEP_ALIVE_MS }"
  done
} >"$OUT/config.yaml"

model_args=()
for n in "${names[@]}"; do model_args+=(--model "$n"); done
# shellcheck disable=SC2206 # GOODPUT is several words on purpose
load=(--scenario trace "${model_args[@]}" --rate "$RATE" --burstiness "$BURSTINESS" --zipf "$ZIPF"
      --seed "$SEED" --duration "$DURATION" --warmup "$WARMUP" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN"
      --stream --path /v1/completions --goodput $GOODPUT)

status=0
echo "== colo-server: ${#names[@]} models, budget $BUDGET_BYTES bytes, keep_alive_ms $KEEP_ALIVE_MS"
"$BUILD/colo-loadtest" --config "$OUT/config.yaml" --server "$BUILD/colo-server" "${load[@]}" \
  --json "$OUT/colo.json" --html "$OUT/colo.html" --requests-out "$OUT/colo-requests.jsonl" "$@" || status=$?

if [ -n "${LLAMA_SERVER:-}" ]; then
  echo "== llama-server router: --models-max $MODELS_MAX"
  "$LLAMA_SERVER" --models-dir "$OUT/models" --models-max "$MODELS_MAX" --host 127.0.0.1 --port "$ROUTER_PORT" \
    >"$OUT/router.log" 2>&1 &
  router=$!
  trap 'kill "$router" 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do
    curl -fs "http://127.0.0.1:$ROUTER_PORT/health" >/dev/null 2>&1 && break
    kill -0 "$router" 2>/dev/null || { echo "bench-trace: llama-server exited; see $OUT/router.log" >&2; exit 1; }
    sleep 0.5
  done
  "$BUILD/colo-loadtest" --url "http://127.0.0.1:$ROUTER_PORT" --server-pid "$router" "${load[@]}" \
    --json "$OUT/router.json" --html "$OUT/router.html" --requests-out "$OUT/router-requests.jsonl" "$@" \
    || status=$?
  kill "$router" 2>/dev/null || true
  wait "$router" 2>/dev/null || true
  trap - EXIT
fi

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print(f"\n{'server':8} {'attain%':>8} {'goodput/s':>10} {'cold':>5} {'TTFT p99 warm':>14} {'TTFT p99 cold':>14}"
      f" {'wakes':>6} {'evict':>6} {'peak RSS MiB':>13}")
for side in ("colo", "router"):
    path = os.path.join(out, side + ".json")
    if not os.path.exists(path):
        continue
    t = json.load(open(path)).get("trace") or {}
    a = t.get("overall") or {}
    f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
    rss = t.get("peak_rss_bytes")
    print(f"{side:8} {f(a.get('attainment_pct')):>8} {f(a.get('request_goodput'), 2):>10} {a.get('cold', 0):>5}"
          f" {f(a.get('p99_ttft_warm_ms')):>14} {f(a.get('p99_ttft_cold_ms')):>14} {str(a.get('wakes')):>6}"
          f" {str(a.get('evictions')):>6} {f(rss / 1048576 if rss else None):>13}")
PY
exit "$status"

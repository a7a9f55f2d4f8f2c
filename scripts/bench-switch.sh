#!/usr/bin/env bash
# A cold model's first token while other models are busy: one colo-server
# with two busy models (SmolLM2 and Gemma 3 from the model cache, each
# kept busy by BUSY_CONCURRENCY closed-loop streams of OUTPUT_LEN tokens)
# and one small synthetic model (colo-mkmodel, llama, Q4_K_M) that sleeps
# after KEEP_ALIVE_MS without requests and gets one request every
# 1/COLD_RATE seconds, so that every one of its requests wakes it. For
# each policy of POLICIES and each count of busy models of BUSY (0: the
# cold model alone, 1: beside SmolLM2, 2: beside both), ROUNDS rounds
# alternate the cases, each on a fresh server; the summary gives the cold
# model's TTFT (p50, p99 over the rounds' requests pooled), its attainment
# of GOODPUT and the busy models' TPOT, so that what a wake waits for
# behind other models' steps can be read against the wake alone:
#
#   scripts/bench-switch.sh [OUT_DIR]
#
# Environment (defaults in brackets): BUILD [build]  POLICIES ['deadline
# timeslice']  BUSY ['0 2']  ROUNDS [2]  DURATION [90] (seconds a case)
# BUSY_CONCURRENCY [4]  COLD_RATE [0.2] (requests/s, at constant gaps)
# KEEP_ALIVE_MS [1000]  INPUT_LEN [64]  OUTPUT_LEN [32]
# GOODPUT ['ttft:2000 tpot:200'] (also every model's sla: under deadline)
# PORT [18433]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
OUT=${1:-$BUILD/bench-switch}
POLICIES=${POLICIES:-deadline timeslice}
BUSY=${BUSY:-0 2}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-90}
BUSY_CONCURRENCY=${BUSY_CONCURRENCY:-4}
COLD_RATE=${COLD_RATE:-0.2}
KEEP_ALIVE_MS=${KEEP_ALIVE_MS:-1000}
INPUT_LEN=${INPUT_LEN:-64}
OUTPUT_LEN=${OUTPUT_LEN:-32}
GOODPUT=${GOODPUT:-ttft:2000 tpot:200}
PORT=${PORT:-18433}

colo_build_missing colo-server colo-loadtest colo-mkmodel
BUILD=$(cd "$BUILD" && pwd)
mkdir -p "$OUT/models"
OUT=$(cd "$OUT" && pwd)
colo_link_real_models "$OUT/models"
[ -s "$OUT/models/cold.gguf" ] || "$BUILD/colo-mkmodel" --out "$OUT/models/cold.gguf" --arch llama --layers 12 \
  --dim 1024 --heads 16 --kv-heads 4 --ffn 2816 --vocab 32000 --ctx 2048 --type q4_k_m --seed 1 >/dev/null

config() { # POLICY
  local sla=""
  if [ "$1" = deadline ]; then
    for o in $GOODPUT; do sla+="${sla:+, }${o%%:*}_ms: ${o#*:}"; done
    sla=", sla: { $sla }"
  fi
  echo "server: { listen: \"127.0.0.1:$PORT\", device: cpu }"
  echo "scheduler: { policy: $1 }"
  echo "models:"
  echo "  - { name: smollm2, kind: llama, path: models/smollm2.gguf, memory_fraction: 0.25, max_seq_len: 512$sla }"
  echo "  - { name: gemma3, kind: llama, path: models/gemma3.gguf, memory_fraction: 0.25, max_seq_len: 512$sla }"
  echo "  - { name: cold, kind: llama, path: models/cold.gguf, memory_fraction: 0.25, max_seq_len: 512," \
    "keep_alive_ms: $KEEP_ALIVE_MS$sla }"
}

trap colo_stop_server EXIT

run_case() { # DIR POLICY BUSY
  # (model paths are relative to the config's directory)
  config "$2" >"$OUT/config-$2.yaml"
  "$BUILD/colo-server" --config "$OUT/config-$2.yaml" >"$1/colo.log" 2>&1 &
  server=$!
  colo_wait_health "http://127.0.0.1:$PORT/health/ready" "$server" "$1/colo.log"
  local busy=() m
  [ "$3" -ge 1 ] && busy+=(smollm2)
  [ "$3" -ge 2 ] && busy+=(gemma3)
  local args=(--model cold --rate "cold=$COLD_RATE")
  for m in "${busy[@]}"; do args+=(--model "$m" --concurrency "$m=$BUSY_CONCURRENCY"); done
  # shellcheck disable=SC2086 # GOODPUT is several words on purpose
  "$BUILD/colo-loadtest" --url "http://127.0.0.1:$PORT" "${args[@]}" --duration "$DURATION" \
    --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --stream --path /v1/completions --goodput $GOODPUT \
    --json "$1/run.json" --requests-out "$1/requests.jsonl" --quiet || true
  colo_stop_server
}

echo "== policies $POLICIES; busy models $BUSY; $ROUNDS rounds of ${DURATION}s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  for policy in $POLICIES; do
    for b in $BUSY; do
      dir="$OUT/$policy/busy$b/$round"
      mkdir -p "$dir"
      echo "-- round $round: $policy, $b busy"
      run_case "$dir" "$policy" "$b"
    done
  done
done

python3 - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else float("nan")
print("| policy | busy models | cold requests | cold TTFT p50 ms | cold TTFT p99 ms | cold attainment | busy TPOT p50 ms | busy TPOT p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for pdir in sorted(glob.glob(os.path.join(out, "*", "busy*"))):
    cold, busy, good = [], [], 0
    for f in glob.glob(os.path.join(pdir, "*", "requests.jsonl")):
        for line in open(f):
            r = json.loads(line)
            if not r.get("in_window", True):
                continue
            if r["model"] == "cold":  # a failed request counts against the attainment
                good += bool(r.get("good"))
                cold.append(r["ttft_ms"] if r.get("outcome") == "ok" and r.get("ttft_ms") is not None else float("inf"))
            elif r.get("outcome") == "ok" and r.get("tpot_ms") is not None:
                busy.append(r["tpot_ms"])
    policy, b = pdir.split(os.sep)[-2], pdir.split(os.sep)[-1][4:]
    att = f"{100 * good / len(cold):.1f}%" if cold else "-"
    print(f"| {policy} | {b} | {len(cold)} | {pct(cold, 50):.0f} | {pct(cold, 99):.0f} | {att} | "
          f"{pct(busy, 50):.1f} | {pct(busy, 99):.1f} |")
EOF

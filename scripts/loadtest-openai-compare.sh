#!/usr/bin/env bash
# Checks colo-loadtest's TTFT and TPOT against an independent client: the
# official `openai` Python client (pinned, from PyPI, in a virtualenv), timed
# by hand (scripts/loadtest_openai_timing.py), on the same colo-server, the
# same chat prompts (/v1/chat/completions, streamed) and one request at a time. Runs each tool ROUNDS times in
# turn, a few requests each (so drift on a shared machine hits both alike),
# then compares the mean and median TTFT and TPOT over all their requests.
# Exit 0 when both medians agree within TOLERANCE_PCT (the means are
# printed too; on a noisy machine a few stalls move a mean, not a median).
#
#   scripts/loadtest-openai-compare.sh            SmolLM2-135M-Instruct from the model cache
#
# Environment:
#   BUILD=build  COLO_VENV=$BUILD/openai-venv  OPENAI_VERSION=3.51.0
#   ROUNDS=8  REPEAT=1 (passes over the 8 prompts per round)  MAX_TOKENS=48  TOLERANCE_PCT=5
#   SERVER_THREADS=1: the server's worker pool. One thread leaves a core to the
#   client: on a 2-core machine a Python client that shares the server's cores
#   slows the server it measures (by 10-15% in TPOT), and the two tools would
#   then time different servers.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
COLO_VENV=${COLO_VENV:-$BUILD/openai-venv}
OPENAI_VERSION=${OPENAI_VERSION:-3.51.0}
ROUNDS=${ROUNDS:-8}
REPEAT=${REPEAT:-1}
MAX_TOKENS=${MAX_TOKENS:-48}
TOLERANCE_PCT=${TOLERANCE_PCT:-5}
SERVER_THREADS=${SERVER_THREADS:-1}

colo_build_missing colo-server colo-loadtest
py="$COLO_VENV/bin/python"
if ! "$py" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
  echo "loadtest-openai-compare: installing openai==$OPENAI_VERSION into $COLO_VENV" >&2
  python3 -m venv "$COLO_VENV"
  "$py" -m pip install -q --disable-pip-version-check "openai==$OPENAI_VERSION"
fi

cache=$COLO_MODELS
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -r "$model" ] || { echo "loadtest-openai-compare: no $model (scripts/fetch-models.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
cat >"$tmp/colo.yaml" <<YAML
server: { listen: "127.0.0.1:0", device: cpu, threads: $SERVER_THREADS }
models:
  - { name: smollm2, kind: llama, path: "$model", memory_fraction: 0.05, max_seq_len: 512 }
YAML
"$py" - "$tmp/prompts.jsonl" "$MAX_TOKENS" <<'PY'
import json, sys
prompts = ["Write one sentence about the sea.", "What is the capital of France?", "List three colours.",
           "Explain what a CPU cache is in one sentence.", "Say hello in Spanish.",
           "Give a short tip for writing clear code.", "Name a planet and one fact about it.",
           "Complete the phrase: the quick brown fox"]
with open(sys.argv[1], "w") as f:
    for p in prompts:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": p}], "max_tokens": int(sys.argv[2]),
                "temperature": 0}
        f.write(json.dumps({"body": body}) + "\n")
PY
"$BUILD/colo-server" --config "$tmp/colo.yaml" --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { cat "$tmp/server.log" >&2; exit 1; }
url="http://127.0.0.1:$(cat "$tmp/port")"
n=$((8 * REPEAT))
for r in $(seq "$ROUNDS"); do
  "$py" scripts/loadtest_openai_timing.py --url "$url" --prompts "$tmp/prompts.jsonl" --repeat "$REPEAT" \
    --json "$tmp/openai-$r.json" >/dev/null
  "$BUILD/colo-loadtest" --url "$url" --model smollm2 --path /v1/chat/completions --prompts "$tmp/prompts.jsonl" \
    --stream --concurrency 1 --requests "$n" --warmup 1 --quiet --json "$tmp/colo-$r.json" \
    --requests-out "$tmp/colo-$r.jsonl"
done
"$py" - "$tmp" "$ROUNDS" "$TOLERANCE_PCT" <<'PY'
import json, statistics, sys
tmp, rounds, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
o = [json.load(open(f"{tmp}/openai-{r}.json")) for r in range(1, rounds + 1)]
ot = [v for x in o for v in x["ttfts_ms"]]
op = [v for x in o for v in x["tpots_ms"]]
reqs = [json.loads(l) for r in range(1, rounds + 1) for l in open(f"{tmp}/colo-{r}.jsonl")]
ct = [q["ttft_ms"] for q in reqs if q["ttft_ms"] is not None]
cp = [q["tpot_ms"] for q in reqs if q["tpot_ms"] is not None]
print(f"{o[0]['client']} ({len(ot)} requests) vs colo-loadtest ({len(ct)} requests), one at a time, "
      f"{rounds} rounds in turn")
ok = True
for name, a, b in (("TTFT", ot, ct), ("TPOT", op, cp)):
    for stat, f in (("mean", statistics.mean), ("median", statistics.median)):
        x, y = f(a), f(b)
        diff = (y - x) / x * 100
        print(f"  {stat:6s} {name} ms: openai {x:8.2f}   colo-loadtest {y:8.2f}   difference {diff:+.1f}%")
        if stat == "median" and abs(diff) > tol:
            ok = False
print("agree within %g%%" % tol if ok else "DISAGREE by more than %g%%" % tol)
sys.exit(0 if ok else 1)
PY

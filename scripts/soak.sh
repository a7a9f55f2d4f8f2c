#!/usr/bin/env bash
# A bounded soak of colo-server: two co-located tiny synthetic models
# (colo-mkmodel, about a millisecond per request) driven by colo-loadtest
# with many keep-alive connections and short generations (max_tokens <= 4,
# plain, chat and streamed requests), while colo-server's resident memory
# (VmRSS) is sampled. Reports the requests sent, the answers by status,
# whether the server still answers /health/ready, and RSS after warm-up
# against RSS at the end (docs/BENCHMARKS.md, "Soak").
#
#   scripts/soak.sh [SECONDS]      default 60 (about 270,000 requests on 2 cores)
#
# Fails (exit 1) on any 5xx answer other than 503, connection errors or
# timeouts, a server that is not ready or does not exit 0 on SIGTERM at the
# end, or RSS growth of 5% or more after warm-up. 429 and 503 (queue full,
# queue timeout) are counted apart and allowed.
#
# Environment:
#   BUILD=build        the build folder with colo-server, colo-mkmodel, colo-loadtest
#   CONC=64            connections per model (two models: 2 x CONC in all)
#   WARMUP=15          seconds before the reference RSS sample
#   SAMPLE=2           seconds between RSS samples
#   OUT=FILE           also write the RSS samples there (seconds, kB)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
DURATION=${1:-60}
CONC=${CONC:-64}
WARMUP=${WARMUP:-15}
SAMPLE=${SAMPLE:-2}
case "$DURATION" in '' | *[!0-9]*) echo "usage: scripts/soak.sh [SECONDS]" >&2; exit 2 ;; esac
[ "$DURATION" -gt "$WARMUP" ] || { echo "soak: SECONDS must be larger than WARMUP ($WARMUP)" >&2; exit 2; }
for p in colo-server colo-mkmodel colo-loadtest; do
  [ -x "$BUILD/$p" ] || { echo "soak: $BUILD/$p is not built" >&2; exit 2; }
done

tmp=$(mktemp -d)
server_pid=
sampler_pid=
cleanup() {
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null || true
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

for m in a b; do
  "$BUILD/colo-mkmodel" --out "$tmp/$m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 \
    --vocab 512 --ctx 128 --seed "$([ $m = a ] && echo 1 || echo 2)" >/dev/null
done
cat >"$tmp/colo.yaml" <<EOF
server: { listen: "127.0.0.1:0", device: cpu, max_connections: 4096 }
scheduler: { policy: priority }
models:
  - name: soak-a
    kind: llama
    path: "$tmp/a.gguf"
    memory_fraction: 0.02
    priority: high
    max_seq_len: 128
    batching: { max_batch_size: 32, max_queue: 512, queue_timeout_ms: 5000 }
  - name: soak-b
    kind: llama
    path: "$tmp/b.gguf"
    memory_fraction: 0.02
    priority: low
    max_seq_len: 128
    batching: { max_batch_size: 32, max_queue: 512, queue_timeout_ms: 5000 }
EOF
cat >"$tmp/prompts.jsonl" <<'EOF'
{"body": {"prompt": "Hello there, how are you?", "max_tokens": 4}}
{"body": {"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}}
{"body": {"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 4}}
{"body": {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}], "max_tokens": 2, "top_k": 5}}
{"body": {"prompt": "Stream this", "max_tokens": 4, "stream": true}}
{"body": {"prompt": "Stop early", "max_tokens": 4, "stop": ["e", "a"], "top_p": 0.9}}
{"body": {"prompt": "x", "max_tokens": 1, "seed": 7}}
{"body": {"messages": [{"role": "user", "content": "Stream a chat"}], "max_tokens": 4, "stream": true}}
EOF

COLO_LOG_LEVEL=warn "$BUILD/colo-server" --config "$tmp/colo.yaml" --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  [ -s "$tmp/port" ] && curl -sf "http://127.0.0.1:$(cat "$tmp/port")/health/ready" >/dev/null && break
  sleep 0.1
done
url="http://127.0.0.1:$(cat "$tmp/port")"
curl -sf "$url/health/ready" >/dev/null || { cat "$tmp/server.log" >&2; exit 1; }

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status" 2>/dev/null || echo 0; }
(
  t0=$(date +%s)
  while kill -0 "$server_pid" 2>/dev/null; do
    echo "$(($(date +%s) - t0)) $(rss_kb)"
    sleep "$SAMPLE"
  done
) >"$tmp/rss.txt" &
sampler_pid=$!

echo "soak: $DURATION s, 2 models x $CONC connections, max_tokens <= 4, server pid $server_pid" >&2
lt_rc=0
"$BUILD/colo-loadtest" --url "$url" --model soak-a --model soak-b --kind soak-a=generative \
  --kind soak-b=generative --concurrency "$CONC" --duration "$DURATION" --timeout 30 \
  --prompts "$tmp/prompts.jsonl" --json "$tmp/lt.json" --quiet || lt_rc=$?
sleep "$SAMPLE"
ready=no
curl -sf "$url/health/ready" >/dev/null && ready=yes
curl -s "$url/metrics" >"$tmp/metrics.txt" || true
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=
[ -n "${OUT:-}" ] && cp "$tmp/rss.txt" "$OUT"
kill -TERM "$server_pid"
exit_rc=0
wait "$server_pid" || exit_rc=$?
server_pid=

python3 - "$tmp/lt.json" "$tmp/rss.txt" "$tmp/metrics.txt" "$WARMUP" "$ready" "$exit_rc" "$lt_rc" "$DURATION" <<'PY'
import collections, json, re, sys
lt_path, rss_path, metrics_path, warmup, ready, exit_rc, lt_rc, duration = sys.argv[1:]
warmup, duration = int(warmup), int(duration)
d = json.load(open(lt_path))
ok = 0
status = collections.Counter()
other = collections.Counter()
for m in d["phases"][0]["models"]:
    ok += m["ok"]
    status["200"] += m["ok"]
    for code, n in (m["errors"].get("http_by_status") or {}).items():
        status[str(code)] += n
    for k in ("connect", "timeout", "io"):
        other[k] += m["errors"][k]
sent = sum(status.values()) + sum(other.values())
# the server's own count, every status, the two models' route
server = collections.Counter()
for line in open(metrics_path):
    mm = re.match(r'colo_http_requests_total\{method="POST",route="/v1/models/\{name\}/infer",status="(\d+)"\} (\d+)', line)
    if mm:
        server[mm.group(1)] += int(mm.group(2))
samples = [tuple(map(int, l.split())) for l in open(rss_path) if len(l.split()) == 2 and int(l.split()[1]) > 0]
after = [kb for t, kb in samples if t >= warmup]
rss_warm = after[0] if after else 0
rss_end = after[-1] if after else 0
rss_max = max(after) if after else 0
growth = (rss_end - rss_warm) / rss_warm * 100 if rss_warm else float("nan")
bad5xx = {c: n for c, n in status.items() if c.startswith("5") and c != "503"}
print(f"requests sent      {sent} in {duration} s ({sent / duration:.0f}/s); colo-server counted {sum(server.values())}")
print("status             " + ", ".join(f"{c}: {n}" for c, n in sorted(status.items())))
print(f"  429 (queue full) {status.get('429', 0)}, 503 {status.get('503', 0)}, other 5xx {sum(bad5xx.values())}")
print(f"  connect/timeout/io errors {other['connect']}/{other['timeout']}/{other['io']}")
for m in d["phases"][0]["models"]:
    lat = m["latency_ms"]
    print(f"  {m['model']}: {m['throughput_rps']:.0f} req/s, p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms")
print(f"ready at the end   {ready}")
print(f"RSS                {rss_warm} kB at {warmup} s, {rss_end} kB at the end, max {rss_max} kB: "
      f"growth {growth:+.2f}% ({len(samples)} samples)")
print(f"SIGTERM exit code  {exit_rc}")
fail = []
if bad5xx: fail.append(f"5xx other than 503: {bad5xx}")
if sum(other.values()): fail.append(f"connection errors {dict(other)}")
if ready != "yes": fail.append("not ready at the end")
if not after or growth >= 5: fail.append(f"RSS growth {growth:.2f}%")
if exit_rc != "0": fail.append(f"exit code {exit_rc} on SIGTERM")
if ok == 0: fail.append("no successful request")
print("soak: " + ("PASS" if not fail else "FAIL: " + "; ".join(fail)))
sys.exit(1 if fail else 0)
PY

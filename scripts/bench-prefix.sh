#!/usr/bin/env bash
# Prefix caching through colo-server (docs/BENCHMARKS.md): a chat whose
# system prompt is about 1,000 tokens, sent twice with different user
# questions, to the same model with the prefix cache on and with it off
# (prefix_cache: false). Time to first token is measured by the client
# (request sent to the first streamed event). Each repeat uses a system
# prompt of its own (so its first request finds nothing cached), the two
# conditions alternate and swap order every repeat, and the medians are
# printed with every run. A benchmark, not a test: it asserts nothing.
#
# Environment:
#   MODEL=FILE.gguf   (default: SmolLM2 from the model cache)
#   BUILD=build       the build folder (colo-server is built when missing)
#   REPEATS=7         repeats per condition
#   SYSTEM_TOKENS=1000  the system prompt's length at least, in tokens
#   THREADS=2         colo-server's worker threads
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
REPEATS=${REPEATS:-7}
SYSTEM_TOKENS=${SYSTEM_TOKENS:-1000}
THREADS=${THREADS:-2}
if [ -z "${MODEL:-}" ]; then
  MODEL="$COLO_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
[ -r "$MODEL" ] || { echo "bench-prefix: no $MODEL (scripts/fetch-models.sh)" >&2; exit 2; }
[ -x "$BUILD/colo-server" ] || cmake --build "$BUILD" --target colo-server >/dev/null

tmp=$(mktemp -d)
pid=
cleanup() {
  [ -z "$pid" ] || { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$tmp"
}
trap cleanup EXIT
cat >"$tmp/colo.yaml" <<EOF
server: { listen: "127.0.0.1:0", device: cpu, threads: $THREADS, cpu_memory_bytes: 4GiB }
models:
  - { name: on, kind: llama, path: "$MODEL", memory_fraction: 0.3, prefix_cache: true }
  - { name: off, kind: llama, path: "$MODEL", memory_fraction: 0.3, prefix_cache: false }
EOF
"$BUILD/colo-server" --config "$tmp/colo.yaml" --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -s "$tmp/port" ] && curl -sf "http://127.0.0.1:$(cat "$tmp/port")/health/ready" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.1
done
port=$(cat "$tmp/port")
echo "bench-prefix: $(basename "$MODEL"), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$port" "$REPEATS" "$SYSTEM_TOKENS" <<'PY'
import json, statistics, sys, time, urllib.request

port, repeats, want_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = f"http://127.0.0.1:{port}"


def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def system_prompt(nonce):
    words = ["Answer in plain English.", "Cite no sources you cannot name.", "Keep every answer short.",
             "Say when a question is ambiguous.", "Prefer concrete examples.", "Never invent numbers.",
             "Use metric units.", "Explain a term the first time you use it."]
    parts, i = [f"Conversation {nonce}. You are a careful assistant. Rules:"], 0
    while True:
        text = " ".join(parts)
        n = post("/v1/models/on/tokenize", {"messages": [{"role": "system", "content": text}]})["count"]
        if n >= want_tokens:
            return text, n
        parts.extend(f"Rule {i + k + 1}: {words[(i + k) % len(words)]}" for k in range(20))
        i += 20


def ask(model, system, question):
    body = {"model": model, "max_tokens": 8, "temperature": 0, "stream": True,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, text = None, ""
    with urllib.request.urlopen(req) as r:
        for line in r:
            if not line.startswith(b"data: "):
                continue
            if ttft is None:
                ttft = time.perf_counter() - t0
            data = line[6:].strip()
            if data != b"[DONE]":
                for ch in json.loads(data).get("choices", []):
                    text += (ch.get("delta") or {}).get("content") or ""
    return ttft * 1e3, text


for m in ("on", "off"):  # warm-up: pages, threads
    ask(m, "Warm up.", "Hello?")
rows = {"on": [], "off": []}
same = 0
for rep in range(repeats):
    order = ("on", "off") if rep % 2 == 0 else ("off", "on")
    texts = {}
    for m in order:
        system, n = system_prompt(f"{rep}-{m}")  # nothing of it is cached yet
        first, _ = ask(m, system, "What is the boiling point of water at sea level?")
        second, text = ask(m, system, "Name three primary colours.")
        rows[m].append((first, second))
        texts[m] = text
        print(f"repeat {rep} {m:>3}: system prompt {n} tokens, TTFT first {first:8.1f} ms, second {second:8.1f} ms, "
              f"ratio {first / second:5.1f}x", flush=True)
    same += texts["on"] == texts["off"]
print()
for m in ("on", "off"):
    f = statistics.median(r[0] for r in rows[m])
    s = statistics.median(r[1] for r in rows[m])
    print(f"prefix cache {m:>3}: median TTFT first {f:8.1f} ms, second {s:8.1f} ms, first/second {f / s:5.1f}x "
          f"(median of per-repeat ratios {statistics.median(r[0] / r[1] for r in rows[m]):5.1f}x)")
print(f"second request, off/on: {statistics.median(r[1] for r in rows['off']) / statistics.median(r[1] for r in rows['on']):.1f}x; "
      f"answers equal with the cache on and off in {same} of {repeats} repeats")
info = json.load(urllib.request.urlopen(base + "/v1/models/on"))["prefix_cache"]
print(f"/v1/models/on prefix_cache: {json.dumps(info)}")
PY

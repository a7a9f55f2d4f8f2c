#!/usr/bin/env bash
# colo-server under valgrind (memcheck): two small synthetic generative models
# (colo-mkmodel), plus all-MiniLM-L6-v2 when it is in the model cache, get a
# few hundred mixed requests (infer, streamed infer, streams the client drops
# half way, chat and text completions, embeddings, models, metrics, health,
# bad JSON, unknown fields and models, wrong methods, oversized bodies,
# pipelined and HTTP/1.0 requests), then SIGTERM. Exit non-zero when valgrind
# reports a memory error or a definite leak, or the server misbehaves
# (docs/BENCHMARKS.md, "Leak check").
#
#   scripts/leak-check.sh [--asan]
#
# --asan: instead of valgrind, an AddressSanitizer + LeakSanitizer build
# (-DCOLO_SANITIZE=ON, in $BUILD-asan) with detect_leaks=1.
#
# Environment:
#   BUILD=build       the build folder with colo-server and colo-mkmodel (Release or RelWithDebInfo)
#   ROUNDS=5          rounds of the request mix (about 70 requests each)
#   NO_MINILM=1       leave MiniLM out even when cached
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ROUNDS=${ROUNDS:-5}
mode=valgrind
case "${1:-}" in
--asan) mode=asan ;;
"") ;;
*) echo "usage: scripts/leak-check.sh [--asan]" >&2; exit 2 ;;
esac

server="$BUILD/colo-server"
if [ "$mode" = asan ]; then
  abuild="$BUILD-asan"
  [ -f "$abuild/CMakeCache.txt" ] || cmake -S . -B "$abuild" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLO_SANITIZE=ON \
    -DCOLO_CUDA=OFF >/dev/null
  cmake --build "$abuild" -j"$(nproc 2>/dev/null || echo 2)" --target colo-server >/dev/null
  server="$abuild/colo-server"
else
  command -v valgrind >/dev/null || { echo "leak-check: valgrind is not installed (or use --asan)" >&2; exit 2; }
fi
for p in "$server" "$BUILD/colo-mkmodel"; do
  [ -x "$p" ] || { echo "leak-check: $p is not built" >&2; exit 2; }
done

tmp=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

"$BUILD/colo-mkmodel" --out "$tmp/g1.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 \
  --ctx 128 --seed 1 >/dev/null
"$BUILD/colo-mkmodel" --out "$tmp/g2.gguf" --layers 1 --dim 32 --heads 2 --kv-heads 1 --ffn 64 --vocab 300 \
  --ctx 64 --type f32 --seed 2 >/dev/null
minilm="$COLO_MODELS/all-minilm-l6-v2"
embed=
{
  echo "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, max_body_bytes: 64KiB, shutdown_timeout_ms: 20000 }"
  echo "models:"
  echo "  - { name: g1, kind: llama, path: \"$tmp/g1.gguf\", memory_fraction: 0.01, max_seq_len: 128,"
  echo "      batching: { max_batch_size: 8, max_queue: 64 } }"
  echo "  - { name: g2, kind: llama, path: \"$tmp/g2.gguf\", memory_fraction: 0.01, priority: low, max_seq_len: 64 }"
  if [ -z "${NO_MINILM:-}" ] && [ -d "$minilm" ]; then
    echo "  - { name: minilm, kind: bert, path: \"$minilm\", memory_fraction: 0.02 }"
    embed=minilm
  fi
} >"$tmp/colo.yaml"

if [ "$mode" = asan ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 LSAN_OPTIONS=exitcode=99 \
    "$server" --config "$tmp/colo.yaml" --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
else
  valgrind --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite --error-exitcode=99 \
    --num-callers=30 "$server" --config "$tmp/colo.yaml" --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
fi
server_pid=$!
echo "leak-check: colo-server under $mode (pid $server_pid), models g1 g2${embed:+ $embed}" >&2
for _ in $(seq 1 1200); do
  [ -s "$tmp/port" ] && curl -sf "http://127.0.0.1:$(cat "$tmp/port")/health/ready" >/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if ! [ -s "$tmp/port" ] || ! curl -sf "http://127.0.0.1:$(cat "$tmp/port")/health/ready" >/dev/null; then
  echo "leak-check: colo-server did not become ready" >&2
  tail -40 "$tmp/server.log" >&2
  exit 1
fi

drive_rc=0
python3 - "$(cat "$tmp/port")" "$ROUNDS" "$embed" <<'PY' || drive_rc=$?
import collections, http.client, json, socket, sys
port, rounds, embed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
counts = collections.Counter()
unexpected = []

def req(method, path, body=None, want=200, headers=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, body=data, headers=headers or {})
    r = c.getresponse()
    payload = r.read()
    counts[r.status] += 1
    if r.status != want:
        unexpected.append(f"{method} {path} -> {r.status} (wanted {want}): {payload[:200]!r}")
    if not conn:
        c.close()
    return payload

def raw(data, expect_close=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    s.sendall(data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
        if not expect_close and out.count(b"\r\n\r\n") >= 2:
            break
    s.close()
    counts["raw"] += 1
    return out

def dropped_stream(path, body):
    """Reads the first event of a stream, then goes away."""
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    b = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(b), b))
    s.recv(4096)
    s.close()
    counts["dropped"] += 1

for r in range(rounds):
    keep = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    for m in ("g1", "g2"):
        req("POST", f"/v1/models/{m}/infer", {"prompt": "Hello", "max_tokens": 4, "seed": r}, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                                               "stop": ["a", "b"], "top_k": 3, "top_p": 0.8}, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"prompt": "Stream", "max_tokens": 5, "stream": True}, conn=keep)
        req("POST", "/v1/chat/completions", {"model": m, "messages": [{"role": "user", "content": "Hi"}],
                                              "max_tokens": 4, "user": "u", "n": 1}, conn=keep)
        req("POST", "/v1/chat/completions", {"model": m, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Hi"}]}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}, conn=keep)
        req("POST", "/v1/completions", {"model": m, "prompt": ["Once"], "max_tokens": 4}, conn=keep)
        req("POST", "/v1/completions", {"model": m, "prompt": "Once", "max_tokens": 4, "stream": True}, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"prompt": "x" * 40, "max_tokens": 60}, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"prompt": "x", "max_tokens": 0}, want=400, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"prompt": "x", "stop": ["a"] * 9}, want=400, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"prompt": "x", "bogus": 1}, want=400, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"messages": [{"role": "tool", "content": "x"}]}, want=400, conn=keep)
        req("POST", f"/v1/models/{m}/infer", {"prompt": "word " * 2000, "max_tokens": 2}, want=400, conn=keep)
        req("POST", "/v1/chat/completions", {"model": m, "messages": [{"role": "user", "content": "x"}],
                                              "logprobs": True}, want=400, conn=keep)
        req("POST", "/v1/embeddings", {"model": m, "input": "x"}, want=400, conn=keep)
        for _ in range(3):
            dropped_stream(f"/v1/models/{m}/infer", {"prompt": "Long", "max_tokens": 60, "stream": True})
        dropped_stream("/v1/chat/completions", {"model": m, "messages": [{"role": "user", "content": "x"}],
                                                "max_tokens": 60, "stream": True})
    if embed:
        req("POST", f"/v1/models/{embed}/infer", {"inputs": ["The cat sat on the mat.", "A dog."]}, conn=keep)
        req("POST", "/v1/embeddings", {"model": embed, "input": "One sentence."}, conn=keep)
        req("POST", "/v1/embeddings", {"model": embed, "input": ["a", "b", "c"], "encoding_format": "base64"},
            conn=keep)
        req("POST", "/v1/embeddings", {"model": embed, "input": "x", "dimensions": 3}, want=400, conn=keep)
        req("POST", f"/v1/models/{embed}/infer", {"inputs": []}, want=400, conn=keep)
    for path, want in (("/v1/models", 200), ("/v1/models/g1", 200), ("/v1/models/nope", 404), ("/metrics", 200),
                       ("/health/live", 200), ("/health/ready", 200), ("/nowhere", 404),
                       ("/v1/models/g1/infer", 405)):
        req("GET", path, want=want, conn=keep)
    req("DELETE", "/v1/models", want=405, conn=keep)
    req("POST", "/v1/models/nope/infer", {"prompt": "x"}, want=404, conn=keep)
    req("POST", "/v1/chat/completions", {"model": "nope", "messages": []}, want=404, conn=keep)
    req("POST", "/v1/models/g1/infer", b'{"prompt": "x",', want=400, conn=keep)
    req("POST", "/v1/models/g1/infer", b'[1, 2]', want=400, conn=keep)
    req("POST", "/v1/models/g1/infer", b'', want=400, conn=keep)
    req("POST", "/v1/models/g1/infer", b'{"prompt":"a","prompt":"b"}', want=400, conn=keep)
    req("POST", "/v1/models/g1/infer", b'[' * 100 + b']' * 100, want=400, conn=keep)
    req("POST", "/v1/models/g1/infer", b'{"prompt":"\xff\xfe"}', want=400, conn=keep)
    keep.close()
    req("POST", "/v1/models/g1/infer", b'x' * 70000, want=413)
    raw(b"GARBAGE\r\n\r\n")
    raw(b"GET /health/live HTTP/2.0\r\nHost: x\r\n\r\n")
    raw(b"GET /health/live HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    raw(b"GET /health/live HTTP/1.0\r\n\r\n")
    raw(b"POST /v1/models/g1/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"5\r\n{\"pro\r\n1c\r\nmpt\":\"x\",\"max_tokens\":2}\r\n0\r\n\r\n")
    raw(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    # a request whose client goes away before the body is complete
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/models/g1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"pro")
    s.close()
    print(f"round {r + 1}/{rounds}: {sum(counts.values())} requests so far", file=sys.stderr)

print("requests: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=str)) +
      f"; total {sum(counts.values())}")
for u in unexpected:
    print("unexpected: " + u)
sys.exit(1 if unexpected else 0)
PY

kill -TERM "$server_pid"
server_rc=0
wait "$server_pid" || server_rc=$?
server_pid=
if [ "$mode" = valgrind ]; then
  grep -E 'ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable' "$tmp/server.log" | sed 's/^==[0-9]*== //' || true
else
  grep -E 'ERROR: (AddressSanitizer|LeakSanitizer)|SUMMARY' "$tmp/server.log" || echo "AddressSanitizer/LeakSanitizer: no reports"
fi
if [ "$server_rc" -ne 0 ] || [ "$drive_rc" -ne 0 ]; then
  [ "$server_rc" -ne 0 ] && grep -v ' INFO ' "$tmp/server.log" | head -150 >&2
  echo "leak-check: FAIL (colo-server exit $server_rc, requests $([ "$drive_rc" = 0 ] && echo ok || echo failed))"
  exit 1
fi
echo "leak-check: PASS ($mode: no memory errors, no definite leaks; colo-server exit 0)"

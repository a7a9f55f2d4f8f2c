#!/usr/bin/env bash
# The HTTP front end alone: requests/s and p99 of colo-server's cheapest
# endpoint (GET /health/live) next to nginx serving a static file of the same
# 18-byte body, both on loopback, driven by wrk and by colo-loadtest
# (docs/BENCHMARKS.md, "HTTP front end").
#
#   scripts/bench-http.sh
#
# colo-server runs twice: with its per-request log line (INFO, written to a
# file) and with COLO_LOG_LEVEL=warn (no request log, as nginx with
# access_log off). nginx runs from a config in a temporary folder: one worker,
# the current user, an unprivileged port.
#
# Environment:
#   BUILD=build          the build folder with colo-server, colo-mkmodel, colo-loadtest
#   CONNS=64             keep-alive connections
#   DURATION=10          seconds per run
#   WRK_THREADS=1        wrk threads
#   NGINX=nginx          the nginx binary (skipped when absent)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
CONNS=${CONNS:-64}
DURATION=${DURATION:-10}
WRK_THREADS=${WRK_THREADS:-1}
NGINX=${NGINX:-nginx}
command -v wrk >/dev/null || { echo "bench-http: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
for p in colo-server colo-mkmodel colo-loadtest; do
  [ -x "$BUILD/$p" ] || { echo "bench-http: $BUILD/$p is not built" >&2; exit 2; }
done
if ! command -v "$NGINX" >/dev/null; then
  [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx || NGINX=
fi

tmp=$(mktemp -d)
server_pid=
nginx_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  [ -n "$nginx_pid" ] && kill -QUIT "$nginx_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run_wrk NAME URL: one wrk run, prints a result line
run_wrk() {
  local out="$tmp/wrk.txt"
  wrk -t"$WRK_THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$2" >"$out"
  local rps p99 errs
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
  p99=$(awk '$1 == "99%" {print $2}' "$out")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' "$out" | tr '\n' ' ')
  printf '%-34s %12s %10s  %s\n' "$1" "$rps" "$p99" "$errs"
}

# run_loadtest NAME BASEURL PATH: one colo-loadtest run (GET, closed loop)
run_loadtest() {
  "$BUILD/colo-loadtest" --url "$2" --model static --path "$3" --method GET --concurrency "$CONNS" \
    --duration "$DURATION" --json "$tmp/lt.json" --quiet >/dev/null || true
  python3 - "$tmp/lt.json" "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["phases"][0]["models"][0]
err = sum(m["errors"][k] for k in ("http", "connect", "timeout", "io"))
print("%-34s %12.0f %8.2fms  %s" % (sys.argv[2], m["throughput_rps"], m["latency_ms"]["p99"],
                                    "errors %d" % err if err else ""))
PY
}

start_colo() { # LOG_LEVEL
  rm -f "$tmp/port"
  COLO_LOG_LEVEL=$1 "$BUILD/colo-server" --config "$tmp/colo.yaml" --port-file "$tmp/port" \
    >"$tmp/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do
    [ -s "$tmp/port" ] && curl -sf "http://127.0.0.1:$(cat "$tmp/port")/health/live" >/dev/null && return 0
    sleep 0.1
  done
  cat "$tmp/server.log" >&2
  return 1
}

stop_colo() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=
}

"$BUILD/colo-mkmodel" --out "$tmp/tiny.gguf" --layers 1 --dim 32 --heads 2 --kv-heads 1 --ffn 64 --vocab 300 \
  --ctx 64 >/dev/null
cat >"$tmp/colo.yaml" <<EOF
server: { listen: "127.0.0.1:0", device: cpu, max_connections: 4096 }
models:
  - { name: tiny, kind: llama, path: "$tmp/tiny.gguf", memory_fraction: 0.01 }
EOF

echo "bench-http: $(nproc) cores, $CONNS connections, ${DURATION}s per run, wrk -t$WRK_THREADS"
echo "            $(wrk --version 2>&1 | head -1 | awk '{print $1, $2}'), ${NGINX:+$("$NGINX" -v 2>&1 | sed 's/.*: //')}"
printf '%-34s %12s %10s\n' "target and client" "requests/s" "p99"

for level in info warn; do
  start_colo "$level"
  url="http://127.0.0.1:$(cat "$tmp/port")"
  run_wrk "colo /health/live (log $level), wrk" "$url/health/live"
  run_loadtest "colo /health/live (log $level), loadtest" "$url" /health/live
  stop_colo
done

if [ -n "$NGINX" ]; then
  mkdir -p "$tmp/nginx/www"
  printf '{"status":"live"}\n' >"$tmp/nginx/www/live.json"
  port=$(free_port)
  user_line=
  [ "$(id -u)" = 0 ] && user_line="user $(id -un);"
  cat >"$tmp/nginx/nginx.conf" <<EOF
$user_line
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  server {
    listen 127.0.0.1:$port;
    location / { root $tmp/nginx/www; default_type application/json; }
  }
}
EOF
  "$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" 2>"$tmp/nginx/start.log" &
  nginx_pid=$!
  for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:$port/live.json" >/dev/null && break
    sleep 0.1
  done
  run_wrk "nginx static 18 B, wrk" "http://127.0.0.1:$port/live.json"
  run_loadtest "nginx static 18 B, loadtest" "http://127.0.0.1:$port" /live.json
  kill -QUIT "$nginx_pid"
  wait "$nginx_pid" 2>/dev/null || true
  nginx_pid=
else
  echo "bench-http: nginx not found; skipped"
fi

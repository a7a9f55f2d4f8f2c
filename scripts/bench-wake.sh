#!/usr/bin/env bash
# Wake time of one model against the time to read its file
# (docs/BENCHMARKS.md, "Wake time"): for each colo-server binary given, in
# turn and ROUNDS times over (so that two builds alternate on a shared
# machine), and for each weights mode of MODES (COLO_WEIGHTS: map, the
# CPU's default, reads the weights in place from the file's mapping, or
# for an encoder from its repack cache file; copy copies them into the
# arena), starts it on MODEL alone (CPU), then WAKES times puts the model
# to sleep (POST /admin/models/m/sleep, until `sleeping`) and wakes it
# (POST .../wake, until `ready`) and prints its lifecycle.last_wake_ms,
# with the file in the page cache (warm) and, when CACHE says cold, with
# the file's pages dropped from the page cache just before the wake
# (posix_fadvise DONTNEED after fdatasync: this file only, nothing else on
# the machine; pages another process maps stay, and the script says so).
# After each round, `cat FILE > /dev/null` timed the same ways (warm: the
# file cached; cold: its pages dropped first). FILE is what a wake reads:
# the GGUF file, or for an encoder (MODEL a folder) its repack cache file,
# made in a folder of the script's own at the first start. A benchmark,
# not a test: it asserts nothing.
#
#   scripts/bench-wake.sh MODEL.gguf|MODEL_FOLDER SERVER [SERVER...]
#
# Environment: WAKES [4]  ROUNDS [3]  PORT [18555]  MODES [map copy]
#   CACHE [warm cold] (which page-cache states to measure)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 MODEL.gguf|MODEL_FOLDER SERVER [SERVER...]" >&2; exit 2; }
MODEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
KIND=llama
[ -d "$MODEL" ] && KIND=bert
WAKES=${WAKES:-4}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-18555}
MODES=${MODES:-map copy}
CACHE=${CACHE:-warm cold}
URL=http://127.0.0.1:$PORT
TMP=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
export COLO_REPACK_DIR="$TMP/repack"

# the file a wake reads
read_file() {
  if [ "$KIND" = llama ]; then echo "$MODEL"; else ls "$COLO_REPACK_DIR"/bert-*.bin 2>/dev/null | head -1; fi
}

until_state() { # STATE
  for _ in $(seq 1 3000); do
    curl -fs "$URL/v1/models/m" | grep -q "\"state\":\"$1\"" && return 0
    sleep 0.01
  done
  echo "bench-wake: model not $1" >&2
  exit 1
}

# drops FILE's pages from the page cache (no one may map it then)
drop_cached() { # FILE
  python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fdatasync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)' "$1"
  if command -v fincore >/dev/null; then
    local left
    left=$(fincore -nb -o RES "$1" | tr -d ' ')
    if [ "${left:-0}" -gt 1048576 ]; then
      echo "bench-wake: $((left >> 20)) MiB of $1 stayed in the page cache (mapped by another process?)" >&2
    fi
  fi
}

time_cat() { # FILE CACHE
  if [ "$2" = cold ]; then drop_cached "$1"; fi
  local t0
  t0=$(date +%s%N)
  cat "$1" >/dev/null
  echo "cat $(basename "$1") ($2): $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

cat >"$TMP/config.yaml" <<EOF
server: { listen: "127.0.0.1:$PORT", device: cpu }
scheduler: { policy: spatial }
models:
  - { name: m, kind: $KIND, path: "$MODEL", memory_fraction: 0.2, max_seq_len: 512 }
EOF
for _ in $(seq 1 "$ROUNDS"); do
  for bin in "$@"; do
    for mode in $MODES; do
      COLO_WEIGHTS=$mode "$bin" --config "$TMP/config.yaml" >"$TMP/server.log" 2>&1 &
      server=$!
      for _ in $(seq 1 600); do
        curl -fs "$URL/health/ready" >/dev/null 2>&1 && break
        sleep 0.1
      done
      for c in $CACHE; do
        ms=()
        for _ in $(seq 1 "$WAKES"); do
          curl -fs -X POST "$URL/admin/models/m/sleep" >/dev/null
          until_state sleeping
          if [ "$c" = cold ]; then drop_cached "$(read_file)"; fi
          curl -fs -X POST "$URL/admin/models/m/wake" >/dev/null
          until_state ready
          ms+=("$(curl -fs "$URL/v1/models/m" | python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["lifecycle"]["last_wake_ms"])')")
        done
        echo "$bin $mode $(basename "$MODEL") $c wake ms: ${ms[*]}"
      done
      kill "$server"
      wait "$server" 2>/dev/null || true
      server=
    done
  done
  f=$(read_file)
  for c in $CACHE; do time_cat "$f" "$c"; done
done

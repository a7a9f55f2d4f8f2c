#!/usr/bin/env bash
# Checks colo-server's Anthropic Messages API with the official `anthropic`
# Python client (a pinned version from PyPI, in a virtualenv): a message,
# the same message streamed (same text), count_tokens, stop_sequences, text
# blocks, and errors in Anthropic's shape (404, 400, 401). Starts
# colo-server on a free port with an API key (sent as x-api-key) and stops
# it at the end. Exit 0 when every check passes, 77 when the client cannot
# be installed (the ctest then reports itself skipped).
#
#   scripts/anthropic-check.sh              a synthetic model written by colo-mkmodel
#   scripts/anthropic-check.sh --smollm2    SmolLM2-135M-Instruct from the model cache
#                                           (77 when it is not there)
#
# Environment:
#   BUILD=build               the build folder (colo-server and colo-mkmodel are built when missing)
#   COLO_VENV=DIR             the virtualenv (default $BUILD/anthropic-venv; created when missing)
#   ANTHROPIC_VERSION=2.10.0  the anthropic package version
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
COLO_VENV=${COLO_VENV:-$BUILD/anthropic-venv}
ANTHROPIC_VERSION=${ANTHROPIC_VERSION:-2.10.0}
smollm2=0
case "${1:-}" in
--smollm2) smollm2=1 ;;
"") ;;
*) echo "usage: scripts/anthropic-check.sh [--smollm2]" >&2; exit 2 ;;
esac

for p in colo-server colo-mkmodel; do
  if [ ! -x "$BUILD/$p" ]; then
    [ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target colo-server colo-mkmodel >/dev/null
    break
  fi
done

py="$COLO_VENV/bin/python"
if ! "$py" -c "import anthropic, sys; sys.exit(anthropic.__version__ != '$ANTHROPIC_VERSION')" 2>/dev/null; then
  echo "anthropic-check: installing anthropic==$ANTHROPIC_VERSION into $COLO_VENV" >&2
  if ! { python3 -m venv "$COLO_VENV" &&
         "$py" -m pip install -q --disable-pip-version-check "anthropic==$ANTHROPIC_VERSION"; } >&2; then
    echo "anthropic-check: cannot install the anthropic client (no PyPI?): skipped" >&2
    exit 77
  fi
fi

cache="${XDG_CACHE_HOME:-}"
[ -n "$cache" ] || cache="$HOME/.cache"
cache="$cache/colo/models"
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

flags=()
if [ "$smollm2" = 1 ]; then
  model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
  [ -r "$model" ] || { echo "anthropic-check: no $model (scripts/fetch-models.sh): skipped" >&2; exit 77; }
  name=smollm2
  flags=(--smollm2)
else
  model="$tmp/tiny.gguf"
  "$BUILD/colo-mkmodel" --out "$model" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 \
    --vocab 512 --ctx 512 --seed 7 >/dev/null
  name=tiny
fi
cat >"$tmp/colo.yaml" <<YAML
server: { listen: "127.0.0.1:0", device: cpu, api_key_env: COLO_ANTHROPIC_CHECK_KEY }
models:
  - { name: $name, kind: llama, path: "$model", memory_fraction: 0.05, max_seq_len: 512 }
YAML

key="check-$$-$RANDOM"
COLO_ANTHROPIC_CHECK_KEY=$key "$BUILD/colo-server" --config "$tmp/colo.yaml" --port-file "$tmp/port" \
  >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  if [ -s "$tmp/port" ] && curl -sf "http://127.0.0.1:$(cat "$tmp/port")/health/ready" >/dev/null 2>&1; then
    break
  fi
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$tmp/port" ] || { echo "anthropic-check: colo-server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }

rc=0
"$py" scripts/anthropic_check.py --url "http://127.0.0.1:$(cat "$tmp/port")" --model "$name" \
  --api-key "$key" "${flags[@]}" || rc=$?
kill -TERM "$server_pid"
if ! wait "$server_pid"; then
  echo "anthropic-check: colo-server did not exit cleanly on SIGTERM" >&2
  tail -20 "$tmp/server.log" >&2
  rc=1
fi
server_pid=
exit "$rc"

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
. scripts/lib.sh
COLO_VENV=${COLO_VENV:-$BUILD/anthropic-venv}
ANTHROPIC_VERSION=${ANTHROPIC_VERSION:-2.10.0}
. scripts/client-check-lib.sh
check_prepare anthropic-check anthropic "$ANTHROPIC_VERSION" "${1:-}"
flags=()
if [ "$smollm2" = 1 ]; then
  flags=(--smollm2)
fi
cat >"$tmp/colo.yaml" <<YAML
server: { listen: "127.0.0.1:0", device: cpu, api_key_env: COLO_ANTHROPIC_CHECK_KEY }
models:
  - { name: $name, kind: llama, path: "$model", memory_fraction: 0.05, max_seq_len: 2048 }
YAML

key="check-$$-$RANDOM"
check_start anthropic-check "$tmp/colo.yaml" COLO_ANTHROPIC_CHECK_KEY "$key"

rc=0
"$py" scripts/anthropic_check.py --url "http://127.0.0.1:$port" --model "$name" \
  --api-key "$key" "${flags[@]}" || rc=$?
check_stop anthropic-check "$tmp/colo.yaml" || rc=1
exit "$rc"

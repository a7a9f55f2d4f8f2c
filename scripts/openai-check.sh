#!/usr/bin/env bash
# Checks colo-server's OpenAI-compatible endpoints with the official `openai`
# Python client (a pinned version from PyPI, in a virtualenv): lists models,
# a chat completion, a streamed chat completion, a completion (plain and
# streamed), an unknown model's 404, a batch (files.create, batches.create,
# batches.retrieve polling, files.content) and, when MiniLM is in the model
# cache, an embeddings request. Starts colo-server on a free port with an API key and
# stops it at the end. Exit 0 only when every check passes; 77 (skipped) when
# the client cannot be installed or SmolLM2's weights are absent.
#
#   scripts/openai-check.sh              a synthetic model written by colo-mkmodel
#   scripts/openai-check.sh --smollm2    SmolLM2-135M-Instruct from the model cache
#                                        (and the answer must name Paris)
#
# Environment:
#   BUILD=build            the build folder (colo-server and colo-mkmodel are built when missing)
#   COLO_VENV=DIR          the virtualenv (default $BUILD/openai-venv; created when missing)
#   OPENAI_VERSION=3.51.0  the openai package version
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
COLO_VENV=${COLO_VENV:-$BUILD/openai-venv}
OPENAI_VERSION=${OPENAI_VERSION:-3.51.0}
. scripts/client-check-lib.sh
check_prepare openai-check openai "$OPENAI_VERSION" "${1:-}"
expect=()
if [ "$smollm2" = 1 ]; then
  expect=(--expect-text Paris)
fi
{
  echo "server: { listen: \"127.0.0.1:0\", device: cpu, api_key_env: COLO_OPENAI_CHECK_KEY }"
  echo "models:"
  echo "  - { name: $name, kind: llama, path: \"$model\", memory_fraction: 0.05, max_seq_len: 2048 }"
  if [ -d "$cache/all-minilm-l6-v2" ]; then
    echo "  - { name: minilm, kind: bert, path: \"$cache/all-minilm-l6-v2\", memory_fraction: 0.05 }"
  fi
  echo "usage: { db: \"$tmp/usage.sqlite\" }"  # the ledger, files and batches: in the scratch folder
} >"$tmp/colo.yaml"
embed=()
[ -d "$cache/all-minilm-l6-v2" ] && embed=(--embed-model minilm)
[ ${#embed[@]} -gt 0 ] || echo "openai-check: MiniLM is not in the model cache; no embeddings check" >&2

key="check-$$-$RANDOM"
check_start openai-check "$tmp/colo.yaml" COLO_OPENAI_CHECK_KEY "$key"

rc=0
"$py" scripts/openai_check.py --url "http://127.0.0.1:$port" --model "$name" \
  --api-key "$key" "${embed[@]}" "${expect[@]}" || rc=$?
check_stop openai-check "$tmp/colo.yaml" || rc=1
exit "$rc"

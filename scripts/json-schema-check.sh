#!/usr/bin/env bash
# Structured output end to end: every schema of tests/data/json_schemas.json
# sent as response_format json_schema through the official openai client
# (pinned, PyPI) at temperature 0 and 1, each output validated with the
# jsonschema package (pinned, in the same virtualenv), against SmolLM2 and
# against a synthetic model written by colo-mkmodel (scripts/json_schema_check.py).
# Exit 0 when every output validates; 77 (skipped) when the packages cannot
# be installed or SmolLM2's weights are absent.
#
# Environment:
#   BUILD=build               the build folder (colo-server and colo-mkmodel are built when missing)
#   COLO_VENV=DIR             the virtualenv (default $BUILD/json-schema-venv, apart from openai-check's
#                             so that the two can run at once; created when missing)
#   OPENAI_VERSION=3.51.0     the openai package version
#   JSONSCHEMA_VERSION=4.26.0 the jsonschema package version
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
COLO_VENV=${COLO_VENV:-$BUILD/json-schema-venv}
OPENAI_VERSION=${OPENAI_VERSION:-3.51.0}
JSONSCHEMA_VERSION=${JSONSCHEMA_VERSION:-4.26.0}

. scripts/client-check-lib.sh
check_build
py="$COLO_VENV/bin/python"
if ! check_venv json-schema-check openai openai "$OPENAI_VERSION" "$COLO_VENV" ||
  ! check_venv json-schema-check jsonschema jsonschema "$JSONSCHEMA_VERSION" "$COLO_VENV"; then
  echo "json-schema-check: cannot install openai and jsonschema (no PyPI?): skipped" >&2
  exit 77
fi

smollm2="$COLO_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -r "$smollm2" ] || { echo "json-schema-check: no $smollm2 (scripts/fetch-models.sh): skipped" >&2; exit 77; }
tmp=$(mktemp -d)
check_tmp=$tmp
trap check_cleanup EXIT
"$BUILD/colo-mkmodel" --out "$tmp/tiny.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 \
  --vocab 512 --ctx 2048 --seed 7 >/dev/null
cat >"$tmp/colo.yaml" <<YAML
server: { listen: "127.0.0.1:0", device: cpu, api_key_env: COLO_JSON_SCHEMA_CHECK_KEY }
models:
  - { name: smollm2, kind: llama, path: "$smollm2", memory_fraction: 0.05, max_seq_len: 2048 }
  - { name: tiny, kind: llama, path: "$tmp/tiny.gguf", memory_fraction: 0.05, max_seq_len: 2048 }
YAML

key="check-$$-$RANDOM"
check_start json-schema-check "$tmp/colo.yaml" COLO_JSON_SCHEMA_CHECK_KEY "$key"
rc=0
for m in smollm2 tiny; do
  "$py" scripts/json_schema_check.py --url "http://127.0.0.1:$port" --model "$m" --api-key "$key" || rc=1
done
check_stop json-schema-check "$tmp/colo.yaml" || rc=1
exit "$rc"

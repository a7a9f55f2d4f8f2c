#!/usr/bin/env bash
# What LoRA adapters cost on the CPU: decode throughput of a 32-sequence
# batch with no adapters against the same batch spread over 8 adapters
# (rank 16; also 1 adapter, rank 8 and rank 64), the settings alternating
# over ROUNDS rounds, and the time to load a rank-16 adapter and its bytes.
# A benchmark: it prints and asserts nothing.
#
#   scripts/bench-lora.sh [colo-bench-lora flags...]
#
# Builds colo-bench-lora (Release) into $BUILD (default build-rel) with
# JOBS parallel jobs (default 2) and runs it with THREADS threads (default
# 2), ROUNDS rounds (default 3) and the flags given (colo-bench-lora
# --help): by default on SmolLM2-135M-Instruct from the model cache, or a
# synthetic model of its shape when the cache has none. The load average
# before and after goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-rel}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target colo-bench-lora >/dev/null
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$build/colo-bench-lora" --threads "${THREADS:-2}" --rounds "${ROUNDS:-3}" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

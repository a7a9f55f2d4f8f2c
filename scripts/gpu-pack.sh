#!/usr/bin/env bash
# Prepares a GPU run from a machine with nvcc but no GPU: builds colo with
# CUDA for sm_90 only into build-gpu/, and downloads the Debian runtime
# packages the GPU machine lacks (libevent, jansson, libyaml, OpenBLAS,
# cmocka) into .devpkgs/. Carry both folders to the GPU machine and run
# scripts/gpu-check.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -DCOLO_CUDA=ON -DCOLO_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j"$(nproc)"
mkdir -p .devpkgs
(cd .devpkgs && rm -f ./*.deb && apt-get download \
   libevent-2.1-7 libevent-pthreads-2.1-7 libjansson4 libyaml-0-2 libopenblas0-pthread libgfortran5 libcmocka0 2>&1 | tail -2)
du -sh build-gpu .devpkgs

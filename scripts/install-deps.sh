#!/usr/bin/env bash
# Installs colo's build and test dependencies from Debian's packages.
# Idempotent: packages already present are not touched, and nothing is
# fetched when all are there. Needs root or sudo for apt-get.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git python3 python3-pip
      libevent-dev libjansson-dev libyaml-dev libcmocka-dev libopenblas-dev node-llhttp
      clang libclang-rt-14-dev)
# Optional extras used by benchmarks and checks; missing ones are only reported.
extras=(wrk nginx-light prometheus valgrind curl)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${COLO_INSTALL_EXTRAS:-0}" = 1 ]; then
  for p in "${extras[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

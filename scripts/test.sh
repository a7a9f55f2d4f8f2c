#!/usr/bin/env bash
# The test command: installs what is missing (the build, and the test tools
# scripts/run.sh leaves out: Chromium, Prometheus, HAProxy, clang's fuzzer,
# the Helm checks' venv), fetches every model and vocabulary the tests use
# (tests that need weights that could not be fetched report themselves skipped),
# builds colo twice (the normal build, with CUDA when nvcc is found, and an
# ASan+UBSan build without CUDA) and runs the whole ctest suite in each,
# then the soak stage (scripts/churn.py for COLO_CHURN_SECONDS, default 60:
# models, adapters and the config changing under a mixed load, on the
# normal build), then each libFuzzer target for 20 s (scripts/fuzz.sh, a
# clang build).
# Each build's output goes to <dir>/build.log (its end is printed when it
# fails). The last line counts every test of every build, and each fuzz
# target as one test:
#   N passed, N failed, N skipped
# The exit status is 0 only when nothing failed.
#
#   scripts/test.sh            everything
#   COLO_TEST_QUICK=1 ...      the normal build only (no sanitizers, no fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

passed=0
failed=0
skipped=0

scripts/install-deps.sh
if [ -x scripts/fetch-models.sh ]; then
  scripts/fetch-models.sh || echo "test: model weights unavailable; the tests that need them will be skipped" >&2
fi

build() { # dir, cmake args...
  local dir=$1
  shift
  mkdir -p "$dir"
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir/configure.log" 2>&1; then
    echo "test: configuring $dir failed; the end of $dir/configure.log:" >&2
    tail -n 30 "$dir/configure.log" >&2
    return 1
  fi
  if ! cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
    echo "test: building $dir failed; the end of $dir/build.log:" >&2
    tail -n 30 "$dir/build.log" >&2
    return 1
  fi
  echo "built $dir (log: $dir/build.log)"
}

# junit_counts FILE: "passed failed skipped" of a ctest JUnit report.
junit_counts() {
  python3 - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
p = f = s = 0
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
        f += 1
    elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
        s += 1
    else:
        p += 1
print(p, f, s)
PY
}

# run_tests NAME DIR [VAR=VALUE...]: ctest in DIR, counted into the totals.
run_tests() {
  local name=$1 dir=$2 junit rc=0 p f s
  shift 2
  junit="$PWD/$dir/ctest-junit.xml"
  rm -f "$junit"
  echo "== tests ($name)"
  env "$@" ctest --test-dir "$dir" --output-on-failure -j"$jobs" --output-junit "$junit" || rc=$?
  if [ -f "$junit" ] && read -r p f s < <(junit_counts "$junit"); then
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
    # ctest failing with no failed test (a crash of ctest itself) still fails.
    [ $rc -eq 0 ] || [ "$f" -gt 0 ] || failed=$((failed + 1))
  else
    echo "test: ctest in $dir wrote no report" >&2
    failed=$((failed + 1))
  fi
}

# build_and_test NAME DIR [cmake args...]: a build that fails counts as one failure.
build_and_test() {
  local name=$1 dir=$2
  shift 2
  echo "== build ($name)"
  if build "$dir" "$@"; then
    run_tests "$name" "$dir" "${test_env[@]}"
  else
    failed=$((failed + 1))
  fi
}

# fuzz SECONDS: scripts/fuzz.sh, each target counted as passed or failed.
fuzz() {
  local log=build-fuzz/fuzz.log rc=0 n f
  mkdir -p build-fuzz
  echo "== fuzz (each target $1 s)"
  scripts/fuzz.sh "$1" 2>&1 | tee "$log" || rc=$?
  # The lines after "== fuzz: summary": one per target, FAILED in those that failed.
  n=$(sed -n '/^== fuzz: summary/,$p' "$log" | grep -c ' execs ' || true)
  f=$(sed -n '/^== fuzz: summary/,$p' "$log" | grep ' execs ' | grep -c 'FAILED' || true)
  if [ "$n" -eq 0 ]; then
    failed=$((failed + 1)) # no target ran: the fuzz build failed
  else
    passed=$((passed + n - f))
    failed=$((failed + f))
    [ $rc -eq 0 ] || [ "$f" -gt 0 ] || failed=$((failed + 1))
  fi
}

# soak: the churn test, counted as one test (skipped without the model weights).
soak() {
  local rc=0
  echo "== soak (churn, ${COLO_CHURN_SECONDS:-60} s)"
  python3 scripts/churn.py --build build --seconds "${COLO_CHURN_SECONDS:-60}" --warmup 15 || rc=$?
  case $rc in
    0) passed=$((passed + 1)) ;;
    2) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
}

test_env=()
build_and_test default build
[ -x build/colo-server ] && soak
if [ "${COLO_TEST_QUICK:-0}" != 1 ]; then
  test_env=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
  build_and_test "ASan + UBSan" build-asan -DCOLO_SANITIZE=ON -DCOLO_CUDA=OFF
  fuzz 20
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

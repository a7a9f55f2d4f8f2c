#!/usr/bin/env bash
# Builds colo's libFuzzer targets (tests/fuzz/fuzz_*.c) with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz, and runs
# each for a while, one after the other.
#
#   scripts/fuzz.sh [--merge] [SECONDS_PER_TARGET] [TARGET...]
#
#   SECONDS_PER_TARGET  default 60
#   TARGET              http api_request gguf safetensors config bert_config bpe wordpiece
#                       (default: all)
#   --merge             afterwards, add the inputs that found new coverage to
#                       the committed corpus (tests/fuzz/corpus/<target>/),
#                       minimised by libFuzzer's merge
#
# Each target starts from a working copy of its committed corpus in
# build-fuzz/fuzz-run/<target>/corpus (kept between runs, so long runs
# accumulate; the committed corpus is never written without --merge), with
# tests/fuzz/<target>.dict when there is one. Prints the executions and
# coverage of each target from libFuzzer's final statistics. On a crash, a
# leak, undefined behaviour or a timeout, the input is written to
# build-fuzz/fuzz-run/<target>/ and its path printed, and the script exits
# non-zero once every target has run (docs/FUZZING.md: turning it into a
# regression input).
set -euo pipefail
cd "$(dirname "$0")/.."

merge=0
if [ "${1:-}" = --merge ]; then
  merge=1
  shift
fi
seconds=60
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
all=(http api_request gguf safetensors config bert_config bpe wordpiece)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

max_len() {
  case $1 in
    gguf) echo 65536 ;;
    http | api_request) echo 8192 ;;
    safetensors | config | bert_config) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

for t in "${targets[@]}"; do
  [ -f "tests/fuzz/fuzz_$t.c" ] || { echo "fuzz: no target '$t' (tests/fuzz/fuzz_$t.c)" >&2; exit 2; }
done
command -v clang >/dev/null || { echo "fuzz: clang is missing (scripts/install-deps.sh installs it)" >&2; exit 2; }

dir=build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)
echo "== fuzz: build ($dir)"
mkdir -p "$dir"
CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLO_FUZZ=ON -DCOLO_CUDA=OFF \
  >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j"$jobs" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
summary=()
for t in "${targets[@]}"; do
  run="$dir/fuzz-run/$t"
  mkdir -p "$run/corpus"
  cp -n tests/fuzz/corpus/"$t"/* "$run/corpus/" 2>/dev/null || true
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  echo "== fuzz: $t for ${seconds}s"
  rc=0
  "$dir/fuzz_$t" "$run/corpus" "${dict[@]}" -max_total_time="$seconds" -max_len="$(max_len "$t")" \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$run/" \
    >"$run/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$run/log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
  line=$(printf '%-12s execs %-10s cov %-6s ft %-6s corpus %s' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" \
    "${corp:-?}")
  if [ $rc -ne 0 ]; then
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$run/log" | tail -1)
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$run/log" | head -5 || true
    echo "fuzz: $t FAILED (exit $rc); input: ${artifact:-none written}; log: $run/log" >&2
    line="$line  FAILED: ${artifact:-see $run/log}"
    failed+=("$t")
  elif [ $merge = 1 ]; then
    before=$(ls tests/fuzz/corpus/"$t" | wc -l)
    "$dir/fuzz_$t" -merge=1 -max_len="$(max_len "$t")" tests/fuzz/corpus/"$t" "$run/corpus" >"$run/merge.log" 2>&1
    after=$(ls tests/fuzz/corpus/"$t" | wc -l)
    line="$line  merged $((after - before)) input(s)"
  fi
  summary+=("$line")
  echo "$line"
done

echo "== fuzz: summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failures in: ${failed[*]}" >&2
  exit 1
fi

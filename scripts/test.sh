#!/usr/bin/env bash
# scripts/test.sh - the one test command: bash scripts/test.sh
#
# Installs the Debian build dependencies, then runs these stages in order:
#   build  build/       RelWithDebInfo, -Werror, benchmarks on (at -O1); ctest
#   asan   build-asan/  ASan + UBSan (less four checks, CMakeLists.txt) at -Og; ctest
#                       (not the browser tests, nor the fault harness: -LE 'browser|faults')
#   tsan   build-tsan/  TSan at -O1; ctest (not the browser tests)
#   fuzz   build-fuzz/  tests/fuzz/run.sh: each libFuzzer target for 45 s (clang 14)
#   bench  scripts/bench-smoke.sh (quick benchmark run), when it exists
# Every ctest run has a private Redis server (scripts/with-redis.sh) and a
# private PostgreSQL (scripts/with-postgres.sh).
# Pick stages with DELAYQ_STAGES, e.g. DELAYQ_STAGES=build bash scripts/test.sh
# DELAYQ_CTEST_JOBS sets ctest's -j (default 6 in build, 4 in the sanitizer
# stages: the tests mostly wait).
# The last line sums up every ctest run: "ctest: N passed, M failed".
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

stages="${DELAYQ_STAGES:-build,asan,tsan,fuzz,bench}"
for s in ${stages//,/ }; do
  case "$s" in
    build | asan | tsan | fuzz | bench) ;;
    *) delayq_die "unknown stage '$s' in DELAYQ_STAGES (stages: build,asan,tsan,fuzz,bench)" ;;
  esac
done
want() { [[ ",$stages," == *",$1,"* ]]; }

# Sanitized code runs several times slower; optimizing (-Og, -O1) keeps the
# tests quick without losing stack traces. Debug keeps assertions on. -g1 (line tables and
# function names: all a sanitizer report's stack trace needs) compiles in
# about a fifth less time than -g (docs/testing.md, "Build speed"). What
# these stages never run is not built: examples, benchmarks, the browser
# tests, the install rules.
sanitizer_args=(
  -DCMAKE_BUILD_TYPE=Debug
  -DDELAYQ_INSTALL=OFF -DDELAYQ_BUILD_EXAMPLES=OFF -DDELAYQ_BROWSER_TESTS=OFF
)
# -Og compiles the ASan build in less time than -O1 (docs/testing.md,
# "Sanitizer builds"); TSan's compile time is the same at both, and its
# tests want the speed of -O1.
asan_opt="-DCMAKE_CXX_FLAGS_DEBUG=-Og -g1"
tsan_opt="-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"

log_dir="$(mktemp -d "${TMPDIR:-/tmp}/delayq-testlogs.XXXXXX")"
passed=0
failed=0
current=""
timings=()

# Adds the counts of ctest's "X% tests passed, Y tests failed out of Z" line.
count_ctest() {
  local line
  line="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n 1 || true)"
  [[ -n "$line" ]] || return 0
  [[ "$line" =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]
  failed=$((failed + BASH_REMATCH[1]))
  passed=$((passed + BASH_REMATCH[2] - BASH_REMATCH[1]))
}

finish() {
  local rc=$?
  rm -rf "$log_dir"
  echo
  if ((${#timings[@]})); then
    echo "stage timings:"
    printf '  %s\n' "${timings[@]}"
  fi
  if ((rc != 0)); then
    echo "==> FAILED in stage ${current:-setup} (exit $rc)"
    # A stage that failed outside ctest (configure, build, a script) still
    # counts as a failure, so the summary of a failed run never reads clean.
    ((failed > 0)) || failed=1
  fi
  echo "ctest: $passed passed, $failed failed"
}
trap finish EXIT

# stage <name> <function> : runs a stage with a header and its wall time.
stage() {
  current="$1"
  echo
  echo "==> stage $1"
  local start=$SECONDS
  "$2"
  timings+=("$(printf '%-6s %4ds' "$1" $((SECONDS - start)))")
  current=""
}

# Tests at once. Most of a run is waiting (on a child server, a lease, a
# timeout the test provokes), not computing: on two cores, the plain run at
# -j2 kept them busy a third of the time, and -j4 took 104 s where -j2 took
# 157 s (docs/testing.md, "What a cold run costs"). No test may depend on
# how loaded the machine is, so this only changes how long a run takes.
# The plain build's tests compute least: at -j4 they used 282 s of CPU in
# 204 s (69% of two cores), and -j6 took 167 s (docs/testing.md, "What a
# cold run costs"); the sanitizer builds' tests compute more and stay at 4.
ctest_jobs="${DELAYQ_CTEST_JOBS:-4}"
plain_ctest_jobs="${DELAYQ_CTEST_JOBS:-6}"

# run_ctest <builddir> [ctest args...] : ctest under a private Redis and a
# private PostgreSQL (fsync off: no test crashes the OS, and a loaded disk's
# fsyncs would be most of their time; scripts/with-postgres.sh); counts the
# results.
run_ctest() {
  local log="$log_dir/ctest-$current.log" rc=0 jobs="$ctest_jobs"
  [[ "$current" != build ]] || jobs="$plain_ctest_jobs"
  DELAYQ_POSTGRES_FSYNC=off scripts/with-redis.sh scripts/with-postgres.sh \
    ctest --test-dir "$1" --output-on-failure --no-tests=error -j"$jobs" "${@:2}" 2>&1 | tee "$log" || rc=$?
  count_ctest "$log"
  return "$rc"
}

# build/ as the other scripts configure it, but its benchmarks built for the
# bench stage's smoke run only (-O1 -g0, bench/CMakeLists.txt): their figures
# are never read here, and scripts/bench*.sh build them at -O2 again.
ci_main_args=("${DELAYQ_MAIN_BUILD_ARGS[@]}" -DDELAYQ_BENCH_SMOKE_BUILD=ON)

stage_build() {
  configure_and_build build "${ci_main_args[@]}"
  run_ctest build
}

stage_asan() {
  configure_and_build build-asan -DDELAYQ_SANITIZE=address,undefined "$asan_opt" "${sanitizer_args[@]}"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest build-asan -LE 'browser|faults'
}

stage_tsan() {
  configure_and_build build-tsan -DDELAYQ_SANITIZE=thread "$tsan_opt" "${sanitizer_args[@]}"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$DELAYQ_ROOT/tests/tsan.supp" run_ctest build-tsan -LE 'browser|faults'
}

# Not a ctest run: a target that fails makes run.sh, so the stage, fail, and
# the summary counts it like any failed stage outside ctest.
stage_fuzz() {
  bash tests/fuzz/run.sh 45
}

stage_bench() {
  if [[ ! -f scripts/bench-smoke.sh ]]; then
    echo "(no scripts/bench-smoke.sh yet: nothing to run)"
    return 0
  fi
  # The smoke run uses the benchmarks of build/; make sure they are current.
  configure_and_build build "${ci_main_args[@]}"
  scripts/with-redis.sh bash scripts/bench-smoke.sh
}

current=deps
echo "==> stage deps"
ensure_packages "${DELAYQ_TEST_DEPS[@]}"
# node and npm for the beanstalk suite's Node client (scripts/common.sh).
ensure_node_npm
current=""

for s in build asan tsan fuzz bench; do
  if want "$s"; then stage "$s" "stage_$s"; fi
done

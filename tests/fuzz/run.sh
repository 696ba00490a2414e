#!/usr/bin/env bash
# tests/fuzz/run.sh - builds the libFuzzer targets and fuzzes each one.
#
#   bash tests/fuzz/run.sh [seconds]   build, then fuzz every target for
#                                      `seconds` (default 60)
#   bash tests/fuzz/run.sh --build     build only
#   bash tests/fuzz/run.sh --seeds     regenerate the checked-in seed corpus
#                                      tests/fuzz/corpus/ (make_seeds.cpp)
#
# Everything goes to build-fuzz/: the binaries, corpus/<target>/ (a working
# copy of the seeds, where libFuzzer adds what it finds; it persists between
# runs, delete it to start again from the seeds), artifacts/<target>/
# (reproducers of this run's failures) and logs/<target>.log.
# Exits non-zero when a target fails, naming the reproducer.
#
# Environment:
#   DELAYQ_FUZZ_CXX      compiler (default clang++-14; needs libclang-rt-14-dev)
#   DELAYQ_FUZZ_TARGETS  targets to build and run (default: all, see below)
#   DELAYQ_FUZZ_JOBS     targets built and fuzzed at once (default: nproc)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/build-fuzz"
cxx="${DELAYQ_FUZZ_CXX:-clang++-14}"

die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The sources of each target, relative to the repository root.
wheel_sources=(tests/fuzz/fuzz_wheel.cpp engine/src/timer_wheel.cpp)
codec_sources=(persistence/common/record_codec.cpp engine/src/error.cpp engine/src/log.cpp)
server_sources=(server/src/wire/request_codec.cpp server/src/wire/api_error.cpp
  server/src/wire/dump_json.cpp server/src/wire/http_url.cpp server/src/api/request_guard.cpp
  server/src/api/batch_split.cpp server/src/security/hmac_sha256.cpp
  server/src/security/sha256.cpp engine/src/error.cpp
  # Schedules' bodies are checked too (check_schedule(): the cron parser, the
  # time zones, the search for occurrences).
  engine/src/schedule.cpp engine/src/log.cpp engine/src/detail/validation.cpp
  engine/src/detail/schedules/cron_expr.cpp engine/src/detail/schedules/timing.cpp
  engine/src/detail/schedules/zone.cpp)
beanstalk_sources=(server/src/beanstalk/command_reader.cpp server/src/beanstalk/reply.cpp
  server/src/beanstalk/tube_name.cpp)
declare -A target_sources=(
  [fuzz_wheel]="${wheel_sources[*]}"
  [fuzz_record_decode]="tests/fuzz/fuzz_record_decode.cpp ${codec_sources[*]}"
  [fuzz_server_request]="tests/fuzz/fuzz_server_request.cpp ${server_sources[*]}"
  [fuzz_beanstalk_parser]="tests/fuzz/fuzz_beanstalk_parser.cpp ${beanstalk_sources[*]}"
)
# Extra compiler flags. The wheel's input is a program, never compared with
# constants as such, while tracing every comparison of the reference model
# and its checks would cost two thirds of the run time.
declare -A target_cxxflags=(
  [fuzz_wheel]="-fno-sanitize-coverage=trace-cmp"
  [fuzz_record_decode]=""
  [fuzz_server_request]="-I$root/engine/src -DUSE_OS_TZDB=1 -ldate-tz"
  [fuzz_beanstalk_parser]=""
)
# Extra libFuzzer flags. Long wheel programs reach states short ones do not,
# so let its inputs grow to -max_len at once.
declare -A target_flags=(
  [fuzz_wheel]="-len_control=0"
  [fuzz_record_decode]=""
  [fuzz_server_request]=""
  [fuzz_beanstalk_parser]=""
)
all_targets=(fuzz_record_decode fuzz_wheel fuzz_server_request fuzz_beanstalk_parser)
read -r -a targets <<<"${DELAYQ_FUZZ_TARGETS:-${all_targets[*]}}"
for t in "${targets[@]}"; do
  [[ -n "${target_sources[$t]:-}" ]] || die "unknown target '$t' (targets: ${all_targets[*]})"
done

# Sanitizers stop at the first report; libstdc++ checks its own preconditions.
common_flags=(
  -std=c++20 -g -O1 -fno-omit-frame-pointer -Wall -Wextra
  -D_GLIBCXX_ASSERTIONS
  -I"$root/engine/include" -I"$root/persistence/include" -I"$root/server/src" -I"$here"
)
# shellcheck disable=SC2054 # the commas belong to one flag
fuzz_flags=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)

command -v "$cxx" >/dev/null ||
  die "$cxx not found: install clang and libclang-rt-14-dev (scripts/common.sh lists them)"

# build <output> <flags...> -- <sources...> : compiles when the binary is
# missing, was built with other flags, or is older than a source or header.
build() {
  local bin="$1" flags=() srcs=()
  shift
  while [[ "$1" != -- ]]; do flags+=("$1"); shift; done
  shift
  srcs=("$@")
  local stamp="$bin.cmdline" cmdline
  cmdline="$cxx ${flags[*]} ${srcs[*]}"
  if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$cmdline" ]] &&
    [[ -z "$(find "${srcs[@]/#/$root/}" "$root/engine/include" "$root/persistence/include" "$root/server/src/api" \
      "$root/server/src/wire" "$root/server/src/beanstalk" \
      "$here" -name '*.[ch]pp' -newer "$bin" -print -quit)" ]]; then
    return 0
  fi
  echo "building $(basename "$bin")"
  (cd "$root" && "$cxx" "${flags[@]}" "${srcs[@]}" -o "$bin") ||
    die "building $(basename "$bin") failed (libFuzzer needs libclang-rt-14-dev)"
  printf '%s\n' "$cmdline" >"$stamp"
}

mkdir -p "$out"

if [[ "${1:-}" == --seeds ]]; then
  build "$out/make_seeds" "${common_flags[@]}" -fsanitize=address,undefined -- \
    tests/fuzz/make_seeds.cpp "${codec_sources[@]}"
  rm -rf "$here/corpus/fuzz_record_decode" "$here/corpus/fuzz_wheel"
  "$out/make_seeds" "$here/corpus"
  echo "seeds written to tests/fuzz/corpus/:"
  (cd "$here/corpus" && find . -type f | sort | sed 's|^\./|  |')
  exit 0
fi

# libFuzzer runs one process on one core: the targets are built, and fuzzed,
# up to $jobs at once (each still gets its full time on a core of its own).
jobs="${DELAYQ_FUZZ_JOBS:-$(nproc)}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "DELAYQ_FUZZ_JOBS must be a positive integer, not '$jobs'"

# each_target <function> : runs `function target` for every target, up to
# $jobs at once, then prints what each printed, in the targets' order;
# fails when one of them failed.
each_target() {
  local f="$1" t running=0 rc=0
  mkdir -p "$out/logs"
  for t in "${targets[@]}"; do
    if ((running >= jobs)); then
      wait -n || true
      running=$((running - 1))
    fi
    rm -f "$out/logs/$t.rc"  # under set -e, a failing "$f" leaves none: a failure
    ("$f" "$t" >"$out/logs/$t.out" 2>&1; echo $? >"$out/logs/$t.rc") &
    running=$((running + 1))
  done
  wait || true
  for t in "${targets[@]}"; do
    cat "$out/logs/$t.out"
    [[ "$(cat "$out/logs/$t.rc" 2>/dev/null)" == 0 ]] || rc=1
  done
  return "$rc"
}

build_target() {
  # shellcheck disable=SC2086 # space-free paths and flags, one word each
  build "$out/$1" "${common_flags[@]}" "${fuzz_flags[@]}" ${target_cxxflags[$1]} -- \
    ${target_sources[$1]}
}
each_target build_target || exit 1
[[ "${1:-}" == --build ]] && exit 0

seconds="${1:-60}"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || die "seconds must be a positive integer, not '$seconds'"

# fuzz <target> : runs it on the working copy of its corpus; 0 when clean.
fuzz() {
  local t="$1"
  local corpus="$out/corpus/$t" artifacts="$out/artifacts/$t" log="$out/logs/$t.log"
  mkdir -p "$corpus" "$out/logs"
  rm -rf "$artifacts"
  mkdir -p "$artifacts"
  # Seeds go into the copy; what libFuzzer finds stays there, not in the tree.
  cp "$here/corpus/$t/"* "$corpus/"

  echo "==> $t: fuzzing for ${seconds}s (log: ${log#"$root"/})"
  local rc=0
  # timeout: a hung target (or crash handler) must not eat the CI budget.
  # shellcheck disable=SC2086 # target_flags holds separate words
  timeout --kill-after=10 $((seconds + 120)) \
    "$out/$t" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 \
    -timeout=20 -print_final_stats=1 -artifact_prefix="$artifacts/" ${target_flags[$t]} \
    >"$log" 2>&1 || rc=$?

  if ((rc == 0)); then
    local done_line runs
    done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)"
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    echo "    ok: ${runs:-?} runs; ${done_line#*DONE }"
    return 0
  fi
  # From the first report (the harness's own message, a sanitizer's or a
  # libFuzzer's) on; the whole log stays in build-fuzz/logs/.
  echo "    FAILED (exit $rc):"
  ((rc != 124 && rc != 137)) || echo "    | killed: still running $((seconds + 120))s after it started"
  awk '/^fuzz_[a-z_]+: |^==[0-9]+==|runtime error:|^SUMMARY:/ { on = 1 } on && n++ < 30' "$log" |
    sed 's/^/    | /'
  local f found=0
  for f in "$artifacts"/*; do
    [[ -e "$f" ]] || continue
    found=1
    echo "    reproducer: ${f#"$root"/}"
    echo "    reproduce:  build-fuzz/$t ${f#"$root"/}"
  done
  ((found)) || echo "    (no reproducer written; see the log)"
  return 1
}

failed=()
each_target fuzz || true
for t in "${targets[@]}"; do
  [[ "$(cat "$out/logs/$t.rc" 2>/dev/null)" == 0 ]] || failed+=("$t")
done
if ((${#failed[@]})); then
  echo "fuzzing failed: ${failed[*]}"
  exit 1
fi
echo "fuzzing: ${#targets[@]} targets clean after ${seconds}s each"

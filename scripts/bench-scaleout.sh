#!/usr/bin/env bash
# scripts/bench-scaleout.sh - the scale-out benchmark of issue 14
# (docs/benchmarks.md, "Scale-out"): delayq-server --cluster with 1, 2 and 3
# instances on one Redis.
#
#   bash scripts/bench-scaleout.sh [--quick] [--build DIR] [--no-build] [--out DIR]
#                                  [-- DELAYQ-BENCH-SCALEOUT ARGS...]
#
# Installs what scripts/common.sh lists, builds build/ (DELAYQ_MAIN_BUILD_ARGS,
# the configure of scripts/test.sh), starts a private redis-server
# (scripts/with-redis.sh: appendonly yes, appendfsync always) and runs
# build/bench/server/delayq-bench-scaleout against it. That program starts
# and stops the delayq-servers itself (127.0.0.1, port 0, each with a log in a
# temp dir): every round gets fresh instances on a fresh key prefix, and the
# failover rounds SIGKILL one of them mid-run. It measures
#   schedule   POST /v1/tasks:batch round-robin over the instances, tasks/s
#   firing     as many tasks due at one instant, pushed to a receiver in the
#              program (answers 200), tasks/s from the first delivery to the last
#   failover   3 instances, one SIGKILLed: from the kill to the first push by a
#              survivor of a task of a shard the killed one held
# Writes to bench/results/ (about 4 minutes):
#   scaleout.json          every round, the config, medians, ratios
#   scaleout.machine.txt   CPU, cores, compiler, flags, load, commit, command
#   scaleout-tables.md     the tables (also printed)
#
#   --quick        tiny sizes (~15 s), into bench/results/quick/: checks the
#                  pipeline; scripts/bench-smoke.sh runs it in CI
#   --build DIR    the build directory (default build/)
#   --no-build     use DIR as it is: no package install, no configure, no build
#   --out DIR      where the results go (default bench/results, or .../quick)
#   -- ARGS        passed to delayq-bench-scaleout (e.g. -- --rounds 5 --tasks 50000)
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

quick=0
build_it=1
build=build
out=""
extra=()
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --build) build="${2:?--build needs a directory}"; shift ;;
    --no-build) build_it=0 ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,31p' "$0"; exit 0 ;;
    *) delayq_die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$build" = /* ]] || build="$DELAYQ_ROOT/$build"

mode=()
if ((quick)); then
  mode=(--quick)
  : "${out:=bench/results/quick}"
fi
: "${out:=bench/results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# The run itself happens in a second invocation of this script under
# scripts/with-redis.sh, which owns the private redis-server
# ($DELAYQ_BENCH_SCALEOUT_INNER marks it).
if [[ -z "${DELAYQ_BENCH_SCALEOUT_INNER:-}" ]]; then
  if ((build_it)); then
    ensure_packages "${DELAYQ_TEST_DEPS[@]}"
    configure_and_build "$build" "${DELAYQ_MAIN_BUILD_ARGS[@]}"
  fi
  delayq_need_tools redis-server redis-cli
  delayq_need_built "$build" "$build/server/delayq-server" "$build/bench/server/delayq-bench-scaleout"
  DELAYQ_BENCH_SCALEOUT_INNER=1 exec "$DELAYQ_ROOT/scripts/with-redis.sh" \
    bash "${BASH_SOURCE[0]}" --no-build --build "$build" --out "$out" "${mode[@]}" \
    -- ${extra[@]+"${extra[@]}"}
fi

[[ -n "${DELAYQ_TEST_REDIS:-}" ]] || delayq_die "internal: no DELAYQ_TEST_REDIS from with-redis.sh"
server_bin="$build/server/delayq-server"
client_bin="$build/bench/server/delayq-bench-scaleout"

# The servers' logs; kept when the run fails, so they can be read.
logs="$(mktemp -d "${TMPDIR:-/tmp}/delayq-bench-scaleout.XXXXXX")"

# redis-server's pid: the program reports the CPU it used beside the servers'.
redis_pid="$(cat "$DELAYQ_TEST_REDIS_DIR/redis.pid")"
cmd=("$client_bin" "${mode[@]}" --server-bin "$server_bin" --redis "$DELAYQ_TEST_REDIS"
  --redis-pid "$redis_pid" --log-dir "$logs" --out "$out/scaleout.json" --tables "$out/scaleout-tables.md"
  ${extra[@]+"${extra[@]}"})
{
  delayq_machine "$build"
  echo "redis:      $(redis-server --version | head -n 1); appendonly yes, appendfsync always (scripts/with-redis.sh), data on $(df -T "$DELAYQ_TEST_REDIS_DIR" | awk 'NR == 2 {print $2}')"
  echo "delayq:     delayq-server --cluster --shards N --lease D --instance iK --push scaleout=RECEIVER (defaults otherwise: --tick 1 --workers 2 --io-threads auto: 2 on this store), one fresh prefix per round"
  echo "sharing:    every delayq-server, redis-server and the load generator with its push receiver run on these $(nproc) cores"
  build_arg=""
  [[ "$build" != "$DELAYQ_ROOT/build" ]] && build_arg=" --build ${build#"$DELAYQ_ROOT/"}"
  echo "command:    bash scripts/bench-scaleout.sh${build_arg}${mode[*]:+ ${mode[*]}}${extra[*]:+ -- ${extra[*]}}"
  echo "client:     ${cmd[*]#"$DELAYQ_ROOT/"}"
} >"$out/scaleout.machine.txt"
echo
cat "$out/scaleout.machine.txt"
echo

status=0
"${cmd[@]}" || status=$?
echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end" >>"$out/scaleout.machine.txt"
if ((status != 0)); then
  echo "bench-scaleout: delayq-bench-scaleout failed (exit $status); the servers' logs are in $logs:" >&2
  for f in "$logs"/*.log; do
    [[ -s "$f" ]] && { echo "--- $f" >&2; tail -n 10 "$f" >&2; }
  done
  exit "$status"
fi
rm -rf "$logs"
echo
echo "results in $out/: scaleout.json scaleout.machine.txt scaleout-tables.md"

#!/usr/bin/env bash
# scripts/bench-peers.sh - delayq against its peers, side by side in one run
# (issue 32, "Peer benchmarks in the repository"; docs/benchmarks.md, "The
# peers, side by side").
#
#   bash scripts/bench-peers.sh [--quick] [--no-build] [--build DIR] [--out DIR]
#                               [--only PARTS] [--rounds N] [--backlog-rounds N]
#                               [--worker-mode MODE]
#                               [--only-report]
#
# Installs what scripts/common.sh lists (beanstalkd, redis-server,
# gnuplot-nox, python3; node and npm through ensure_node_npm), builds
# delayq-server in build/ (DELAYQ_MAIN_BUILD_ARGS), installs BullMQ as
# bench/peers/node/package-lock.json pins it (`npm ci`, into
# <build>/bench/peers/node), then runs bench/peers/peers.py, which starts
# every server on free loopback ports, each in a temp dir, and stops them all
# afterwards (also on SIGINT or SIGTERM, and if this script is killed):
#
#   table 1  beanstalkd's protocol, one Python 3 client (stdlib only,
#            bench/peers/beanstalk_client.py) against both servers: 5,000
#            puts one at a time on 1 connection, 5,000 reserve+delete cycles
#            on 1 connection, 8 connections doing put/reserve/delete. Pairs
#            of matched durability:
#              delayq-server memory:                   beanstalkd (memory)
#              sqlite:PATH?synchronous=normal          beanstalkd -b DIR (fsync every 50 ms)
#              sqlite:PATH (synchronous=full)          beanstalkd -b DIR -f 0
#              redis:// (appendfsync everysec)         beanstalkd -b DIR (target 0.5x)
#            and the floors (bench/floor/, delayq-bench-floor) on the
#            one-connection rows: the least a server can do a request, alone
#            and with one raw SQLite commit a write at each synchronous
#            level, which bounds what any SQLite store can reach there
#   table 2  a backlog: one connection pipelines 200,000 puts of 8 bytes
#            (1,000 in flight), then reserve+delete one by one; VmRSS per
#            ready job. beanstalkd and delayq memory:, fresh each round
#   checks   ordering (put pri 2, put pri 1, reserve gets pri 1: 1,000
#            tries) and timing parity (release delay 2, reserve-with-timeout
#            1 twice: TIMED_OUT then the job within 50 ms of 2 s; 200 tries,
#            50 clients at once), each server of table 1, two busy loops on
#   table 3  BullMQ 5 (npm) against delayq-server's HTTP API on the same
#            redis-server, from Node.js (bench/peers/http_peers.js): adds
#            one at a time and 32 in flight, a burst of 20,000 due at one
#            instant run by 32 workers, lateness of 20,000 due over 5 s,
#            Redis memory per delayed job, and Node's own floor (sequential
#            GET /healthz through the same agent)
#
# Rounds alternate between the servers (medians of 3). One redis-server
# (appendonly yes, appendfsync everysec) serves table 1's redis:// row and
# table 3. About 10 minutes; the figures are only as quiet as the machine.
# Writes to bench/results/:
#   peers.json                    every round of every figure, the config, versions
#   peers.machine.txt             CPU, cores, compiler, flags, load, commit, versions, command
#   peers-tables.md               the tables (also printed)
#   peers-throughput.png          tables 1 and 3 as bars (log scale)
#   peers-plot-beanstalk.tsv, peers-plot-http.tsv   the plot's inputs
#
#   --quick            tiny sizes, one round, checks on the memory pair only,
#                      into bench/results/quick/ (scripts/bench-smoke.sh
#                      runs it in CI; no figure gates anything)
#   --no-build         no package install, no configure, no build: use what
#                      is there (npm ci still runs when the install does not
#                      match the lock file)
#   --build DIR        the build directory (default build/)
#   --out DIR          where the results go (default bench/results, or .../quick)
#   --only PARTS       some of table1,backlog,checks,bullmq (comma-separated)
#   --rounds N         rounds of tables 1 and 3 (and 2, unless --backlog-rounds)
#   --worker-mode M    delayq's workers in table 3: auto (one round trip,
#                      finish carrying "next", when the server takes it;
#                      else plain, and the run says so), plain, next, both
#   --only-report      no run: the tables and the plot from <out>/peers.json
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

quick=0
build_it=1
report_only=0
build=build
out=""
pass=()
while (($#)); do
  case "$1" in
    --quick) quick=1; pass+=(--quick) ;;
    --no-build) build_it=0 ;;
    --build) build="${2:?--build needs a directory}"; shift ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --only | --rounds | --backlog-rounds | --worker-mode)
      pass+=("$1" "${2:?$1 needs a value}"); shift ;;
    --only-report) report_only=1 ;;
    -h | --help) sed -n '2,/^set -euo pipefail$/p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) delayq_die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$build" = /* ]] || build="$DELAYQ_ROOT/$build"
if ((quick)); then : "${out:=bench/results/quick}"; fi
: "${out:=bench/results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

draw_plot() {
  if [[ -s "$out/peers-plot-beanstalk.tsv" && -s "$out/peers-plot-http.tsv" ]]; then
    gnuplot -e "dir='$out'" "$DELAYQ_ROOT/bench/report/peers-plots.gp"
    echo "plot: $out/peers-throughput.png"
  else
    echo "(no plot: tables 1 and 3 were not both measured)"
  fi
}
if ((report_only)); then
  [[ -s "$out/peers.json" ]] || delayq_die "no $out/peers.json: run without --only-report first"
  python3 -B "$DELAYQ_ROOT/bench/peers/report.py" "$out/peers.json" "$out"
  draw_plot
  exit 0
fi

if ((build_it)); then
  ensure_packages "${DELAYQ_TEST_DEPS[@]}"
  ensure_node_npm
  configure_and_build "$build" --target delayq-server --target delayq-bench-floor \
    "${DELAYQ_MAIN_BUILD_ARGS[@]}"
fi
delayq_need_tools beanstalkd redis-server gnuplot python3 node npm
delayq_need_built "$build" "$build/server/delayq-server" "$build/bench/floor/delayq-bench-floor"

# The npm packages as bench/peers/node/package-lock.json pins them, into
# the build tree (scripts/common.sh).
ensure_peer_node_modules "$build" bullmq
node_dir="$build/bench/peers/node"

build_arg=""
[[ "$build" != "$DELAYQ_ROOT/build" ]] && build_arg=" --build ${build#"$DELAYQ_ROOT/"}"
((build_it)) || build_arg=" --no-build$build_arg"
command="bash scripts/bench-peers.sh${build_arg}${pass[*]:+ ${pass[*]}}"
machine="$out/peers.machine.txt"
{
  delayq_machine "$build"
  echo "beanstalkd: $(beanstalkd -v 2>&1 | head -n 1)"
  echo "redis:      $(redis-server --version | head -n 1); appendonly yes, appendfsync everysec"
  echo "node:       $(node --version); bullmq $(node -p "require('$node_dir/node_modules/bullmq/package.json').version")"
  echo "python:     $(python3 --version 2>&1)"
  echo "delayq:     delayq-server defaults (--tick 1 --workers 2 --io-threads auto: 1 on memory:, 2 otherwise)"
  echo "command:    $command"
} >"$machine"
cat "$machine"
echo

# In the background, so that a SIGTERM or SIGINT sent to this script alone
# reaches the driver at once (bash runs a trap only between commands); the
# driver stops every server it started.
driver=""
forward() {
  if [[ -n "$driver" ]]; then
    kill -TERM "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
}
trap 'forward; exit 130' INT
trap 'forward; exit 143' TERM
python3 -B "$DELAYQ_ROOT/bench/peers/peers.py" --server "$build/server/delayq-server" \
  --floor "$build/bench/floor/delayq-bench-floor" --node-modules "$node_dir/node_modules" --out "$out" --machine "$machine" \
  --command "$command" ${pass[@]+"${pass[@]}"} &
driver=$!
status=0
wait "$driver" || status=$?
driver=""
((status == 0)) || delayq_die "bench/peers/peers.py failed (exit $status)"
draw_plot
echo "results in $out/: peers.json peers.machine.txt peers-tables.md, and the plot when drawn"

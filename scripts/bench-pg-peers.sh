#!/usr/bin/env bash
# scripts/bench-pg-peers.sh - delayq on PostgreSQL against pg-boss and
# graphile-worker, side by side in one run (issue 34; docs/benchmarks.md,
# "PostgreSQL: pg-boss and graphile-worker, side by side").
#
#   bash scripts/bench-pg-peers.sh [--quick] [--no-build] [--build DIR] [--out DIR]
#                                  [--rounds N] [--worker-mode MODE]
#                                  [--pgboss JSON] [--graphile JSON]
#                                  [--systems LIST] [--spread-ms MS]
#                                  [--only-report]
#
# Installs what scripts/common.sh lists (postgresql, postgresql-client,
# gnuplot-nox, python3; node and npm through ensure_node_npm), builds
# delayq-server in build/ (DELAYQ_MAIN_BUILD_ARGS), installs pg-boss and
# graphile-worker as bench/peers/node/package-lock.json pins them (`npm ci`,
# into <build>/bench/peers/node, shared with scripts/bench-peers.sh), then,
# under scripts/with-postgres.sh (one private PostgreSQL on a free loopback
# port, fsync and synchronous_commit on), runs bench/peers/pg_peers.py: a
# database per system on that one server, delayq-server started on
# `--store postgres://.../peers_delayq?schema=delayq`, and
# bench/peers/pg_peers.js measuring, from one Node.js process:
#
#   add-1    adds one at a time (sequential awaits), jobs/s
#   add-32   adds with 32 in flight, jobs/s; bytes per waiting job: the
#            system's tables (pg_total_relation_size over its schema, after
#            VACUUM FULL) before and after the adds, per job
#   burst    20,000 jobs due at one instant, run 32 at once, jobs/s from the
#            due instant to the last completion
#   late     20,000 jobs due uniformly over 5 s: lateness p50/p99/max
#
# Rounds rotate the order of the systems (medians of 3). About 10 minutes.
# Every process it starts (PostgreSQL, delayq-server, node) is stopped at
# the end, on an error, and on SIGINT or SIGTERM. Writes to bench/results/:
#   pg-peers.json                 every round of every figure, the settings, versions
#   pg-peers.machine.txt          CPU, cores, compiler, flags, load, commit, versions, command
#   pg-peers-tables.md            the table (also printed)
#   pg-peers.png                  throughput (log scale) and lateness, as bars
#   pg-peers-plot-throughput.tsv, pg-peers-plot-lateness.tsv   the plot's inputs
# The table size after a 10-minute churn is scripts/pg-churn.sh's (delayq
# only; bench/results/postgres/pg-churn-*.txt), not part of this run.
#
#   --quick            tiny sizes, one round, into bench/results/quick/
#   --no-build         no package install, no configure, no build: use what
#                      is there (npm ci still runs when the install does not
#                      match the lock file)
#   --build DIR        the build directory (default build/); its
#                      server/delayq-server is the binary measured
#   --out DIR          where the results go (default bench/results, or .../quick)
#   --rounds N         rounds (default 3; quick 1)
#   --worker-mode M    delayq's workers: auto, plain, next, both (as bench-peers.sh),
#                      batch (4 loops reserving up to 8, finished in one
#                      POST /v1/tasks:finish), or a list: next,batch
#   --pgboss JSON      override pg-boss's settings, e.g. '{"work": {"batchSize": 32, "localConcurrency": 1}}'
#   --graphile JSON    override graphile-worker's, e.g. '{"preset": {"localQueue": {"size": -1}}}'
#   --systems LIST     some of delayq,pg-boss,graphile-worker (default all)
#   --spread-ms MS     spread the lateness row's jobs over MS (default 5000:
#                      4,000 jobs a second); a diagnostic, e.g. 20000
#   --delayq-store URI delayq's side on another store, e.g. memory:; a
#                      diagnostic: the floor of the client and the HTTP path
#                      (the bytes row then reads an empty schema)
#   --only-report      no run: the table and the plot from <out>/pg-peers.json
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

quick=0
build_it=1
report_only=0
build=build
out=""
delayq_store=""
pass=()
while (($#)); do
  case "$1" in
    --quick) quick=1; pass+=(--quick) ;;
    --no-build) build_it=0 ;;
    --build) build="${2:?--build needs a directory}"; shift ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --rounds | --worker-mode | --pgboss | --graphile | --systems | --spread-ms | --delayq-store)
      [[ "$1" == --delayq-store ]] && delayq_store="${2:-}"
      pass+=("$1" "${2:?$1 needs a value}"); shift ;;
    --only-report) report_only=1 ;;
    -h | --help) sed -n '2,/^set -euo pipefail$/p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) delayq_die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$build" = /* ]] || build="$DELAYQ_ROOT/$build"
if ((quick)); then : "${out:=bench/results/quick}"; fi
# A quick run is a smoke test whose figures nobody reads: PostgreSQL without
# fsync there, which spares it most of the peers' one-commit-per-job adds.
pg_fsync=on
if ((quick)); then pg_fsync=off; fi
: "${out:=bench/results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

draw_plot() {
  if [[ -s "$out/pg-peers-plot-throughput.tsv" && -s "$out/pg-peers-plot-lateness.tsv" ]]; then
    gnuplot -e "dir='$out'" "$DELAYQ_ROOT/bench/report/pg-peers-plots.gp"
    echo "plot: $out/pg-peers.png"
  fi
}
if ((report_only)); then
  [[ -s "$out/pg-peers.json" ]] || delayq_die "no $out/pg-peers.json: run without --only-report first"
  python3 -B "$DELAYQ_ROOT/bench/peers/pg_report.py" "$out/pg-peers.json" "$out"
  draw_plot
  exit 0
fi

if ((build_it)); then
  ensure_packages "${DELAYQ_TEST_DEPS[@]}"
  ensure_node_npm
  configure_and_build "$build" --target delayq-server "${DELAYQ_MAIN_BUILD_ARGS[@]}"
fi
delayq_need_tools psql gnuplot python3 node npm
delayq_need_built "$build" "$build/server/delayq-server"

# The npm packages as bench/peers/node/package-lock.json pins them, into
# the build tree (scripts/common.sh).
ensure_peer_node_modules "$build" pg-boss
node_dir="$build/bench/peers/node"

build_arg=""
[[ "$build" != "$DELAYQ_ROOT/build" ]] && build_arg=" --build ${build#"$DELAYQ_ROOT/"}"
((build_it)) || build_arg=" --no-build$build_arg"
quoted=""
((${#pass[@]})) && quoted="$(printf ' %q' "${pass[@]}")"
command="bash scripts/bench-pg-peers.sh${build_arg}${quoted}"
machine="$out/pg-peers.machine.txt"
pkg() { node -p "require('$node_dir/node_modules/$1/package.json').version" 2>/dev/null || echo '?'; }
{
  if [[ -s "$build/CMakeCache.txt" ]]; then
    delayq_machine "$build"
  else
    # A binary built elsewhere (--build DIR holding only server/delayq-server).
    echo "date:       $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpu:        $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
    echo "cores:      $(nproc) (nproc)"
    echo "memory:     $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "kernel:     $(uname -sr)"
    echo "compiler:   ? ($build has no CMakeCache.txt: the binary was built elsewhere)"
    echo "commit:     $(git rev-parse --short HEAD 2>/dev/null || echo '?') (the benchmark scripts)"
    echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at start"
  fi
  echo "binary:     $(readlink -f "$build/server/delayq-server") ($("$build/server/delayq-server" --version 2>&1 | head -n 1))"
  echo "postgres:   $("$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)/postgres" --version); fsync $pg_fsync, synchronous_commit on (scripts/with-postgres.sh)"
  echo "node:       $(node --version); pg-boss $(pkg pg-boss), graphile-worker $(pkg graphile-worker), pg $(pkg pg)"
  echo "python:     $(python3 --version 2>&1)"
  echo "delayq:     delayq-server defaults (--tick 1 --workers 2 --io-threads auto: 2 on this store), store ${delayq_store:-postgres://.../peers_delayq?schema=delayq}"
  echo "command:    $command"
} >"$machine"
cat "$machine"
echo

# In the background, so that a SIGINT or SIGTERM sent to this script reaches
# the driver at once (bash runs a trap only between commands). The driver
# is with-postgres.sh's child: it gets the signal, stops delayq-server and
# node, and exits; then with-postgres.sh stops PostgreSQL.
runner=""
children_of() {
  local stat fields
  for stat in /proc/[0-9]*/stat; do
    read -r -a fields <"$stat" 2>/dev/null || continue
    [[ "${fields[3]:-}" == "$1" ]] && echo "${fields[0]}"
  done
}
forward() {
  if [[ -n "$runner" ]]; then
    local kid
    for kid in $(children_of "$runner"); do kill -TERM "$kid" 2>/dev/null || true; done
    kill -TERM "$runner" 2>/dev/null || true
    wait "$runner" 2>/dev/null || true
  fi
}
trap 'forward; exit 130' INT
trap 'forward; exit 143' TERM
DELAYQ_POSTGRES_FSYNC="$pg_fsync" bash "$DELAYQ_ROOT/scripts/with-postgres.sh" \
  python3 -B "$DELAYQ_ROOT/bench/peers/pg_peers.py" --server "$build/server/delayq-server" \
  --node-modules "$node_dir/node_modules" --out "$out" --machine "$machine" \
  --command "$command" ${pass[@]+"${pass[@]}"} &
runner=$!
status=0
wait "$runner" || status=$?
runner=""
((status == 0)) || delayq_die "bench/peers/pg_peers.py failed (exit $status)"
draw_plot
echo "results in $out/: pg-peers.json pg-peers.machine.txt pg-peers-tables.md pg-peers.png"

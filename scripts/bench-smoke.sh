#!/usr/bin/env bash
# scripts/bench-smoke.sh [builddir] - runs every benchmark binary once in its
# quick mode (tiny sizes, a few milliseconds per benchmark) to show that it
# still builds, starts and finishes. scripts/test.sh calls it (stage "bench")
# on build/, which it configures with -DDELAYQ_BUILD_BENCH=ON.
#
# delayq-bench-engine is a plain program: its quick mode (every scenario with
# tiny sizes, about 2 s) writes its JSON, TSV and tables to a temp dir.
#
# The PostgreSQL benchmarks (bench/postgres, about 25 s together) need a
# PostgreSQL: $DELAYQ_TEST_POSTGRES, else the script runs itself again under
# scripts/with-postgres.sh.
#
# The end-to-end benchmark (bench/e2e, delayq-bench --quick, about 10 s) needs
# a Redis: the script uses $DELAYQ_TEST_REDIS (scripts/test.sh runs it under
# scripts/with-redis.sh), and without one runs itself again under
# scripts/with-redis.sh, which starts a private redis-server.
#
# delayq-bench-server (bench/server) runs through scripts/bench-server.sh
# --quick (about 15 s): it starts beanstalkd (with and without a binlog), a
# private redis-server and three delayq-servers of <builddir> (SQLite, Redis,
# memory) on free loopback ports, runs every scenario tiny and stops them.
# beanstalkd must be installed (scripts/common.sh lists it).
#
# The peer benchmarks (bench/peers: Python and Node, nothing to build but
# delayq-server) run through scripts/bench-peers.sh --quick (about 35 s),
# and the PostgreSQL ones through scripts/bench-pg-peers.sh --quick (about 25 s,
# PostgreSQL without fsync).
#
# delayq-bench-scaleout (bench/server) runs through scripts/bench-scaleout.sh
# --quick (about 15 s): 1, 2 and 3 delayq-server --cluster instances of
# <builddir> on a private redis-server, tiny sizes, and one failover round.
#
# Fails only when a binary crashes, exits non-zero or hangs (5 minutes). No
# timing is checked: timings on a shared CI machine mean nothing. A benchmark
# that reports an error (Google Benchmark's "ERROR OCCURRED", e.g. a cancel
# that found no task) is printed as a warning. For real figures use
# scripts/bench.sh.
# shellcheck disable=SC2317 # the smoke_* steps are called through lane()
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [[ -z "${DELAYQ_TEST_REDIS:-}" ]]; then
  exec "$DELAYQ_ROOT/scripts/with-redis.sh" bash "${BASH_SOURCE[0]}" "$@"
fi
# The PostgreSQL benchmarks need a server too (scripts/with-postgres.sh).
if [[ -z "${DELAYQ_TEST_POSTGRES:-}" ]]; then
  exec "$DELAYQ_ROOT/scripts/with-postgres.sh" bash "${BASH_SOURCE[0]}" "$@"
fi

dir="${1:-$DELAYQ_ROOT/build}"
[[ "$dir" = /* ]] || dir="$PWD/$dir"
[[ -d "$dir/bench" ]] ||
  delayq_die "no $dir/bench: configure $dir with -DDELAYQ_BUILD_BENCH=ON and build it first"

# The Google Benchmark binaries; delayq-bench-engine and delayq-bench-store
# are plain programs with flags of their own, run further down, and
# delayq-bench-floor is a server that bench-peers.sh --quick runs (smoke_peers).
mapfile -t binaries < <(find "$dir/bench" -type f -name 'delayq-bench-*' -perm -u+x \
  ! -name delayq-bench-engine ! -name delayq-bench-store ! -name delayq-bench-server \
  ! -name delayq-bench-floor ! -name delayq-bench-sqlite-settings \
  ! -name delayq-bench-horizon ! -name delayq-bench-scaleout ! -name delayq-bench-schedules \
  ! -name delayq-bench-postgres ! -name delayq-bench-pg-churn | sort)
((${#binaries[@]} > 0)) ||
  delayq_die "no delayq-bench-* binaries under $dir/bench: build $dir first"

work="$(mktemp -d "${TMPDIR:-/tmp}/delayq-bench-smoke.XXXXXX")"
e2e_out="$work/results"
mkdir "$e2e_out"
trap 'rm -rf "$work"' EXIT
# Each lane (see the end) sets its own log; every step writes its program's
# output there and prints one "ok" or "FAIL" line.
log="$work/log"

failed=0
start=$SECONDS
# The programs run, for the count on the last line (the lanes are subshells:
# what they add is lost).
ran=("${binaries[@]}")

# exit_failed NAME RC: for a program's exit status RC (from timeout 300),
# prints its FAIL line and succeeds; for 0 prints nothing and fails.
exit_failed() {
  local name="$1" rc="$2"
  if ((rc == 124)); then
    echo "FAIL $name: still running after 300 s"
  elif ((rc > 128)); then
    echo "FAIL $name: killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
  elif ((rc != 0)); then
    echo "FAIL $name: exit status $rc"
  else
    return 1
  fi
}

smoke_gbench() {
  for bin in "${binaries[@]}"; do
    name="$(basename "$bin")"
    rc=0
    timeout 300 "$bin" --quick --benchmark_counters_tabular=false >"$log" 2>&1 || rc=$?
    if exit_failed "$name" "$rc"; then
      sed 's/^/    /' "$log" | tail -n 40
      failed=1
      continue
    fi
    runs="$(grep -cE '^[a-z_]+/' "$log" || true)"
    errors="$(grep -c 'ERROR OCCURRED' "$log" || true)"
    echo "ok   $name --quick: $runs benchmarks"
    if ((errors > 0)); then
      echo "     warning: $errors benchmarks reported an error:"
      grep 'ERROR OCCURRED' "$log" | sed 's/^/       /'
    fi
  done
}

# A plain program's quick run where only a failure counts: NAME BINARY ARGS...
# (skipped when BINARY was not built).
smoke_plain() {
  local name="$1" bin="$2"
  shift 2
  [[ -n "$bin" && -x "$bin" ]] || return 0
  local rc=0
  timeout 300 "$bin" "$@" >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    echo "FAIL $name $*: exit status $rc"
    sed 's/^/    /' "$log" | tail -n 40
    failed=1
  else
    echo "ok   $name $*"
  fi
}

smoke_stores() {
  # delayq-bench-store: the Redis store alone (bench/store), tiny sizes, against
  # the private Redis.
  smoke_plain delayq-bench-store \
    "$(find "$dir/bench" -type f -name delayq-bench-store -perm -u+x | head -n 1)" \
    --quick --uri="$DELAYQ_TEST_REDIS"

  # delayq-bench-postgres: the PostgreSQL store alone (bench/postgres), 20,000
  # tasks, against the private PostgreSQL; delayq-bench-pg-churn: a 12 s churn
  # with a long transaction open, the generation rotation on.
  smoke_plain delayq-bench-postgres "$dir/bench/postgres/delayq-bench-postgres" --quick \
    --uri="$DELAYQ_TEST_POSTGRES"
}

smoke_engines() {
  smoke_plain delayq-bench-pg-churn "$dir/bench/postgres/delayq-bench-pg-churn" --quick --long-tx \
    --uri="$DELAYQ_TEST_POSTGRES"

  # delayq-bench-horizon: --quick stores 20,000 tasks on a fresh prefix of the
  # private Redis and runs an engine with a 1 s horizon until 50 tasks the
  # pager read in have run.
  smoke_plain delayq-bench-horizon "$dir/bench/horizon/delayq-bench-horizon" --quick

  # delayq-bench-sqlite-settings: --quick makes 200 commits a setting and a
  # table of 2,000 tasks a page size, in a temporary directory.
  smoke_plain delayq-bench-sqlite-settings "$dir/bench/floor/delayq-bench-sqlite-settings" --quick

  # delayq-bench-schedules: --quick loads 2,000 schedules from SQLite and from
  # the private Redis, and runs 50 every-second schedules for 2 s.
  smoke_plain delayq-bench-schedules "$dir/bench/schedules/delayq-bench-schedules" --quick \
    --uri="$DELAYQ_TEST_REDIS"

  # delayq-bench-engine: a plain program (not Google Benchmark), every scenario
  # with tiny sizes (--quick), in child processes of its own. Only a crash, a
  # non-zero exit, a hang or invalid JSON fails; its target check is printed,
  # never enforced.
  engine_bin="$dir/bench/engine/delayq-bench-engine"
  if [[ ! -x "$engine_bin" ]]; then
    echo "FAIL delayq-bench-engine: $engine_bin was not built"
    failed=1
  else
    rc=0
    timeout 300 "$engine_bin" --quick --out "$e2e_out/engine.json" --tsv "$e2e_out/engine.tsv" \
      --tables "$e2e_out/engine.md" >"$log" 2>&1 || rc=$?
    if exit_failed delayq-bench-engine "$rc"; then
      :
    elif command -v python3 >/dev/null && ! python3 -m json.tool "$e2e_out/engine.json" >/dev/null; then
      echo "FAIL delayq-bench-engine: $e2e_out/engine.json is not valid JSON"
      rc=1
    else
      echo "ok   delayq-bench-engine --quick: $(($(wc -l <"$e2e_out/engine.tsv") - 1)) figures"
    fi
    if ((rc != 0)); then
      sed 's/^/    /' "$log" | tail -n 40
      failed=1
    fi
  fi

  # delayq-bench is a plain program (not Google Benchmark): every scenario with
  # tiny sizes against the Redis of $DELAYQ_TEST_REDIS, writing its JSON, tables
  # and plot inputs to a temp dir. Only a crash, a non-zero exit or a hang fails.
  e2e="$dir/bench/e2e/delayq-bench"
  if [[ ! -x "$e2e" ]]; then
    echo "FAIL delayq-bench: $e2e was not built"
    failed=1
  else
    rc=0
    timeout 300 "$e2e" --quick --out "$e2e_out/e2e.json" --tables "$e2e_out/e2e.md" \
      --plot-data "$e2e_out/plot-data" >"$log" 2>&1 || rc=$?
    if exit_failed delayq-bench "$rc"; then
      :
    elif command -v python3 >/dev/null && ! python3 -m json.tool "$e2e_out/e2e.json" >/dev/null; then
      echo "FAIL delayq-bench: $e2e_out/e2e.json is not valid JSON"
      rc=1
    else
      echo "ok   delayq-bench --quick: $(grep -c '^| [a-z]' "$e2e_out/e2e.md" || true) table rows"
    fi
    if ((rc != 0)); then
      sed 's/^/    /' "$log" | tail -n 40
      failed=1
    fi
  fi
}

# smoke_script SCRIPT NAME SECONDS ROW PROGRAM: scripts/SCRIPT --quick on this
# build, into $e2e_out/NAME. It fails on a non-zero exit, a run past SECONDS
# or an invalid NAME.json, never on a timing; the lines of NAME-tables.md that
# match ROW are counted as PROGRAM's table rows.
smoke_script() {
  local script="$1" name="$2" seconds="$3" row="$4" program="$5"
  local res="$e2e_out/$name" rc=0
  timeout "$seconds" bash "$DELAYQ_ROOT/scripts/$script" --quick --no-build --build "$dir" \
    --out "$res" >"$log" 2>&1 || rc=$?
  if ((rc == 124)); then
    echo "FAIL $script --quick: still running after $seconds s"
  elif ((rc != 0)); then
    echo "FAIL $script --quick: exit status $rc"
  elif command -v python3 >/dev/null && ! python3 -m json.tool "$res/$name.json" >/dev/null; then
    echo "FAIL $script --quick: $res/$name.json is not valid JSON"
    rc=1
  else
    echo "ok   $program ($script --quick): $(grep -c "$row" "$res/$name-tables.md" || true) table rows"
  fi
  if ((rc != 0)); then
    sed 's/^/    /' "$log" | tail -n 40
    failed=1
  fi
}

# delayq-bench-server, through scripts/bench-server.sh --quick on this build:
# beanstalkd and delayq-server side by side, tiny sizes. It fails on any error
# answer (a put refused, a job never delivered), a server that died, or
# invalid JSON; never on a timing. Then the same client in beanstalkd's
# protocol to both (scripts/bench-beanstalk.sh --quick: delayq-server's
# --beanstalk-listen), same checks. About 15 s each.
smoke_servers() {
  server_bench="$dir/bench/server/delayq-bench-server"
  if [[ ! -x "$server_bench" ]]; then
    echo "FAIL delayq-bench-server: $server_bench was not built"
    failed=1
  else
    smoke_script bench-server.sh server 180 '^| [a-z]' delayq-bench-server
    smoke_script bench-beanstalk.sh beanstalk 180 '^| [a-z]' delayq-bench-server
  fi
}
smoke_peers() {
  # The peer benchmarks (issue 32), through scripts/bench-peers.sh --quick on
  # this build: beanstalkd (three ways), redis-server, BullMQ from npm
  # (installed into <builddir>/bench/peers/node as its lock file pins it) and
  # delayq-server of <builddir> on four stores, tiny sizes, one round. It
  # fails on a wrong reply, a server that died, or invalid JSON; never on a
  # timing, a ratio or the ordering and timing checks' counts.
  smoke_script bench-peers.sh peers 180 '^| [a-zA-Z]' bench/peers
  # The PostgreSQL peers (issue 34), through scripts/bench-pg-peers.sh --quick
  # (about 75 s): a private PostgreSQL (scripts/with-postgres.sh), pg-boss and
  # graphile-worker from the same npm install, delayq-server of <builddir> on
  # postgres://. Same rules: never fails on a timing.
  smoke_script bench-pg-peers.sh pg-peers 240 '^| [a-zA-Z]' bench/peers/pg_peers.js
}

smoke_scaleout() {
  # delayq-bench-scaleout, through scripts/bench-scaleout.sh --quick on this
  # build (about 15 s): 1, 2 and 3 delayq-server --cluster instances on a
  # private redis-server, and one failover round. It fails when a batch is
  # refused, a task is never delivered, no shard of the killed instance is
  # taken over, a server died, or the JSON is invalid; never on a timing.
  scaleout_bench="$dir/bench/server/delayq-bench-scaleout"
  if [[ ! -x "$scaleout_bench" ]]; then
    echo "FAIL delayq-bench-scaleout: $scaleout_bench was not built"
    failed=1
  else
    smoke_script bench-scaleout.sh scaleout 120 '^| [0-9]' delayq-bench-scaleout
  fi
}
ran+=("$dir/bench/engine/delayq-bench-engine" "$dir/bench/e2e/delayq-bench"
  "$dir/bench/server/delayq-bench-server" "$dir/bench/server/delayq-bench-scaleout")

# Two lanes at once: most steps wait (on a server, a churn, a round trip)
# rather than compute, and one after the other they took 124 s, where two
# lanes take about 70 s (docs/testing.md, "What a cold run costs"). Nothing
# here is timed, so sharing the machine changes only how long the run takes.
# The lanes share no server: each script starts its own on free ports, the
# programs use prefixes of their own in the shared Redis and PostgreSQL, and
# the two npm steps (peers, pg-peers), which share one node_modules, are in
# one lane. Each lane's lines are printed once it is done.
# lane NAME STEP... : runs the steps in a subshell with a log of its own;
# exits 1 when one failed.
lane() {
  local name="$1"
  shift
  (
    log="$work/$name.log"
    for step in "$@"; do "$step"; done
    exit "$failed"
  ) >"$work/$name.out" 2>&1
}
lane a smoke_engines smoke_servers &
lane_pids=($!)
lane b smoke_gbench smoke_stores smoke_peers smoke_scaleout &
lane_pids+=($!)
for pid in "${lane_pids[@]}"; do
  rc=0
  wait "$pid" || rc=$?
  ((rc == 0)) || failed=1
done
cat "$work/a.out" "$work/b.out"
echo "bench smoke: ${#ran[@]} binaries in $((SECONDS - start)) s"
exit "$failed"

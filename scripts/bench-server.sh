#!/usr/bin/env bash
# scripts/bench-server.sh - delayq-server against beanstalkd, side by side
# (docs/benchmarks.md, "delayq-server against beanstalkd"; issue 12).
#
#   bash scripts/bench-server.sh [--quick] [--build DIR] [--no-build] [--out DIR]
#                                [--baseline BIN] [--only-report]
#                                [-- DELAYQ-BENCH-SERVER ARGS...]
#
# Installs what scripts/common.sh lists (beanstalkd, redis-server, gnuplot-nox
# among them), builds build/ (DELAYQ_MAIN_BUILD_ARGS, the configure of
# scripts/test.sh), then starts on free loopback ports, each with a temp dir:
#   beanstalkd-fsync   beanstalkd -b DIR -f 0 (binlog, fsync after every write)
#   beanstalkd-mem     beanstalkd without -b (nothing on disk)
#   delayq-sqlite      delayq-server --store sqlite:DIR/x.db (synchronous=full)
#   delayq-redis       delayq-server --store redis://... on a private
#                      redis-server with appendonly yes, appendfsync always
#                      (scripts/with-redis.sh)
#   delayq-memory      delayq-server --store memory:
# (delayq-server with its default --tick 1), runs build/bench/server/delayq-bench-server
# against all five in one run (rounds alternate between them) and stops them
# all afterwards. Pairs of equal durability: delayq-sqlite and delayq-redis
# against beanstalkd-fsync, delayq-memory against beanstalkd-mem.
# Writes to bench/results/ (about 3 minutes; run it on a quiet machine):
#   server.json              every round of every figure, the config, verdicts
#   server.machine.txt       CPU, cores, compiler, flags, load, commit, versions, command
#   server-tables.md         the table and the verdicts (also printed)
#   server-throughput.png    put and cycle throughput per system (log scale)
#   server-plot-data.tsv     the plot's input
#
#   --quick        tiny sizes (~15 s), into bench/results/quick/: checks the pipeline;
#                  scripts/bench-smoke.sh runs it in CI
#   --build DIR    the build directory (default build/)
#   --no-build     use DIR as it is: no package install, no configure, no build
#   --out DIR      where the results go (default bench/results, or .../quick)
#   --baseline BIN another delayq-server binary (an earlier commit's), run in
#                  the same rounds as base-redis (its own key prefix on the
#                  same Redis) and base-memory, with a verdict of
#                  delayq-redis and delayq-memory against each: a change's
#                  cost, measured side by side
#   --only-report  no run: redraw the plot from <out>/server-plot-data.tsv
#   -- ARGS        passed to delayq-bench-server (e.g. -- --rounds 5 --seconds 3)
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

quick=0
build_it=1
report_only=0
build=build
out=""
baseline=""
extra=()
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --build) build="${2:?--build needs a directory}"; shift ;;
    --no-build) build_it=0 ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --baseline) baseline="${2:?--baseline needs a delayq-server binary}"; shift ;;
    --only-report) report_only=1 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,42p' "$0"; exit 0 ;;
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
plot_data="$out/server-plot-data.tsv"

draw_plot() {
  [[ -s "$plot_data" ]] || delayq_die "no $plot_data: run without --only-report first"
  gnuplot -e "datafile='$plot_data'; outfile='$out/server-throughput.png'" \
    "$DELAYQ_ROOT/bench/report/server-plots.gp"
}
if ((report_only)); then
  draw_plot
  echo "plot: $out/server-throughput.png"
  exit 0
fi

# The run itself happens in a second invocation of this script under
# scripts/with-redis.sh, which owns the private redis-server
# ($DELAYQ_BENCH_SERVER_INNER marks it).
if [[ -z "${DELAYQ_BENCH_SERVER_INNER:-}" ]]; then
  if ((build_it)); then
    ensure_packages "${DELAYQ_TEST_DEPS[@]}"
    configure_and_build "$build" "${DELAYQ_MAIN_BUILD_ARGS[@]}"
  fi
  delayq_need_tools beanstalkd redis-server redis-cli gnuplot python3
  delayq_need_built "$build" "$build/server/delayq-server" "$build/bench/server/delayq-bench-server"
  DELAYQ_BENCH_SERVER_INNER=1 exec "$DELAYQ_ROOT/scripts/with-redis.sh" \
    bash "${BASH_SOURCE[0]}" --no-build --build "$build" --out "$out" "${mode[@]}" \
    ${baseline:+--baseline "$baseline"} -- ${extra[@]+"${extra[@]}"}
fi

[[ -n "${DELAYQ_TEST_REDIS_PORT:-}" ]] || delayq_die "internal: no DELAYQ_TEST_REDIS_PORT from with-redis.sh"
server_bin="$build/server/delayq-server"
client_bin="$build/bench/server/delayq-bench-server"

work="$(mktemp -d "${TMPDIR:-/tmp}/delayq-bench-server.XXXXXX")"
pids=()
names=()
stop_all() {
  local i pid n
  for i in "${!pids[@]}"; do
    kill -TERM "${pids[$i]}" 2>/dev/null || true
  done
  # delayq-server drains on SIGTERM; give everyone 5 s, then SIGKILL.
  for ((n = 0; n < 50; n++)); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "bench-server: ${names[$i]} (pid ${pids[$i]}) still running after SIGTERM: SIGKILL" >&2
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_beanstalkd NAME [ARGS...]: beanstalkd on a free port; sets $port and
# $server_pid.
# beanstalkd says nothing when it is ready: wait until the port accepts a
# connection (or the process died: lost the port race, try another port).
start_beanstalkd() {
  local name="$1" attempt pid i
  shift
  for attempt in 1 2 3 4 5; do
    port="$(delayq_free_port)"
    beanstalkd -l 127.0.0.1 -p "$port" "$@" >"$work/$name.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 100; i++)); do  # up to 5 s
      kill -0 "$pid" 2>/dev/null || break
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && kill -0 "$pid" 2>/dev/null; then
        server_pid=$pid
        pids+=("$pid")
        names+=("$name")
        echo "bench-server: $name: beanstalkd${*:+ $*} on 127.0.0.1:$port (pid $pid)" >&2
        return 0
      fi
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "bench-server: $name did not start on port $port (attempt $attempt):" >&2
    tail -n 5 "$work/$name.log" >&2 || true
  done
  delayq_die "could not start beanstalkd for $name"
}

# start_delayq NAME STORE [BIN]: delayq-server (or BIN) on port 0; sets $server_pid, and $port
# from the line it prints once it listens, read from a fifo (no polling). The
# rest of its standard output is drained into a log by a cat of our own.
start_delayq() {
  local name="$1" store="$2" bin="${3:-$server_bin}" fd line pid
  local fifo="$work/$name.fifo"
  mkfifo "$fifo"
  "$bin" --listen 127.0.0.1:0 --store "$store" >"$fifo" 2>"$work/$name.err" &
  pid=$!
  server_pid=$pid
  pids+=("$pid")
  names+=("$name")
  exec {fd}<"$fifo"
  if ! IFS= read -r -t 30 -u "$fd" line; then
    exec {fd}<&-
    echo "bench-server: $name: delayq-server --store $store printed no 'listening' line within 30 s; its stderr:" >&2
    tail -n 20 "$work/$name.err" >&2 || true
    delayq_die "could not start delayq-server for $name"
  fi
  cat <&"$fd" >>"$work/$name.out" &
  pids+=("$!")
  names+=("$name (stdout drain)")
  exec {fd}<&-
  [[ "$line" =~ ^delayq-server\ listening\ on\ 127\.0\.0\.1:([0-9]+) ]] ||
    delayq_die "$name: unexpected first line from delayq-server: '$line'"
  port="${BASH_REMATCH[1]}"
  echo "bench-server: $name: delayq-server --store $store on 127.0.0.1:$port (pid $pid)" >&2
}

mkdir -p "$work/binlog" "$work/sqlite"
# The table's columns, in this order; --pid lets the client report each
# server's CPU per run.
targets=()
start_beanstalkd beanstalkd-fsync -b "$work/binlog" -f 0
targets+=(--target "beanstalkd-fsync=beanstalk://127.0.0.1:$port" --pid "beanstalkd-fsync=$server_pid")
start_delayq delayq-sqlite "sqlite:$work/sqlite/x.db"
targets+=(--target "delayq-sqlite=http://127.0.0.1:$port" --pid "delayq-sqlite=$server_pid")
start_delayq delayq-redis "redis://127.0.0.1:$DELAYQ_TEST_REDIS_PORT"
targets+=(--target "delayq-redis=http://127.0.0.1:$port" --pid "delayq-redis=$server_pid")
start_beanstalkd beanstalkd-mem
targets+=(--target "beanstalkd-mem=beanstalk://127.0.0.1:$port" --pid "beanstalkd-mem=$server_pid")
start_delayq delayq-memory "memory:"
targets+=(--target "delayq-memory=http://127.0.0.1:$port" --pid "delayq-memory=$server_pid")

pairs=(--pair delayq-sqlite=beanstalkd-fsync --pair delayq-redis=beanstalkd-fsync
  --pair delayq-memory=beanstalkd-mem)
if [[ -n "$baseline" ]]; then
  [[ -x "$baseline" ]] || delayq_die "--baseline $baseline: not an executable"
  start_delayq base-redis "redis://127.0.0.1:$DELAYQ_TEST_REDIS_PORT?prefix=base" "$baseline"
  targets+=(--target "base-redis=http://127.0.0.1:$port" --pid "base-redis=$server_pid")
  start_delayq base-memory "memory:" "$baseline"
  targets+=(--target "base-memory=http://127.0.0.1:$port" --pid "base-memory=$server_pid")
  pairs+=(--pair delayq-redis=base-redis --pair delayq-memory=base-memory)
fi

cmd=("$client_bin" "${mode[@]}" "${targets[@]}" "${pairs[@]}"
  --out "$out/server.json" --tables "$out/server-tables.md" --plot-data "$plot_data"
  ${extra[@]+"${extra[@]}"})
{
  delayq_machine "$build"
  echo "beanstalkd: $(beanstalkd -v 2>&1 | head -n 1); fsync: -b DIR -f 0, memory: no -b"
  echo "redis:      $(redis-server --version | head -n 1); appendonly yes, appendfsync always"
  echo "delayq:     delayq-server (defaults: --tick 1 --workers 2 --io-threads 2); sqlite:FILE (synchronous=full), redis://, memory:"
  build_arg=""
  [[ "$build" != "$DELAYQ_ROOT/build" ]] && build_arg=" --build ${build#"$DELAYQ_ROOT/"}"
  [[ -n "$baseline" ]] && echo "baseline:   $baseline ($("$baseline" --version 2>/dev/null | head -n 1 || echo '?'))"
  echo "command:    bash scripts/bench-server.sh${build_arg}${mode[*]:+ ${mode[*]}}${baseline:+ --baseline $baseline}${extra[*]:+ -- ${extra[*]}}"
  echo "client:     ${cmd[*]#"$DELAYQ_ROOT/"}"
} >"$out/server.machine.txt"
echo
cat "$out/server.machine.txt"
echo

status=0
"${cmd[@]}" || status=$?
echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end" >>"$out/server.machine.txt"
for i in "${!pids[@]}"; do
  if ! kill -0 "${pids[$i]}" 2>/dev/null; then
    echo "bench-server: ${names[$i]} is no longer running; its log:" >&2
    tail -n 20 "$work/${names[$i]%% *}".{log,err} >&2 2>/dev/null || true
    status=1
  fi
done
if ((status != 0)); then
  echo "bench-server: delayq-bench-server failed (exit $status); logs of delayq-server:" >&2
  for n in delayq-sqlite delayq-redis delayq-memory; do
    [[ -s "$work/$n.err" ]] && { echo "--- $n" >&2; tail -n 20 "$work/$n.err" >&2; }
  done
  exit "$status"
fi
draw_plot
echo
echo "results in $out/: server.json server.machine.txt server-tables.md server-throughput.png"

#!/usr/bin/env bash
# scripts/bench-server.sh - delayq-server against beanstalkd, side by side
# (docs/benchmarks.md, "delayq-server against beanstalkd"; issue 12).
#
#   bash scripts/bench-server.sh [--quick] [--build DIR] [--no-build] [--out DIR]
#                                [--baseline BIN] [--only-report] [--beanstalk]
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
#   --beanstalk    every target in beanstalkd's protocol (delayq-server through
#                  --beanstalk-listen), into <out>/beanstalk*: what
#                  scripts/bench-beanstalk.sh runs; its --help tells the rest
#                  (--beanstalkd-only there, no --baseline)
#   -- ARGS        passed to delayq-bench-server (e.g. -- --rounds 5 --seconds 3)
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

# --beanstalk decides which flags there are and whose header --help prints:
# look for it first. $bench names the script, its messages and its files.
beanstalk=0
for arg in "$@"; do
  [[ "$arg" == -- ]] && break
  [[ "$arg" == --beanstalk ]] && beanstalk=1
done
bench=server
if ((beanstalk)); then bench=beanstalk; fi
unknown_arg() { delayq_die "unknown argument '$1' (see --help)"; }

quick=0
build_it=1
report_only=0
bs_only=0
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
    --baseline)
      ((!beanstalk)) || unknown_arg "$1"
      baseline="${2:?--baseline needs a delayq-server binary}"; shift ;;
    --beanstalkd-only) ((beanstalk)) || unknown_arg "$1"; bs_only=1 ;;
    --beanstalk) ;;
    --only-report) report_only=1 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo pipefail$/p' "$DELAYQ_ROOT/scripts/bench-$bench.sh"; exit 0 ;;
    *) unknown_arg "$1" ;;
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
plot_data="$out/$bench-plot-data.tsv"

draw_plot() {
  [[ -s "$plot_data" ]] || delayq_die "no $plot_data: run without --only-report first"
  # server-plots.gp draws any "measurement, then a column per system" table.
  gnuplot -e "datafile='$plot_data'; outfile='$out/$bench-throughput.png'" \
    "$DELAYQ_ROOT/bench/report/server-plots.gp"
}
if ((report_only)); then
  draw_plot
  echo "plot: $out/$bench-throughput.png"
  exit 0
fi

# The run itself happens in a second invocation of this script under
# scripts/with-redis.sh, which owns the private redis-server
# ($DELAYQ_BENCH_SERVER_INNER marks it).
if [[ -z "${DELAYQ_BENCH_SERVER_INNER:-}" ]]; then
  tools=(beanstalkd redis-server redis-cli gnuplot)
  bins=("$build/server/delayq-server" "$build/bench/server/delayq-bench-server")
  inner=(--no-build --build "$build" --out "$out" "${mode[@]}")
  build_targets=()
  if ((beanstalk)); then
    # Only the two programs it runs are built.
    build_targets=(--target delayq-server --target delayq-bench-server)
    inner+=(--beanstalk)
    if ((bs_only)); then
      bins=("${bins[@]:1}")
      inner+=(--beanstalkd-only)
    fi
  else
    tools+=(python3)
    if [[ -n "$baseline" ]]; then inner+=(--baseline "$baseline"); fi
  fi
  if ((build_it)); then
    ensure_packages "${DELAYQ_TEST_DEPS[@]}"
    configure_and_build "$build" ${build_targets[@]+"${build_targets[@]}"} "${DELAYQ_MAIN_BUILD_ARGS[@]}"
  fi
  delayq_need_tools "${tools[@]}"
  delayq_need_built "$build" "${bins[@]}"
  DELAYQ_BENCH_SERVER_INNER=1 exec "$DELAYQ_ROOT/scripts/with-redis.sh" \
    bash "${BASH_SOURCE[0]}" "${inner[@]}" -- ${extra[@]+"${extra[@]}"}
fi

[[ -n "${DELAYQ_TEST_REDIS_PORT:-}" ]] || delayq_die "internal: no DELAYQ_TEST_REDIS_PORT from with-redis.sh"
server_bin="$build/server/delayq-server"
client_bin="$build/bench/server/delayq-bench-server"

# Before issue 26's listener, delayq-server has no --beanstalk-listen: say so
# and measure beanstalkd alone, so the harness can be checked all the same.
note=""
if ((beanstalk && !bs_only)) && ! "$server_bin" --help 2>/dev/null | grep -q -- '--beanstalk-listen'; then
  note="$server_bin has no --beanstalk-listen yet: beanstalkd alone, no pairs"
  echo "bench-beanstalk: NOTE: $note" >&2
  bs_only=1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/delayq-bench-$bench.XXXXXX")"
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
      echo "bench-$bench: ${names[$i]} (pid ${pids[$i]}) still running after SIGTERM: SIGKILL" >&2
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The table's columns, in the order they start in; --pid lets the client
# report each server's CPU per run.
targets=()
# add_target NAME SCHEME: the server started last, as a column.
add_target() {
  targets+=(--target "$1=$2://127.0.0.1:$port" --pid "$1=$server_pid")
}
# started NAME WHAT: says that the server started last runs.
started() { echo "bench-$bench: $1: $2 (pid $server_pid)" >&2; }

# start_server NAME CMD... : CMD (with @PORT@ in its arguments) on a free
# port; sets $port, $server_pid and $server_cmd (CMD as run). Neither
# beanstalkd nor the beanstalk listener says when it is ready: wait until the
# port accepts a connection (at most 30 s). A server that exits first lost
# the race for the port: try another port.
start_server() {
  local name="$1" attempt pid i arg args
  shift
  for attempt in 1 2 3 4 5; do
    port="$(delayq_free_port)"
    args=()
    for arg in "$@"; do args+=("${arg//@PORT@/$port}"); done
    "${args[@]}" >"$work/$name.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do  # up to 30 s
      kill -0 "$pid" 2>/dev/null || break
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && kill -0 "$pid" 2>/dev/null; then
        server_pid=$pid
        server_cmd="${args[*]}"
        pids+=("$pid")
        names+=("$name")
        return 0
      fi
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "bench-$bench: $name did not start on port $port (attempt $attempt):" >&2
    tail -n 5 "$work/$name.log" >&2 || true
    grep -qi 'in use' "$work/$name.log" || break
  done
  delayq_die "could not start $name"
}

# start_beanstalkd NAME [ARGS...]: beanstalkd on a free port, a column.
start_beanstalkd() {
  local name="$1"
  shift
  start_server "$name" beanstalkd -l 127.0.0.1 -p @PORT@ "$@"
  if ((beanstalk)); then
    started "$name" "$server_cmd"
  else
    started "$name" "beanstalkd${*:+ $*} on 127.0.0.1:$port"
  fi
  add_target "$name" beanstalk
}

# start_delayq NAME STORE [BIN]: delayq-server (or BIN) with --store STORE, a
# column: spoken to over HTTP, or with --beanstalk through its beanstalk
# listener on a free port.
start_delayq() {
  local name="$1" store="$2" bin="${3:-$server_bin}"
  if ((beanstalk)); then
    start_server "$name" "$bin" --listen 127.0.0.1:0 --beanstalk-listen "127.0.0.1:@PORT@" --store "$store"
    started "$name" "$server_cmd"
    add_target "$name" beanstalk
  else
    start_delayq_http "$name" "$store" "$bin"
    started "$name" "delayq-server --store $store on 127.0.0.1:$port"
    add_target "$name" http
  fi
}

# start_delayq_http NAME STORE BIN: BIN on port 0; sets $server_pid, and $port
# from the line it prints once it listens, read from a fifo (no polling). The
# rest of its standard output is drained into a log by a cat of our own.
start_delayq_http() {
  local name="$1" store="$2" bin="$3" fd line pid
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
}

# logs_of NAME: the last lines of what NAME wrote (.log: beanstalkd's output,
# and delayq-server's under --beanstalk; .err: its stderr over HTTP).
logs_of() {
  local f
  for f in "$work/$1.log" "$work/$1.err"; do
    if [[ -s "$f" ]]; then tail -n 20 "$f" >&2 || true; fi
  done
}

mkdir -p "$work/binlog" "$work/sqlite"
pairs=()
start_beanstalkd beanstalkd-fsync -b "$work/binlog" -f 0
if ((!bs_only)); then
  start_delayq delayq-sqlite "sqlite:$work/sqlite/x.db"
  start_delayq delayq-redis "redis://127.0.0.1:$DELAYQ_TEST_REDIS_PORT"
fi
start_beanstalkd beanstalkd-mem
if ((!bs_only)); then
  start_delayq delayq-memory "memory:"
  pairs=(--pair delayq-sqlite=beanstalkd-fsync --pair delayq-redis=beanstalkd-fsync
    --pair delayq-memory=beanstalkd-mem)
fi
if [[ -n "$baseline" ]]; then
  [[ -x "$baseline" ]] || delayq_die "--baseline $baseline: not an executable"
  start_delayq base-redis "redis://127.0.0.1:$DELAYQ_TEST_REDIS_PORT?prefix=base" "$baseline"
  start_delayq base-memory "memory:" "$baseline"
  pairs+=(--pair delayq-redis=base-redis --pair delayq-memory=base-memory)
fi

cmd=("$client_bin" "${mode[@]}" "${targets[@]}" ${pairs[@]+"${pairs[@]}"}
  --out "$out/$bench.json" --tables "$out/$bench-tables.md" --plot-data "$plot_data"
  ${extra[@]+"${extra[@]}"})
flags="${mode[*]:+ ${mode[*]}}${baseline:+ --baseline $baseline}"
((bs_only)) && [[ -z "$note" ]] && flags+=" --beanstalkd-only"
{
  delayq_machine "$build"
  if ((beanstalk)); then
    echo "protocol:   beanstalkd's text protocol to every target (delayq-server: --beanstalk-listen)"
  fi
  echo "beanstalkd: $(beanstalkd -v 2>&1 | head -n 1); fsync: -b DIR -f 0, memory: no -b"
  echo "redis:      $(redis-server --version | head -n 1); appendonly yes, appendfsync always"
  if ((bs_only)); then
    echo "delayq:     not measured (${note:-run with --beanstalkd-only})"
  else
    echo "delayq:     delayq-server (defaults: --tick 1 --workers 2 --io-threads auto: 1 on memory:, 2 otherwise); sqlite:FILE (synchronous=full), redis://, memory:"
  fi
  build_arg=""
  [[ "$build" != "$DELAYQ_ROOT/build" ]] && build_arg=" --build ${build#"$DELAYQ_ROOT/"}"
  [[ -n "$baseline" ]] && echo "baseline:   $baseline ($("$baseline" --version 2>/dev/null | head -n 1 || echo '?'))"
  echo "command:    bash scripts/bench-$bench.sh${build_arg}${flags}${extra[*]:+ -- ${extra[*]}}"
  echo "client:     ${cmd[*]#"$DELAYQ_ROOT/"}"
} >"$out/$bench.machine.txt"
echo
cat "$out/$bench.machine.txt"
echo

status=0
"${cmd[@]}" || status=$?
echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end" >>"$out/$bench.machine.txt"
for i in "${!pids[@]}"; do
  if ! kill -0 "${pids[$i]}" 2>/dev/null; then
    echo "bench-$bench: ${names[$i]} is no longer running; its log:" >&2
    logs_of "${names[$i]%% *}"
    status=1
  fi
done
if ((status != 0)); then
  echo "bench-$bench: delayq-bench-server failed (exit $status); the servers' logs:" >&2
  for n in "${names[@]}"; do
    [[ "$n" != *' '* && (-s "$work/$n.log" || -s "$work/$n.err") ]] || continue
    echo "--- $n" >&2
    logs_of "$n"
  done
  exit "$status"
fi
draw_plot
echo
echo "results in $out/: $bench.json $bench.machine.txt $bench-tables.md $bench-throughput.png"

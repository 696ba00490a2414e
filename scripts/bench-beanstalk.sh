#!/usr/bin/env bash
# scripts/bench-beanstalk.sh - delayq-server's beanstalk listener against
# beanstalkd 1.12, one protocol, one client, one run (issue 26, "Measured
# against beanstalkd").
#
#   bash scripts/bench-beanstalk.sh [--quick] [--build DIR] [--no-build] [--out DIR]
#                                   [--beanstalkd-only] [--only-report]
#                                   [-- DELAYQ-BENCH-SERVER ARGS...]
#
# The same load client as scripts/bench-server.sh (bench/server,
# delayq-bench-server), but every target is spoken to in beanstalkd's text
# protocol: delayq-server through --beanstalk-listen, not HTTP. Installs what
# scripts/common.sh lists, builds delayq-server and delayq-bench-server in
# build/ (DELAYQ_MAIN_BUILD_ARGS), then starts on free loopback ports, each
# with a temp dir:
#   beanstalkd-fsync   beanstalkd -b DIR -f 0 (binlog, fsync after every write)
#   delayq-sqlite      delayq-server --store sqlite:DIR/x.db (synchronous=full)
#   delayq-redis       delayq-server --store redis://... on a private
#                      redis-server with appendonly yes, appendfsync always
#                      (scripts/with-redis.sh)
#   beanstalkd-mem     beanstalkd without -b (nothing on disk)
#   delayq-memory      delayq-server --store memory:
# (delayq-server with its defaults: --tick 1 --workers 2 --io-threads 2, and
# --beanstalk-listen 127.0.0.1:PORT), runs delayq-bench-server against all
# five in one run (rounds alternate between them) and stops them. It measures
# puts/s and put+reserve+delete cycles/s with 1 and 32 connections, and the
# lateness of jobs due 1 s after their put. Pairs of equal durability:
# delayq-sqlite and delayq-redis against beanstalkd-fsync, delayq-memory
# against beanstalkd-mem. Writes to bench/results/ (about 3 minutes; run it on
# a quiet machine):
#   beanstalk.json             every round of every figure, the config, verdicts
#   beanstalk.machine.txt      CPU, cores, compiler, flags, load, commit, versions, command
#   beanstalk-tables.md        the tables and the verdicts (also printed)
#   beanstalk-throughput.png   put and cycle throughput per system (log scale)
#   beanstalk-plot-data.tsv    the plot's input
#
#   --quick            tiny sizes (~15 s), into bench/results/quick/: checks the pipeline
#   --build DIR        the build directory (default build/)
#   --no-build         use DIR as it is: no package install, no configure, no build
#   --out DIR          where the results go (default bench/results, or .../quick)
#   --beanstalkd-only  the two beanstalkd targets alone, no pairs. Also what
#                      happens, with a note, when delayq-server has no
#                      --beanstalk-listen (before issue 26's listener)
#   --only-report      no run: redraw the plot from <out>/beanstalk-plot-data.tsv
#   -- ARGS            passed to delayq-bench-server (e.g. -- --rounds 5 --seconds 3)
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

quick=0
build_it=1
report_only=0
bs_only=0
build=build
out=""
extra=()
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --build) build="${2:?--build needs a directory}"; shift ;;
    --no-build) build_it=0 ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --beanstalkd-only) bs_only=1 ;;
    --only-report) report_only=1 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,46p' "$0"; exit 0 ;;
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
plot_data="$out/beanstalk-plot-data.tsv"

draw_plot() {
  [[ -s "$plot_data" ]] || delayq_die "no $plot_data: run without --only-report first"
  # server-plots.gp draws any "measurement, then a column per system" table.
  gnuplot -e "datafile='$plot_data'; outfile='$out/beanstalk-throughput.png'" \
    "$DELAYQ_ROOT/bench/report/server-plots.gp"
}
if ((report_only)); then
  draw_plot
  echo "plot: $out/beanstalk-throughput.png"
  exit 0
fi

# The run itself happens in a second invocation of this script under
# scripts/with-redis.sh, which owns the private redis-server
# ($DELAYQ_BENCH_BEANSTALK_INNER marks it).
if [[ -z "${DELAYQ_BENCH_BEANSTALK_INNER:-}" ]]; then
  if ((build_it)); then
    ensure_packages "${DELAYQ_TEST_DEPS[@]}"
    configure_and_build "$build" --target delayq-server --target delayq-bench-server \
      "${DELAYQ_MAIN_BUILD_ARGS[@]}"
  fi
  delayq_need_tools beanstalkd redis-server redis-cli gnuplot
  delayq_need_built "$build" "$build/bench/server/delayq-bench-server"
  ((bs_only)) || delayq_need_built "$build" "$build/server/delayq-server"
  inner=(--no-build --build "$build" --out "$out" "${mode[@]}")
  ((bs_only)) && inner+=(--beanstalkd-only)
  DELAYQ_BENCH_BEANSTALK_INNER=1 exec "$DELAYQ_ROOT/scripts/with-redis.sh" \
    bash "${BASH_SOURCE[0]}" "${inner[@]}" -- ${extra[@]+"${extra[@]}"}
fi

[[ -n "${DELAYQ_TEST_REDIS_PORT:-}" ]] || delayq_die "internal: no DELAYQ_TEST_REDIS_PORT from with-redis.sh"
server_bin="$build/server/delayq-server"
client_bin="$build/bench/server/delayq-bench-server"

# Before issue 26's listener, delayq-server has no --beanstalk-listen: say so
# and measure beanstalkd alone, so the harness can be checked all the same.
note=""
if ((!bs_only)) && ! "$server_bin" --help 2>/dev/null | grep -q -- '--beanstalk-listen'; then
  note="$server_bin has no --beanstalk-listen yet: beanstalkd alone, no pairs"
  echo "bench-beanstalk: NOTE: $note" >&2
  bs_only=1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/delayq-bench-beanstalk.XXXXXX")"
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
      echo "bench-beanstalk: ${names[$i]} (pid ${pids[$i]}) still running after SIGTERM: SIGKILL" >&2
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server NAME CMD... : CMD (with @PORT@ in its arguments) on a free
# port; sets $port and $server_pid. Neither beanstalkd nor the beanstalk
# listener says when it is ready: wait until the port accepts a connection
# (at most 30 s). A server that exits first lost the race for the port: try
# another port.
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
        pids+=("$pid")
        names+=("$name")
        echo "bench-beanstalk: $name: ${args[*]} (pid $pid)" >&2
        return 0
      fi
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "bench-beanstalk: $name did not start on port $port (attempt $attempt):" >&2
    tail -n 5 "$work/$name.log" >&2 || true
    grep -qi 'in use' "$work/$name.log" || break
  done
  delayq_die "could not start $name"
}

mkdir -p "$work/binlog" "$work/sqlite"
delayq=("$server_bin" --listen 127.0.0.1:0 --beanstalk-listen "127.0.0.1:@PORT@")
# The table's columns, in this order; --pid lets the client report each
# server's CPU per run.
targets=()
add_target() { targets+=(--target "$1=beanstalk://127.0.0.1:$port" --pid "$1=$server_pid"); }
start_server beanstalkd-fsync beanstalkd -l 127.0.0.1 -p @PORT@ -b "$work/binlog" -f 0
add_target beanstalkd-fsync
if ((!bs_only)); then
  start_server delayq-sqlite "${delayq[@]}" --store "sqlite:$work/sqlite/x.db"
  add_target delayq-sqlite
  start_server delayq-redis "${delayq[@]}" --store "redis://127.0.0.1:$DELAYQ_TEST_REDIS_PORT"
  add_target delayq-redis
fi
start_server beanstalkd-mem beanstalkd -l 127.0.0.1 -p @PORT@
add_target beanstalkd-mem
pairs=()
if ((!bs_only)); then
  start_server delayq-memory "${delayq[@]}" --store memory:
  add_target delayq-memory
  pairs=(--pair delayq-sqlite=beanstalkd-fsync --pair delayq-redis=beanstalkd-fsync
    --pair delayq-memory=beanstalkd-mem)
fi

cmd=("$client_bin" "${mode[@]}" "${targets[@]}" ${pairs[@]+"${pairs[@]}"}
  --out "$out/beanstalk.json" --tables "$out/beanstalk-tables.md" --plot-data "$plot_data"
  ${extra[@]+"${extra[@]}"})
{
  delayq_machine "$build"
  echo "protocol:   beanstalkd's text protocol to every target (delayq-server: --beanstalk-listen)"
  echo "beanstalkd: $(beanstalkd -v 2>&1 | head -n 1); fsync: -b DIR -f 0, memory: no -b"
  echo "redis:      $(redis-server --version | head -n 1); appendonly yes, appendfsync always"
  if ((bs_only)); then
    echo "delayq:     not measured (${note:-run with --beanstalkd-only})"
  else
    echo "delayq:     delayq-server (defaults: --tick 1 --workers 2 --io-threads 2); sqlite:FILE (synchronous=full), redis://, memory:"
  fi
  build_arg=""
  [[ "$build" != "$DELAYQ_ROOT/build" ]] && build_arg=" --build ${build#"$DELAYQ_ROOT/"}"
  echo "command:    bash scripts/bench-beanstalk.sh${build_arg}${mode[*]:+ ${mode[*]}}$( ((bs_only)) && [[ -z "$note" ]] && echo ' --beanstalkd-only')${extra[*]:+ -- ${extra[*]}}"
  echo "client:     ${cmd[*]#"$DELAYQ_ROOT/"}"
} >"$out/beanstalk.machine.txt"
echo
cat "$out/beanstalk.machine.txt"
echo

status=0
"${cmd[@]}" || status=$?
echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end" >>"$out/beanstalk.machine.txt"
for i in "${!pids[@]}"; do
  if ! kill -0 "${pids[$i]}" 2>/dev/null; then
    echo "bench-beanstalk: ${names[$i]} is no longer running; its log:" >&2
    tail -n 20 "$work/${names[$i]}.log" >&2 2>/dev/null || true
    status=1
  fi
done
if ((status != 0)); then
  echo "bench-beanstalk: delayq-bench-server failed (exit $status); the servers' logs:" >&2
  for n in "${names[@]}"; do
    [[ -s "$work/$n.log" ]] && { echo "--- $n" >&2; tail -n 20 "$work/$n.log" >&2; }
  done
  exit "$status"
fi
draw_plot
echo
echo "results in $out/: beanstalk.json beanstalk.machine.txt beanstalk-tables.md beanstalk-throughput.png"

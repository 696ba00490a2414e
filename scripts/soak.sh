#!/usr/bin/env bash
# scripts/soak.sh [minutes] - the soak test; not run in CI.
#
# Builds build-soak/ (RelWithDebInfo, tests on, no examples or benchmarks)
# and its delayq-soak target (tests/soak/, not part of `all`), then runs two
# phases of mixed load, each half of `minutes` (default 3):
#   redis   a private redis-server (AOF, appendfsync always) that this script
#           starts; at 30% the worker is SIGKILLed and restarted, at 60% the
#           server is shut down (redis-cli shutdown nosave) and started again
#           on the same port and data dir after DELAYQ_SOAK_OUTAGE_S (5) s
#   sqlite  an SQLite file; SIGKILLs at 30% and at 65% (nothing to restart)
# The load: 4 threads scheduling ~100 tasks/s in all, due in 0-5 s, of five
# types (quick; flaky, 35% of attempts fail; always failing, so dead letters
# after 4 attempts; slow, 50-200 ms; slow under a 150 ms timeout), plus
# cancels and reschedules of recent ids. When the load time is up the worker
# drains; `delayq-soak check` then proves every acknowledged task succeeded,
# is a dead letter in the store, or was cancelled, and prints a summary.
# Exits non-zero on any loss or inconsistency. The runs' files stay in
# build-soak/runs/<date>/: redis/ and sqlite/ (each phase's logs and worker
# stderr), redis-server/ (its data and log).
#
# Environment: DELAYQ_SOAK_OUTAGE_S (seconds the store stays down, default 5),
# DELAYQ_SOAK_SEED (seed of the load; default random, printed).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

minutes="${1:-3}"
if [[ ! "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  delayq_die "usage: scripts/soak.sh [minutes]   (minutes of load in all, default 3)"
fi
phase_ms="$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60000 / 2 }')"
((phase_ms >= 20000)) || delayq_die "at least 0.7 minutes: each phase needs 20 s for its kills"
outage_s="${DELAYQ_SOAK_OUTAGE_S:-5}"
seed="${DELAYQ_SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}"

# What build-soak/ and the private Redis need (redis-server brings redis-cli).
ensure_packages "${DELAYQ_BUILD_DEPS[@]}"
build="build-soak"
if ! configure_and_build "$build" --target delayq-soak -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDELAYQ_WERROR=ON -DDELAYQ_BUILD_EXAMPLES=OFF -DDELAYQ_BUILD_BENCH=OFF -DDELAYQ_INSTALL=OFF; then
  grep -q 'add_subdirectory(soak)' tests/CMakeLists.txt ||
    delayq_log "(tests/CMakeLists.txt needs the line: add_subdirectory(soak))"
  delayq_die "could not build delayq-soak"
fi
soak_bin="$DELAYQ_ROOT/$build/tests/soak/delayq-soak"

run_root="$DELAYQ_ROOT/$build/runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run_root"
now_ms() { date +%s%3N; }

# --------------------------------------------------------------- redis-server

redis_dir="$run_root/redis-server"  # its data (appendonlydir) and log
redis_port=""
redis_pid=""

free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()' 2>/dev/null || echo $((20000 + RANDOM % 40000))
}

# start_redis: on $redis_port with the data in $redis_dir (reloaded from the
# append-only file on a restart). Returns non-zero when it does not answer.
start_redis() {
  rm -f "$redis_dir/redis.pid"
  redis-server --port "$redis_port" --bind 127.0.0.1 \
    --save '' --appendonly yes --appendfsync always \
    --dir "$redis_dir" --daemonize yes --pidfile "$redis_dir/redis.pid" \
    --logfile "$redis_dir/redis.log" >/dev/null || return 1
  local i
  for ((i = 0; i < 200; i++)); do # up to 20 s: a restart replays the AOF
    if [[ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" == PONG && -s "$redis_dir/redis.pid" ]]; then
      redis_pid="$(cat "$redis_dir/redis.pid")"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

stop_redis() {
  [[ -n "$redis_port" ]] || return 0
  redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  if [[ -n "$redis_pid" ]]; then
    local i
    for ((i = 0; i < 100; i++)); do
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$redis_pid" 2>/dev/null; then kill -9 "$redis_pid" 2>/dev/null || true; fi
  fi
  redis_pid=""
}

worker_pid=""
cleanup() {
  if [[ -n "$worker_pid" ]]; then
    kill -9 "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
  stop_redis
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ----------------------------------------------------------------- phases

# phase NAME STORE EVENT@PERCENT... : runs workers on STORE for phase_ms while
# the events happen (kill, store-restart), waits for the last run to drain,
# then checks. Sets phase_status.
phase() {
  local name="$1" store="$2"
  shift 2
  local dir="$run_root/$name" run=1 outage_ms="" start load_until status=0
  mkdir -p "$dir"
  start="$(now_ms)"
  load_until=$((start + phase_ms))
  delayq_log "==> soak $name: $((phase_ms / 1000)) s of load on $store, seed $seed, files in $dir"

  start_worker() {
    "$soak_bin" run --store "$store" --dir "$dir" --run "$run" --load-until "$load_until" \
      --seed "$seed" 2>"$dir/worker.$run.err" &
    worker_pid=$!
  }
  start_worker
  local event what at wait_ms t0
  for event in "$@"; do
    what="${event%@*}"
    at=$((start + phase_ms * ${event#*@} / 100))
    wait_ms=$((at - $(now_ms)))
    ((wait_ms > 0)) && sleep "$(awk -v ms="$wait_ms" 'BEGIN { print ms / 1000 }')"
    kill -0 "$worker_pid" 2>/dev/null ||
      { delayq_log "soak $name: the worker of run $run died early:"; cat "$dir/worker.$run.err" >&2; phase_status=1; return; }
    case "$what" in
      kill)
        delayq_log "soak $name: SIGKILL run $run at $((($(now_ms) - start) / 1000)) s"
        kill -9 "$worker_pid"
        wait "$worker_pid" 2>/dev/null || true
        run=$((run + 1))
        start_worker
        ;;
      store-restart)
        delayq_log "soak $name: redis-server down at $((($(now_ms) - start) / 1000)) s for ${outage_s} s"
        t0="$(now_ms)"
        stop_redis
        sleep "$outage_s"
        start_redis || delayq_die "redis-server did not come back on port $redis_port (see $redis_dir/redis.log)"
        outage_ms=$(($(now_ms) - t0))
        delayq_log "soak $name: redis-server back after $outage_ms ms"
        ;;
    esac
  done
  wait "$worker_pid" || status=$?
  worker_pid=""
  if ((status != 0)); then
    delayq_log "soak $name: the last run exited with status $status:"
    tail -n 20 "$dir/worker.$run.err" >&2
  fi
  local check_args=(--store "$store" --dir "$dir" --label "$name")
  [[ -n "$outage_ms" ]] && check_args+=(--outage-ms "$outage_ms")
  "$soak_bin" check "${check_args[@]}" || status=1
  phase_status=$status
}

failed=0
mkdir -p "$redis_dir"
for attempt in 1 2 3; do
  redis_port="$(free_port)"
  start_redis && break
  redis_port=""
  ((attempt < 3)) || delayq_die "could not start redis-server (see $redis_dir/redis.log)"
done
phase_status=0
phase redis "redis://127.0.0.1:$redis_port?prefix=soak" kill@30 store-restart@60
((phase_status == 0)) || failed=1
stop_redis

phase_status=0
phase sqlite "sqlite:$run_root/sqlite/tasks.db" kill@30 kill@65
((phase_status == 0)) || failed=1

echo
if ((failed)); then
  echo "soak: FAILED (files kept in $run_root)"
  exit 1
fi
echo "soak: PASS (files in $run_root)"

#!/usr/bin/env bash
# scripts/with-redis.sh CMD [ARGS...] - runs CMD beside a private Redis server.
#
# Starts redis-server on a free loopback port with its data in a fresh temp
# dir (AOF on, fsync always, no RDB), exports
#   DELAYQ_TEST_REDIS=redis://127.0.0.1:PORT
#   DELAYQ_TEST_REDIS_PORT=PORT
#   DELAYQ_TEST_REDIS_DIR=<its data dir>
# runs CMD, then always stops the server and removes the dir. Exits with CMD's
# status. Needs redis-server and redis-cli (Debian: redis-server).
#
# With DELAYQ_REDIS_DATA=DIR the data lives in DIR instead and is kept: a
# later run with the same DIR reloads it from the append-only file (the demo
# uses this to show tasks surviving a crash).
set -euo pipefail

if (($# == 0)); then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
delayq_need_redis with-redis

keep_dir=0
if [[ -n "${DELAYQ_REDIS_DATA:-}" ]]; then
  mkdir -p "$DELAYQ_REDIS_DATA"
  dir="$(cd "$DELAYQ_REDIS_DATA" && pwd)"
  keep_dir=1
else
  dir="$(mktemp -d "${TMPDIR:-/tmp}/delayq-redis.XXXXXX")"
fi
port=""
pid=""

stop_redis() {
  if [[ -n "$port" ]]; then
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  fi
  [[ -z "$pid" && -s "$dir/redis.pid" ]] && pid="$(cat "$dir/redis.pid")"
  if [[ -n "$pid" ]]; then
    local i
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      sleep 0.5
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  if ((keep_dir)); then
    rm -f "$dir/redis.pid"
  else
    rm -rf "$dir"
  fi
}
trap stop_redis EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Our server answers, not a stranger on the same port: compare process ids.
ours() {
  [[ -s "$dir/redis.pid" ]] || return 1
  local served
  served="$(redis-cli -p "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')"
  [[ -n "$served" && "$served" == "$(cat "$dir/redis.pid")" ]]
}

started=0
for attempt in 1 2 3 4 5; do
  port="$(delayq_free_port)"
  rm -f "$dir/redis.pid" "$dir/redis.log"
  # In the foreground, as our child, under a parent-death signal: when this
  # script is killed (a ctest timeout sends SIGKILL), the server dies too
  # instead of living on as a daemon.
  setpriv --pdeathsig KILL redis-server --port "$port" --bind 127.0.0.1 \
    --save '' --appendonly yes --appendfsync always \
    --dir "$dir" --daemonize no --pidfile "$dir/redis.pid" \
    --logfile "$dir/redis.log" >/dev/null 2>&1 &
  for ((i = 0; i < 100; i++)); do  # up to 10 s
    if [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]] && ours "$port"; then
      started=1
      break
    fi
    # Lost the port race, or failed outright: stop waiting.
    grep -q -e 'Address already in use' -e '# Failed' "$dir/redis.log" 2>/dev/null && break
    sleep 0.1
  done
  ((started)) && break
  echo "with-redis: redis-server did not start on port $port (attempt $attempt); log tail:" >&2
  tail -n 20 "$dir/redis.log" >&2 2>/dev/null || true
  [[ -s "$dir/redis.pid" ]] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
done
if ((!started)); then
  port=""
  echo "with-redis: giving up: could not start redis-server" >&2
  exit 1
fi
pid="$(cat "$dir/redis.pid")"

export DELAYQ_TEST_REDIS="redis://127.0.0.1:$port"
export DELAYQ_TEST_REDIS_PORT="$port"
export DELAYQ_TEST_REDIS_DIR="$dir"
echo "with-redis: redis-server $pid on $DELAYQ_TEST_REDIS (data in $dir)" >&2

status=0
"$@" || status=$?
exit "$status"

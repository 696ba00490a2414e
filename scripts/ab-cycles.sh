#!/usr/bin/env bash
# scripts/ab-cycles.sh [--rounds N] [--seconds S] [--connections C]
#                      [--store memory|redis|sqlite-normal|sqlite-full]
#                      BIN_A BIN_B [SERVER ARGS...]
#
# Two delayq-server binaries (say, of two commits) on one store: beanstalk
# put/reserve/delete cycles as table 1 of the peer benchmark runs them
# (bench/peers/cycle_load.py: 100-byte bodies, C connections, default 8),
# A then B, N rounds (default 3) of S seconds (default 6), each on a fresh
# server and a fresh store after a 1-s warm-up. Prints a line per run and
# the medians with their ratio B / A. SERVER ARGS go to both. The stores are
# table 1's: a private redis-server (AOF, appendfsync everysec) on a free
# port, or a SQLite file in a temporary directory (synchronous=normal, or
# full). Not run by CI; docs/benchmarks.md quotes what it printed.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rounds=3
seconds=6
connections=8
store=redis
while (($#)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --store) store="$2"; shift 2 ;;
    *) break ;;
  esac
done
(($# >= 2)) || delayq_die "usage: $0 [--rounds N] [--seconds S] [--connections C] [--store memory|redis|sqlite-normal|sqlite-full] BIN_A BIN_B [SERVER ARGS...]"
case "$store" in
  memory | redis | sqlite-normal | sqlite-full) ;;
  *) delayq_die "--store: memory, redis, sqlite-normal or sqlite-full, not '$store'" ;;
esac
ensure_packages python3
[[ $store != redis ]] || ensure_packages redis-server redis-tools

a=$(realpath "$1")
b=$(realpath "$2")
shift 2
work=$(mktemp -d)
redis_pid=""
pid=""
cleanup() {
  [[ -z "$pid" ]] || kill "$pid" 2>/dev/null || true
  [[ -z "$redis_pid" ]] || kill "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [[ $store == redis ]]; then
  redis_port=$(delayq_free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --appendonly yes \
    --appendfsync everysec --save "" --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 || delayq_die "redis-server did not start ($work/redis.log)"
fi
port=$(delayq_free_port)
beanstalk_port=$(delayq_free_port)
while [[ $beanstalk_port == "$port" ]]; do beanstalk_port=$(delayq_free_port); done
load="$DELAYQ_ROOT/bench/peers/cycle_load.py"
declare -a rates_a rates_b
for r in $(seq "$rounds"); do
  for side in a b; do
    bin=$a
    [[ $side == b ]] && bin=$b
    case "$store" in
      memory) uri="memory:" ;;
      redis) uri="redis://127.0.0.1:$redis_port?prefix=ab_${r}_$side" ;;
      sqlite-normal) uri="sqlite:$work/ab_${r}_$side.db?synchronous=normal" ;;
      sqlite-full) uri="sqlite:$work/ab_${r}_$side.db" ;;
    esac
    "$bin" --listen "127.0.0.1:$port" --store "$uri" --beanstalk-listen "127.0.0.1:$beanstalk_port" \
      "$@" >"$work/server.log" 2>&1 &
    pid=$!
    up=""
    for _ in $(seq 200); do
      (echo >"/dev/tcp/127.0.0.1/$beanstalk_port") 2>/dev/null && up=1 && break
      sleep 0.05
    done
    if [[ -z "$up" ]]; then
      cat "$work/server.log" >&2
      delayq_die "round $r, $side: the server did not listen on $beanstalk_port"
    fi
    python3 -B "$load" "$beanstalk_port" 1 "$connections" >/dev/null
    rate=$(python3 -B "$load" "$beanstalk_port" "$seconds" "$connections" | awk '{print $2}')
    kill "$pid"
    wait "$pid" || true
    pid=""
    echo "round $r $side $rate cycles/s"
    if [[ $side == a ]]; then rates_a+=("$rate"); else rates_b+=("$rate"); fi
  done
done
ma=$(delayq_median "${rates_a[@]}")
mb=$(delayq_median "${rates_b[@]}")
echo "medians: A $ma cycles/s, B $mb cycles/s, B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.2f", b/a}')x"

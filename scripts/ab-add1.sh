#!/usr/bin/env bash
# scripts/ab-add1.sh [--rounds N] [--seconds S] [--store postgres|redis]
#                    [--probes K] [--perf] BIN_A BIN_B [SERVER ARGS...]
#
# Two delayq-server binaries (say, of two commits) on one store: adds one at
# a time on one connection (`wrk -t1 -c1`, POST /v1/tasks, due in 1 h), A
# then B, N rounds (default 5) of S seconds (default 5), each run on a fresh
# server and schema (or key prefix) after a 1-s warm-up. Prints a line per
# run and the medians with their ratio B / A. SERVER ARGS go to both (for
# example --io-threads 1). The store is scripts/with-postgres.sh's
# PostgreSQL (fsync on; the default) or scripts/with-redis.sh's Redis (AOF,
# fsync always). K more connections (default 0), each one request, are made
# and closed before the measured one: a server that hands connections to its
# I/O threads in turn puts the measured one on another thread for K odd.
# --perf: `perf stat -e task-clock,context-switches -p PID` of the server
# over the measured run, printed per add (the medians too).
# Not run by CI; docs/persistence.md quotes what it printed.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rounds=5
seconds=5
store=postgres
probes=0
perf=""
while (($#)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --store) store="$2"; shift 2 ;;
    --probes) probes="$2"; shift 2 ;;
    --perf) perf=--perf; shift ;;
    *) break ;;
  esac
done
(($# >= 2)) || delayq_die "usage: $0 [--rounds N] [--seconds S] [--store postgres|redis] [--probes K] BIN_A BIN_B [SERVER ARGS...]"
case "$store" in
  postgres | redis) ;;
  *) delayq_die "--store: postgres or redis, not '$store'" ;;
esac

if [[ -z "${DELAYQ_AB_INNER:-}" ]]; then
  ensure_packages wrk curl
  [[ -z "$perf" ]] || ensure_packages linux-perf
  DELAYQ_AB_INNER=1 exec "$DELAYQ_ROOT/scripts/with-$store.sh" \
    bash "$0" --rounds "$rounds" --seconds "$seconds" --store "$store" --probes "$probes" $perf "$@"
fi

a=$(realpath "$1")
b=$(realpath "$2")
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = [[{"type":"ab","payload":"{\"p\": \"xxxxxxxxxxxxxxxx\"}","delay_ms":3600000}]]
wrk.headers["Content-Type"] = "application/json"
EOF
port=$(delayq_free_port)
declare -a rates_a rates_b cpu_a cpu_b cs_a cs_b
for r in $(seq "$rounds"); do
  for side in a b; do
    bin=$a
    [[ $side == b ]] && bin=$b
    if [[ $store == postgres ]]; then
      uri="$DELAYQ_TEST_POSTGRES?schema=ab_${r}_$side"
    else
      uri="$DELAYQ_TEST_REDIS?prefix=ab_${r}_$side"
    fi
    "$bin" --listen "127.0.0.1:$port" --store "$uri" "$@" >"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
      curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
      sleep 0.05
    done
    for _ in $(seq "$probes"); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; done
    wrk -t1 -c1 -d1s -s "$work/post.lua" "http://127.0.0.1:$port/v1/tasks" >/dev/null
    if [[ -n "$perf" ]]; then
      perf stat -e task-clock,context-switches -p "$pid" -o "$work/perf.txt" -- sleep "$seconds" &
      perf_pid=$!
    fi
    out=$(wrk -t1 -c1 -d"${seconds}s" -s "$work/post.lua" "http://127.0.0.1:$port/v1/tasks")
    [[ -z "$perf" ]] || wait "$perf_pid"
    kill "$pid"
    wait "$pid" || true
    if grep -q "Non-2xx" <<<"$out"; then
      cat "$work/server.log" >&2
      delayq_die "round $r, $side: some adds were refused"
    fi
    rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    line="round $r $side $rate adds/s"
    if [[ -n "$perf" ]]; then
      ms=$(awk '/task-clock/ {gsub(",", "", $1); print $1}' "$work/perf.txt")
      switches=$(awk '/context-switches/ {gsub(",", "", $1); print $1}' "$work/perf.txt")
      cpu=$(awk -v t="$ms" -v r="$rate" -v s="$seconds" 'BEGIN {printf "%.1f", t * 1000 / (r * s)}')
      cs=$(awk -v c="$switches" -v r="$rate" -v s="$seconds" 'BEGIN {printf "%.2f", c / (r * s)}')
      line+=", server $cpu µs of CPU and $cs context switches per add"
      if [[ $side == a ]]; then cpu_a+=("$cpu"); cs_a+=("$cs"); else cpu_b+=("$cpu"); cs_b+=("$cs"); fi
    fi
    echo "$line"
    if [[ $side == a ]]; then rates_a+=("$rate"); else rates_b+=("$rate"); fi
  done
done
ma=$(delayq_median "${rates_a[@]}")
mb=$(delayq_median "${rates_b[@]}")
echo "medians: A $ma adds/s, B $mb adds/s, B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.2f", b/a}')x"
if [[ -n "$perf" ]]; then
  echo "per add, medians: A $(delayq_median "${cpu_a[@]}") µs and $(delayq_median "${cs_a[@]}") switches," \
    "B $(delayq_median "${cpu_b[@]}") µs and $(delayq_median "${cs_b[@]}") switches"
fi

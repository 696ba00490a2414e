#!/usr/bin/env bash
# scripts/ab-add1.sh [--rounds N] [--seconds S] [--store postgres|redis]
#                    [--probes K] BIN_A BIN_B [SERVER ARGS...]
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
# Not run by CI; docs/persistence.md quotes what it printed.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rounds=5
seconds=5
store=postgres
probes=0
while (($#)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --store) store="$2"; shift 2 ;;
    --probes) probes="$2"; shift 2 ;;
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
  DELAYQ_AB_INNER=1 exec "$DELAYQ_ROOT/scripts/with-$store.sh" \
    bash "$0" --rounds "$rounds" --seconds "$seconds" --store "$store" --probes "$probes" "$@"
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
declare -a rates_a rates_b
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
    out=$(wrk -t1 -c1 -d"${seconds}s" -s "$work/post.lua" "http://127.0.0.1:$port/v1/tasks")
    kill "$pid"
    wait "$pid" || true
    if grep -q "Non-2xx" <<<"$out"; then
      cat "$work/server.log" >&2
      delayq_die "round $r, $side: some adds were refused"
    fi
    rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    echo "round $r $side $rate adds/s"
    if [[ $side == a ]]; then rates_a+=("$rate"); else rates_b+=("$rate"); fi
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ma=$(median "${rates_a[@]}")
mb=$(median "${rates_b[@]}")
echo "medians: A $ma adds/s, B $mb adds/s, B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.2f", b/a}')x"

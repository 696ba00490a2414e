#!/usr/bin/env bash
# scripts/bench-forward.sh - what forwarding a call to the task's owner costs
# under --cluster (docs/benchmarks.md, "Calls on any instance"; issue 14).
#
#   bash scripts/bench-forward.sh [--build DIR] [--rounds N] [--seconds S]
#
# Needs a built DIR/server/delayq-server (default build/, as scripts/test.sh
# builds it); installs wrk, redis-server and curl with apt-get if missing. Starts a
# private redis-server (scripts/with-redis.sh) and two instances a and b
# (--cluster --shards 16 --lease 2s) on free loopback ports, adds one task
# owned by b, and runs wrk (2 threads, 16 connections) on GET /v1/tasks/ID
# at b (answered locally) and at a (forwarded to b), alternating, N rounds of
# S seconds each (default 3 x 5 s). Prints each round and the medians; wrk,
# both servers and Redis share the machine, so compare the two columns of one
# run, not absolute figures across runs.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

build=build
rounds=3
seconds=5
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --inner) inner=1; shift ;;
    *) delayq_die "unknown argument '$1' (see the header of $0)" ;;
  esac
done
server="$build/server/delayq-server"
[[ -x "$server" ]] || delayq_die "$server was not built (bash scripts/test.sh builds it)"
[[ -n "${inner:-}" ]] || ensure_packages wrk redis-server curl
delayq_need_tools wrk redis-server curl

if [[ -z "${inner:-}" ]]; then
  exec bash scripts/with-redis.sh bash "$0" --inner --build "$build" --rounds "$rounds" \
    --seconds "$seconds"
fi

token=bench-forward
store="$DELAYQ_TEST_REDIS/0?prefix=bench-forward-$$&shards=16"
tmp="$(mktemp -d)"
cleanup() {
  # start() runs in a command substitution (a subshell): its pids are in files.
  for f in "$tmp"/*.pid; do
    if [[ -e "$f" ]]; then kill "$(cat "$f")" 2>/dev/null || true; fi
  done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

start() {  # name -> prints the port
  "$server" --listen 127.0.0.1:0 --store "$store" --token "$token" --cluster --shards 16 \
    --lease 2s --instance "$1" >"$tmp/$1.out" 2>"$tmp/$1.err" &
  echo $! >"$tmp/$1.pid"
  local port=""
  for _ in $(seq 100); do
    port="$(sed -n 's/^delayq-server listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/$1.out")"
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" ]] || delayq_die "instance $1 did not start: $(cat "$tmp/$1.err")"
  echo "$port"
}
api() {  # port method path [body] -> the response with its headers
  curl -s -i -X "$2" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    ${4:+--data "$4"} "http://127.0.0.1:$1$3"
}
held() { api "$1" GET /v1/stats | sed -n 's/.*"shards_held":\([0-9]*\).*/\1/p'; }

port_a="$(start a)"
port_b="$(start b)"
# Both hold shards, and every shard is held: the split is done (a round
# or two after b joined). No shard moves while wrk runs.
for _ in $(seq 300); do
  ha="$(held "$port_a")"
  hb="$(held "$port_b")"
  [[ -n "$ha" && -n "$hb" && "$ha" -gt 0 && "$hb" -gt 0 && $((ha + hb)) -eq 16 ]] && break
  sleep 0.1
done
sleep 3  # one more lease round: a and b agree on the members

# A task b owns: added on b, it is answered there (no X-Delayq-Instance).
id=""
for k in $(seq 100); do
  answer="$(api "$port_b" POST /v1/tasks "{\"type\":\"bench\",\"delay_ms\":3600000,\"id\":\"fwd-$k\"}")"
  grep -q '^HTTP/1.1 201' <<<"$answer" || delayq_die "adding a task failed: $answer"
  if ! grep -qi '^X-Delayq-Instance' <<<"$answer"; then
    id="fwd-$k"
    break
  fi
done
[[ -n "$id" ]] || delayq_die "no task of b's found"
grep -qi '^X-Delayq-Instance: b' <<<"$(api "$port_a" GET "/v1/tasks/$id")" ||
  delayq_die "a does not forward GET /v1/tasks/$id to b"

run() {  # port -> "requests/s p50_ms"
  local out rps p50
  out="$(wrk -t2 -c16 -d"${seconds}s" --latency -H "Authorization: Bearer $token" \
    "http://127.0.0.1:$1/v1/tasks/$id")"
  rps="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
  p50="$(awk '$1 == "50%" {v = $2; if (v ~ /us$/) {sub(/us$/, "", v); v /= 1000}
          else if (v ~ /ms$/) sub(/ms$/, "", v); else if (v ~ /s$/) {sub(/s$/, "", v); v *= 1000}
          print v}' <<<"$out")"
  echo "$rps $p50"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "GET /v1/tasks/$id, wrk -t2 -c16 -d${seconds}s, $rounds rounds, commit $(git rev-parse --short HEAD)"
printf '%-6s %-22s %-22s\n' round "on b (owner): req/s p50" "on a (forwarded): req/s p50"
: >"$tmp/local"
: >"$tmp/fwd"
for r in $(seq "$rounds"); do
  local_res="$(run "$port_b")"
  fwd_res="$(run "$port_a")"
  echo "$local_res" >>"$tmp/local"
  echo "$fwd_res" >>"$tmp/fwd"
  printf '%-6s %-22s %-22s\n' "$r" "$local_res" "$fwd_res"
done
lr="$(cut -d' ' -f1 "$tmp/local" | median)"
lp="$(cut -d' ' -f2 "$tmp/local" | median)"
fr="$(cut -d' ' -f1 "$tmp/fwd" | median)"
fp="$(cut -d' ' -f2 "$tmp/fwd" | median)"
printf 'median %-22s %-22s\n' "$lr $lp" "$fr $fp"
awk -v lr="$lr" -v fr="$fr" -v lp="$lp" -v fp="$fp" \
  'BEGIN {printf "forwarded / local: %.2fx the requests/s, %.2fx the median latency\n", fr / lr, fp / lp}'

#!/usr/bin/env bash
# scripts/with-redis-cluster.sh CMD [ARGS...] - runs CMD beside a private
# three-node Redis Cluster.
#
# Starts three redis-server --cluster-enabled yes on free loopback ports, each
# with its data in a fresh temp dir (AOF on, fsync always, no RDB), joins them
# with `redis-cli --cluster create ... --cluster-replicas 0` (three masters,
# no replicas), waits until every node says cluster_state:ok, exports
#   DELAYQ_TEST_REDIS_CLUSTER=redis-cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   DELAYQ_TEST_REDIS_CLUSTER_PORTS="P1 P2 P3"
# runs CMD, then always stops the servers and removes the dir. Exits with
# CMD's status. Needs redis-server and redis-cli (Debian: redis-server).
# Works inside scripts/with-redis.sh (the variables of both are set).
set -euo pipefail

if (($# == 0)); then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
delayq_need_redis with-redis-cluster

dir="$(mktemp -d "${TMPDIR:-/tmp}/delayq-redis-cluster.XXXXXX")"
ports=()

stop_cluster() {
  local p n pid i
  for ((n = 0; n < 3; n++)); do
    p="${ports[n]:-}"
    [[ -n "$p" ]] && redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
  done
  for ((n = 0; n < 3; n++)); do
    [[ -s "$dir/$n/redis.pid" ]] || continue
    pid="$(cat "$dir/$n/redis.pid")"
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    # Only a server that is still there: its pid may be another's by now.
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Our server answers, not a stranger on the same port: compare process ids.
ours() {
  [[ -s "$2/redis.pid" ]] || return 1
  local served
  served="$(redis-cli -p "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')"
  [[ -n "$served" && "$served" == "$(cat "$2/redis.pid")" ]]
}

# start_node N : starts node N on a free port (retrying a lost port race);
# its cluster bus listens on PORT + 10000, which must be free too.
start_node() {
  local n="$1" d="$dir/$1" port attempt i
  mkdir -p "$d"
  for attempt in 1 2 3 4 5; do
    port="$(delayq_free_port)"
    while ((port > 55535)); do port="$(delayq_free_port)"; done
    rm -f "$d/redis.pid" "$d/redis.log" "$d/nodes.conf"
    # In the foreground, as our child, under a parent-death signal: when this
    # script is killed (a ctest timeout sends SIGKILL), the server dies too
    # instead of living on as a daemon.
    setpriv --pdeathsig KILL redis-server --port "$port" --bind 127.0.0.1 \
      --cluster-enabled yes --cluster-config-file "$d/nodes.conf" \
      --cluster-node-timeout 5000 \
      --save '' --appendonly yes --appendfsync always \
      --dir "$d" --daemonize no --pidfile "$d/redis.pid" \
      --logfile "$d/redis.log" >/dev/null 2>&1 &
    for ((i = 0; i < 100; i++)); do  # up to 10 s
      if [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]] && ours "$port" "$d"; then
        ports[n]="$port"
        return 0
      fi
      grep -q -e 'Address already in use' -e '# Failed' "$d/redis.log" 2>/dev/null && break
      sleep 0.1
    done
    echo "with-redis-cluster: node $n did not start on port $port (attempt $attempt); log tail:" >&2
    tail -n 20 "$d/redis.log" >&2 2>/dev/null || true
    if [[ -s "$d/redis.pid" ]]; then
      # Gone before the next attempt reuses its data dir.
      local stale
      stale="$(cat "$d/redis.pid")"
      kill "$stale" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kill -0 "$stale" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$stale" 2>/dev/null && kill -9 "$stale" 2>/dev/null || true
    fi
  done
  echo "with-redis-cluster: giving up: could not start node $n" >&2
  return 1
}

for n in 0 1 2; do start_node "$n"; done

redis-cli --cluster create "127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}" "127.0.0.1:${ports[2]}" \
  --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
  { echo "with-redis-cluster: redis-cli --cluster create failed:" >&2; cat "$dir/create.log" >&2; exit 1; }

ok=0
for ((i = 0; i < 200; i++)); do  # up to 20 s
  ok=1
  for p in "${ports[@]}"; do
    redis-cli -p "$p" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok' || ok=0
  done
  ((ok)) && break
  sleep 0.1
done
if ((!ok)); then
  echo "with-redis-cluster: the cluster did not reach cluster_state:ok" >&2
  for p in "${ports[@]}"; do redis-cli -p "$p" cluster info >&2 || true; done
  exit 1
fi

export DELAYQ_TEST_REDIS_CLUSTER="redis-cluster://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
export DELAYQ_TEST_REDIS_CLUSTER_PORTS="${ports[*]}"
echo "with-redis-cluster: cluster on $DELAYQ_TEST_REDIS_CLUSTER (data in $dir)" >&2

status=0
"$@" || status=$?
exit "$status"

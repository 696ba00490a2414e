#!/usr/bin/env bash
# scripts/server.sh [SERVER ARGS...] - builds delayq-server in build/ (shared
# with test.sh's "build" stage and demo.sh; only the server and what it
# links) and runs it in the foreground.
#
# Its store is --store when given, else DELAYQ_STORE, else the Redis on
# 127.0.0.1:6379; when none of those is there, a private redis-server
# (append-only, fsync always) whose data stays in build/server-redis.
# Stop it with Ctrl-C (it drains; a second Ctrl-C exits at once).
#
#   bash scripts/server.sh                          # 127.0.0.1:7700
#   bash scripts/server.sh --listen 127.0.0.1:8080 --token s3cret
#   bash scripts/server.sh --store sqlite:/tmp/tasks.db
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

ensure_packages "${DELAYQ_BUILD_DEPS[@]}"
configure_and_build build --target delayq-server "${DELAYQ_MAIN_BUILD_ARGS[@]}"

server=build/server/delayq-server
[[ -x "$server" ]] || delayq_die "$server was not built"

cat >&2 <<'HELP'
delayq-server: try, from another terminal (add -H "Authorization: Bearer TOKEN" with --token):
  curl -s -H 'Content-Type: application/json' localhost:7700/v1/tasks -d '{"type":"email","payload":"hi","delay_ms":2000}'
  curl -s -H 'Content-Type: application/json' localhost:7700/v1/reserve -d '{"types":["email"],"wait_ms":5000}'
  curl -s -H 'Content-Type: application/json' localhost:7700/v1/tasks/ID/finish -d '{"lease":"LEASE"}'
  curl -s localhost:7700/v1/stats
The API: docs/server.md
HELP

explicit_store=0
for arg in "$@"; do [[ "$arg" == --store || "$arg" == --store=* ]] && explicit_store=1; done
if ((explicit_store)) || [[ -n "${DELAYQ_STORE:-}" ]] ||
  [[ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" == PONG ]]; then
  exec "$server" "$@"
fi
echo "server: no Redis on 127.0.0.1:6379; starting a private one (data kept in build/server-redis)" >&2
export DELAYQ_REDIS_DATA="$DELAYQ_ROOT/build/server-redis"
# Not exec'd: with-redis.sh stops its Redis once the server has exited.
bash scripts/with-redis.sh bash -c 'exec "$0" --store "$DELAYQ_TEST_REDIS/0?prefix=server" "$@"' "$server" "$@"

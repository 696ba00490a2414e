#!/usr/bin/env bash
# scripts/demo.sh [ARGS...] - builds the demo in build/ (the configuration
# test.sh's "build" stage uses, so they share it) and runs it with ARGS.
# Only the demo and the libraries it links are built: the tests, the server
# and the benchmarks wait for scripts/test.sh.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

ensure_packages "${DELAYQ_BUILD_DEPS[@]}"
configure_and_build build --target delayq-demo "${DELAYQ_MAIN_BUILD_ARGS[@]}"

demo=build/examples/delayq-demo
if [[ ! -x "$demo" ]]; then
  delayq_die "$demo was not built: examples/ (examples/CMakeLists.txt and examples/demo.cpp) is not there yet, or does not define the delayq-demo target"
fi
# The demo's store is the engine's default: DELAYQ_STORE, else Redis at
# 127.0.0.1:6379. With neither (a fresh machine runs no Redis), start a
# private redis-server whose data stays in build/demo-redis, so a demo that
# crashed (--crash-after) finds its tasks again on the next run (--resume).
explicit_store=0
for arg in "$@"; do [[ "$arg" == --store || "$arg" == --store=* ]] && explicit_store=1; done
if ((explicit_store)) || [[ -n "${DELAYQ_STORE:-}" ]] ||
  [[ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" == PONG ]]; then
  exec "$demo" "$@"
fi
echo "demo: no Redis on 127.0.0.1:6379; starting a private one (data kept in build/demo-redis)" >&2
export DELAYQ_REDIS_DATA="$DELAYQ_ROOT/build/demo-redis"
exec bash scripts/with-redis.sh bash -c 'DELAYQ_STORE="$DELAYQ_TEST_REDIS/0?prefix=demo" exec "$0" "$@"' "$demo" "$@"

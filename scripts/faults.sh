#!/usr/bin/env bash
# scripts/faults.sh - the fault harness (issue 33; docs/faults.md).
#
#   bash scripts/faults.sh            the short run: every fault once (about 3 min),
#                                     what CI runs (ctest -L faults)
#   bash scripts/faults.sh --full     every fault twice, 10 s on and 10 s off,
#                                     then 60 s of faults mixed (about 12 min)
#   bash scripts/faults.sh --full --out DIR --only instance-pause,redis-kill ...
#                                     (tests/faults/faults.py --help)
#
# As root: it makes network namespaces. Installs what it needs (the packages
# of scripts/common.sh), builds delayq-server in build/ (the configuration of
# scripts/test.sh's build stage), then runs tests/faults/faults.py, which
# prints the checker's table and exits 1 when something that must hold did
# not. The history, the logs and report.json stay in --out (default: a temp
# dir, named at the end).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"
[[ "$(id -u)" == 0 ]] || delayq_die "scripts/faults.sh needs root (network namespaces)"
ensure_packages "${DELAYQ_BUILD_DEPS[@]}" iproute2 faketime util-linux python3
configure_and_build build --target delayq-server "${DELAYQ_MAIN_BUILD_ARGS[@]}"
exec /usr/bin/python3 tests/faults/faults.py --server build/server/delayq-server "$@"

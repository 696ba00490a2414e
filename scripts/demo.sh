#!/usr/bin/env bash
# scripts/demo.sh [ARGS...] - builds build/ (the configuration test.sh's
# "build" stage uses, so they share it) and runs the demo with ARGS.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

ensure_packages "${DELAYQ_BUILD_DEPS[@]}"
configure_and_build build "${DELAYQ_MAIN_BUILD_ARGS[@]}"

demo=build/examples/delayq-demo
if [[ ! -x "$demo" ]]; then
  delayq_die "$demo was not built: examples/ (examples/CMakeLists.txt and examples/demo.cpp) is not there yet, or does not define the delayq-demo target"
fi
exec "$demo" "$@"

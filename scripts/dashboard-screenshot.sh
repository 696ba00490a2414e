#!/usr/bin/env bash
# scripts/dashboard-screenshot.sh [OUT.png] - remakes docs/dashboard.png.
#
# Builds delayq-server and the dashboard's browser tests in build/, then runs
# the test that fills a server with realistic data (a few task types, dead
# letters, a consumer finishing a trickle of work while the page samples for
# about 80 s) and has headless Chromium capture the page
# (DELAYQ_SCREENSHOT, tests/dashboard/dashboard_browser_test.cpp).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

out="${1:-docs/dashboard.png}"
[[ "$out" = /* ]] || out="$DELAYQ_ROOT/$out"
ensure_packages "${DELAYQ_BUILD_DEPS[@]}" chromium fonts-dejavu-core
configure_and_build build --target delayq-server --target delayq_dashboard_tests \
  "${DELAYQ_MAIN_BUILD_ARGS[@]}"
DELAYQ_SCREENSHOT="$out" build/tests/dashboard/delayq_dashboard_tests \
  --test-case='dashboard: counts per type*'
echo "wrote $out"

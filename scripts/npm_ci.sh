#!/usr/bin/env bash
# scripts/npm_ci.sh SRC DEST MODULE... - installs the npm packages that
# SRC/package-lock.json pins into DEST/node_modules (`npm ci`), and checks
# that each MODULE resolves there.
#
# For test suites that run Node tools (tests/openapi/CMakeLists.txt runs it
# as a fixture, and tests/beanstalk/npm_ci.sh for its client). Needs
# node and npm (scripts/test.sh installs them: ensure_node_npm in
# scripts/common.sh) and the npm registry, or npm's cache from an earlier
# install: an install that already matches the lock file is kept, so a
# second run asks nothing of the network. Install scripts of the packages
# are not run (--ignore-scripts).
set -euo pipefail

if (($# < 3)); then
  echo "usage: $0 SRC DEST MODULE..." >&2
  exit 2
fi
src="$(cd "$1" && pwd)"
dest="$2"
shift 2

for tool in node npm; do
  command -v "$tool" >/dev/null || {
    echo "npm_ci: $tool not found: bash scripts/test.sh installs it (ensure_node_npm in scripts/common.sh), or: apt-get install nodejs npm" >&2
    exit 1
  }
done

mkdir -p "$dest"
stamp="$dest/.installed-from"
want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "npm_ci: $dest/node_modules already matches $src/package-lock.json"
  exit 0
fi

rm -f "$stamp"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# --prefer-offline: npm's cache first, the registry only for what it lacks.
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=warn)
for module in "$@"; do
  [[ -f "$dest/node_modules/$module/package.json" ]] ||
    { echo "npm_ci: $module did not install into $dest/node_modules" >&2; exit 1; }
  echo "npm_ci: $module $(node -p "require('$dest/node_modules/$module/package.json').version")"
done
echo "$want" >"$stamp"
echo "npm_ci: installed into $dest/node_modules (node $(node --version), npm $(npm --version))"

#!/usr/bin/env bash
# tests/beanstalk/npm_ci.sh DEST - installs the Node beanstalkd client of the
# beanstalk suite into DEST/node_modules, exactly as
# tests/beanstalk/node/package-lock.json pins it (`npm ci`).
#
# DEST is a folder of the build tree (tests/beanstalk/CMakeLists.txt runs this
# as the suite's first test, a fixture the Node tests need). Needs node and
# npm (scripts/test.sh installs them: ensure_node_npm in scripts/common.sh)
# and the npm registry, or npm's cache from an earlier install: an install
# that already matches the lock file is kept, so a second run asks nothing of
# the network. Install scripts of the packages are not run (--ignore-scripts):
# the client is plain JavaScript.
set -euo pipefail

if (($# != 1)); then
  echo "usage: $0 DEST" >&2
  exit 2
fi
dest="$1"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/node" && pwd)"

for tool in node npm; do
  command -v "$tool" >/dev/null || {
    echo "npm_ci: $tool not found: bash scripts/test.sh installs it (ensure_node_npm in scripts/common.sh), or: apt-get install nodejs npm" >&2
    exit 1
  }
done

mkdir -p "$dest"
stamp="$dest/.installed-from"
want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$dest/node_modules/node-beanstalk" ]]; then
  echo "npm_ci: $dest/node_modules already matches package-lock.json"
  exit 0
fi

rm -f "$stamp"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# --prefer-offline: npm's cache first, the registry only for what it lacks.
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=warn)
NODE_PATH="$dest/node_modules" node -e 'require("node-beanstalk")' ||
  { echo "npm_ci: node-beanstalk did not install into $dest/node_modules" >&2; exit 1; }
echo "$want" >"$stamp"
echo "npm_ci: node-beanstalk $(node -p "require('$dest/node_modules/node-beanstalk/package.json').version") in $dest/node_modules (node $(node --version), npm $(npm --version))"

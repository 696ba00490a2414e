#!/usr/bin/env bash
# tests/beanstalk/npm_ci.sh DEST - installs the Node beanstalkd client of the
# beanstalk suite into DEST/node_modules, exactly as
# tests/beanstalk/node/package-lock.json pins it (`npm ci`).
#
# DEST is a folder of the build tree (tests/beanstalk/CMakeLists.txt runs this
# as the suite's first test, a fixture the Node tests need). scripts/npm_ci.sh
# does the work: node and npm needed, an install that already matches the
# lock file kept, no install scripts run.
set -euo pipefail

if (($# != 1)); then
  echo "usage: $0 DEST" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../../scripts/npm_ci.sh" "$here/node" "$1" node-beanstalk

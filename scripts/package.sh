#!/usr/bin/env bash
# scripts/package.sh - builds the Debian package delayq-server (issue 36;
# docs/server.md, "The Debian package"):
#
#   bash scripts/package.sh                 -> build-package/packages/delayq-server_0.1.0-1_amd64.deb
#   bash scripts/package.sh --revision 2    -> ..._0.1.0-2_amd64.deb (a newer build: dpkg -i upgrades)
#   bash scripts/package.sh --build build --no-build --out DIR
#                                           packs an already built tree (tests/package/ does,
#                                           with the build the tests ran on)
#
# Installs what it needs (scripts/common.sh: DELAYQ_BUILD_DEPS, help2man),
# configures build-package/ with build/'s flags but no tests, examples or
# benchmarks (ccache then reuses build/'s objects), builds delayq-server and
# delayqctl, and packs them with CPack (packaging/CMakeLists.txt). Prints
# the path of the .deb on its last line.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

build=build-package
revision=""
do_build=1
out=""
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --revision) revision="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --out) out="$2"; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) delayq_die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -z "$revision" || "$revision" =~ ^[0-9]+$ ]] || delayq_die "--revision wants a whole number, got '$revision'"
[[ "$build" = /* ]] || build="$DELAYQ_ROOT/$build"

if ((do_build)); then
  ensure_packages "${DELAYQ_BUILD_DEPS[@]}" help2man
  configure_and_build "$build" --target delayq-server --target delayqctl \
    "${DELAYQ_MAIN_BUILD_ARGS[@]/-DDELAYQ_BUILD_BENCH=ON/-DDELAYQ_BUILD_BENCH=OFF}" \
    -DDELAYQ_BUILD_TESTS=OFF -DDELAYQ_BUILD_EXAMPLES=OFF
fi
[[ -f "$build/CPackConfig.cmake" ]] || delayq_die "$build has no CPackConfig.cmake: configure it first (without --no-build)"
delayq_need_tools cpack help2man dpkg-shlibdeps

[[ -n "$out" ]] || out="$build/packages"
mkdir -p "$out"
rc=0
# The revision reaches cpack through the environment (packaging/cpack_project.cmake).
(cd "$build" && DELAYQ_DEB_REVISION="$revision" cpack -G DEB -B "$out") >"$out/cpack.log" 2>&1 || rc=$?
if ((rc != 0)); then
  cat "$out/cpack.log" >&2
  delayq_die "cpack failed (exit $rc)"
fi
deb="$(sed -n 's/^CPack: - package: \(.*\.deb\) generated\.$/\1/p' "$out/cpack.log" | tail -n 1)"
[[ -f "$deb" ]] || { cat "$out/cpack.log" >&2; delayq_die "cpack said no .deb"; }
rm -rf "$out/_CPack_Packages"
echo "$deb"

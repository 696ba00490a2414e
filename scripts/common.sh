# scripts/common.sh - helpers sourced by the other scripts. Not run directly.
#
#   ensure_packages pkg...              install the missing Debian packages
#   configure_and_build <dir> [args...] configure (when needed) and build
#   DELAYQ_BUILD_DEPS                   every package the scripts rely on
#   DELAYQ_MAIN_BUILD_ARGS              cmake args of build/ (test.sh, demo.sh)

DELAYQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Everything the build, the tests, the benchmarks and their plots need on a
# fresh Debian 12. redis-server brings redis-cli (redis-tools); clang and
# libclang-rt-14-dev are for fuzzing and clang sanitizer builds; g++'s own
# sanitizer runtimes come with build-essential.
DELAYQ_BUILD_DEPS=(
  build-essential cmake pkg-config
  libboost-dev libhiredis-dev libsqlitecpp-dev libsqlite3-dev libcereal-dev
  doctest-dev redis-server libbenchmark-dev
  clang libclang-rt-14-dev gnuplot-nox git ca-certificates
)

# The configuration of build/: test.sh stage "build" and demo.sh share it.
DELAYQ_MAIN_BUILD_ARGS=(
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DDELAYQ_WERROR=ON
  -DDELAYQ_BUILD_BENCH=ON
)

delayq_log() { printf '%s\n' "$*" >&2; }
delayq_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ensure_packages pkg... : installs, with apt-get, those of the packages that
# are not installed yet. Runs `apt-get update` only when something is missing.
ensure_packages() {
  local pkg missing=()
  for pkg in "$@"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]]; then
      missing+=("$pkg")
    fi
  done
  ((${#missing[@]} == 0)) && return 0

  if [[ "$(id -u)" != 0 ]]; then
    delayq_die "missing packages: ${missing[*]}
  Install them as root:  apt-get install -y ${missing[*]}"
  fi
  command -v apt-get >/dev/null || delayq_die "missing packages: ${missing[*]}, and no apt-get here (Debian 12 expected)"

  delayq_log "==> installing ${missing[*]}"
  # Package scripts (redis-server's) try to start their service; there may be
  # no init system. A policy-rc.d that answers 101 tells them not to, as
  # Debian's container images do. Only ours is removed afterwards.
  local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\n# delayq scripts/common.sh: no service starts during installs\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made_policy=1
  fi
  {
    apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 "${missing[@]}"
  } || rc=$?
  ((made_policy)) && rm -f "$policy"
  ((rc == 0)) || delayq_die "apt-get could not install: ${missing[*]} (exit $rc)"
}

# configure_and_build <builddir> [cmake args...] : configures <builddir> when
# it has no cache yet or was configured with other arguments (then from a
# fresh cache, so the directory always reflects exactly these arguments),
# then builds it with all cores.
configure_and_build() {
  local dir="$1"
  shift
  [[ "$dir" = /* ]] || dir="$DELAYQ_ROOT/$dir"
  local stamp="$dir/.delayq-configure-args"
  local want
  want="$(printf '%s\n' "$@")"

  if [[ ! -f "$dir/CMakeCache.txt" ]]; then
    cmake -S "$DELAYQ_ROOT" -B "$dir" "$@" || return
  elif [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    delayq_log "(cmake arguments of $dir changed: configuring from a fresh cache)"
    cmake --fresh -S "$DELAYQ_ROOT" -B "$dir" "$@" || return
  fi
  printf '%s\n' "$want" >"$stamp"
  cmake --build "$dir" -j"$(nproc)" || return
}

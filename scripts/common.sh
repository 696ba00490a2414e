# scripts/common.sh - helpers sourced by the other scripts. Not run directly.
#
#   ensure_packages pkg...              install the missing Debian packages
#   configure_and_build <dir> [args...] configure (when needed) and build
#   DELAYQ_BUILD_DEPS                   the packages build/ and the demo need
#   DELAYQ_TEST_DEPS                    those and what tests and benchmarks add
#   ensure_node_npm                     install node and npm when missing (Debian's)
#   DELAYQ_MAIN_BUILD_ARGS              cmake args of build/ (test.sh, demo.sh)
#   delayq_machine <builddir>           the header of bench/results/*.machine.txt
#   delayq_free_port                    a free loopback TCP port, on stdout
#   delayq_median N...                  the median of the numbers, on stdout
#   delayq_need_redis <script name>     exits 1 unless redis-server and redis-cli are here

DELAYQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# What build/ needs to compile (the library, the server, the tools, the tests
# and the benchmarks: DELAYQ_MAIN_BUILD_ARGS builds them all) and to run the
# demo and the server: redis-server brings redis-cli (redis-tools).
# demo.sh and server.sh install only these.
DELAYQ_BUILD_DEPS=(
  build-essential cmake ninja-build ccache pkg-config
  libboost-dev libhiredis-dev libsqlitecpp-dev libsqlite3-dev libcereal-dev
  doctest-dev redis-server libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libpq-dev
  libhowardhinnant-date-dev tzdata
)
# What the tests and benchmarks need on top: clang and libclang-rt-14-dev for
# fuzzing (g++'s own sanitizer runtimes come with build-essential); gnuplot
# for the plots; beanstalkd and wrk for the server benchmark; chromium runs
# the dashboard's browser tests, fonts-dejavu-core gives its screenshots a
# font; git names the commit in benchmark results.
DELAYQ_TEST_DEPS=(
  "${DELAYQ_BUILD_DEPS[@]}"
  clang libclang-rt-14-dev gnuplot-nox git ca-certificates
  beanstalkd wrk chromium fonts-dejavu-core
)
# --- beanstalk clients (issue 26; tests/beanstalk/) ---
# The real third-party beanstalkd clients the beanstalk suite runs: PHP's
# pheanstalk 4.0 as Debian packages it, run by php-cli. The Node client comes
# from npm (tests/beanstalk/node/package-lock.json, installed into the build
# tree by tests/beanstalk/npm_ci.sh); node and npm themselves come from
# ensure_node_npm below, not from this list.
DELAYQ_TEST_DEPS+=(php-cli php-pda-pheanstalk)
# --- PostgreSQL (issue 34) ---
# The server the PostgreSQL store's tests run against (scripts/with-postgres.sh
# runs its binaries as an unprivileged user in a temp dir) and psql. The
# package makes a cluster of its own at install and would start a service:
# ensure_packages keeps services from starting, and nothing uses that cluster.
DELAYQ_TEST_DEPS+=(postgresql postgresql-client)
# --- end of the PostgreSQL part ---
# --- the Debian package (issue 36; tests/package/, scripts/package.sh) ---
# help2man writes the man pages while packing; lintian checks the package;
# systemd brings systemd-analyze (the unit's verify and security score) and
# systemd-sysusers (the postinst's user, in the test's directory tree). No
# systemd runs: the package is only installed into a tree. The OpenAPI test
# (tests/openapi/) needs node and npm only (ensure_node_npm).
DELAYQ_TEST_DEPS+=(help2man lintian systemd)
# --- recurring schedules (issue 35; docs/schedules.md) ---
# croniter is the independent implementation the cron test compares with
# (tests/schedules/croniter_compare.py), Python's zoneinfo its tz authority.
DELAYQ_TEST_DEPS+=(python3 python3-croniter)

# ensure_node_npm : installs Debian's nodejs and npm, each only when its
# command is missing. Not by package name: a machine with NodeSource's
# nodejs has node and npm from that one package, which conflicts with
# Debian's npm package, so asking apt for "npm" there would fail.
ensure_node_npm() {
  command -v node >/dev/null || ensure_packages nodejs
  command -v npm >/dev/null || ensure_packages npm
}
# --- end of the beanstalk clients' part ---

# --- peer benchmarks (issue 32; scripts/bench-peers.sh) ---
# python3 runs bench/peers/ (standard library only); BullMQ comes from npm
# (bench/peers/node/package-lock.json), node and npm from ensure_node_npm.
DELAYQ_TEST_DEPS+=(python3)
# --- end of the peer benchmarks' part ---
# --- the fault harness (issue 33; tests/faults/, docs/faults.md) ---
# iproute2 makes the network namespaces and veth pairs (ip netns); faketime
# (libfaketime) skews one instance's wall clock; util-linux's setpriv ties
# every process the harness starts to it (--pdeathsig). The harness runs on
# Debian's python3 (stdlib only). The clock regression test in
# tests/server/faults_found_process_test.cpp uses libfaketime too.
DELAYQ_TEST_DEPS+=(iproute2 faketime util-linux python3)
# --- end of the fault harness's part ---

# The configuration of build/: test.sh stage "build", demo.sh and server.sh
# share it. -g1 (line tables and function names: enough for a backtrace)
# rather than RelWithDebInfo's -g compiles in about a fifth less time
# (docs/testing.md, "Build speed"); for a debugger session, configure a
# build of your own with -g.
DELAYQ_MAIN_BUILD_ARGS=(
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  -DDELAYQ_WERROR=ON
  -DDELAYQ_BUILD_BENCH=ON
  -DDELAYQ_BENCH_SMOKE_BUILD=OFF
)

delayq_log() { printf '%s\n' "$*" >&2; }

# The median of its arguments (numbers), on stdout: the A/B scripts' summary.
delayq_median() {
  printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}

# A port the kernel just handed out for a bind is free unless someone takes it
# first; a start that loses that race is retried on another port by its
# caller. python3 is not among the packages a fresh machine gets: without it,
# a random port that nothing accepts connections on.
delayq_free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
  else
    local p
    while :; do
      p=$((20000 + RANDOM % 40000))
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        echo "$p"
        return
      fi
    done
  fi
}

# The with-redis scripts' check for the Redis tools they drive.
delayq_need_redis() {
  local tool
  for tool in redis-server redis-cli; do
    command -v "$tool" >/dev/null ||
      { echo "$1: $tool not found; install it with: apt-get install redis-server" >&2; exit 1; }
  done
}
delayq_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# delayq_need_tools tool... : dies unless every tool is on PATH (the bench
# scripts, after ensure_packages, or with --no-build on a machine set up by hand).
delayq_need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null ||
      delayq_die "$tool not found: install the packages of scripts/common.sh (DELAYQ_TEST_DEPS)"
  done
}

# delayq_need_built <builddir> binary... : dies unless every binary was built.
delayq_need_built() {
  local bin
  for bin in "${@:2}"; do
    [[ -x "$bin" ]] || delayq_die "$bin was not built (configure $1 with -DDELAYQ_BUILD_BENCH=ON and build it)"
  done
}

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

# configure_and_build <builddir> [--target T...] [cmake args...] : configures
# <builddir> when it has no cache yet or was configured with other arguments
# (then from a fresh cache, so the directory always reflects exactly these
# arguments), then builds it with all cores: every target, or only the
# --target ones (and what they need). Uses ccache when it is installed, and
# DELAYQ_NO_CCACHE=1 turns it off (a cold build, for measuring).
configure_and_build() {
  local dir="$1"
  shift
  [[ "$dir" = /* ]] || dir="$DELAYQ_ROOT/$dir"
  local targets=()
  while [[ "${1:-}" == --target ]]; do
    targets+=(--target "$2")
    shift 2
  done
  # Ninja: it keeps both cores busy across targets, and its .ninja_log
  # gives each file's compile time.
  set -- -G Ninja "$@"
  # ccache, when installed (DELAYQ_BUILD_DEPS has it; nothing needs it): a
  # second run on the same machine compiles only what changed, in any clone.
  # BASEDIR and NOHASHDIR let a fresh clone in another folder hit what an
  # earlier one compiled (paths in debug information then name that
  # folder). Set here, not when this file is sourced: on a fresh machine
  # ccache is installed after that.
  if [[ -z "${DELAYQ_NO_CCACHE:-}" ]] && command -v ccache >/dev/null; then
    export CCACHE_BASEDIR="$DELAYQ_ROOT" CCACHE_NOHASHDIR=1
    export CCACHE_SLOPPINESS="time_macros,include_file_mtime,include_file_ctime"
    export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}"
    set -- "$@" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  fi
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
  cmake --build "$dir" -j"$(nproc)" "${targets[@]}" || return
}

# delayq_machine <builddir> : the machine and the state of the tree, the
# header every bench/results/<name>.machine.txt starts with (bench.sh,
# bench-e2e.sh). Reads the compiler and flags from <builddir>'s cache.
delayq_machine() {
  local build="$1" cxx flags
  [[ "$build" = /* ]] || build="$DELAYQ_ROOT/$build"
  local type upper compiler
  if [[ -s "$build/CMakeCache.txt" ]]; then
    cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
    type="$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")"
    upper="$(tr '[:lower:]' '[:upper:]' <<<"${type:-Release}")"
    flags="$(sed -n "s/^CMAKE_CXX_FLAGS_${upper}:[A-Z]*=//p" "$build/CMakeCache.txt")"
    compiler="$("$cxx" --version | head -n 1)"
    flags="$flags -std=c++20 (CMAKE_BUILD_TYPE=${type:-Release})"
  else
    # --build DIR with binaries built elsewhere (a copy of another commit's).
    compiler="? ($build has no CMakeCache.txt: the binaries were built elsewhere)"
    flags="?"
  fi
  echo "date:       $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu:        $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  echo "cores:      $(nproc) (nproc)"
  echo "memory:     $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel:     $(uname -sr)"
  echo "compiler:   $compiler"
  echo "flags:      $flags"
  echo "boost:      $(dpkg-query -W -f='${Version}' libboost-dev 2>/dev/null || echo '?')"
  echo "benchmark:  $(dpkg-query -W -f='${Version}' libbenchmark-dev 2>/dev/null || echo '?')"
  echo "commit:     $(git -C "$DELAYQ_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$DELAYQ_ROOT" diff --quiet HEAD -- engine persistence 2>/dev/null || echo ' + uncommitted changes in engine/ or persistence/')"
  echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at start"
}

# ensure_peer_node_modules BUILD PACKAGE : the peer benchmarks' npm packages
# (bench/peers/node/package-lock.json: BullMQ, pg-boss, graphile-worker, pg)
# into BUILD/bench/peers/node, kept while the install matches the lock file
# and holds PACKAGE (a second run asks nothing of the network). Install
# scripts are not run: msgpackr's optional native part falls back to
# JavaScript. pg-boss and graphile-worker declare node >= 22 in "engines";
# they run on Debian's node 20.19+ (require(esm)), and npm warns.
# scripts/bench-peers.sh and scripts/bench-pg-peers.sh share the install.
ensure_peer_node_modules() {
  local node_dir="$1/bench/peers/node" lock_dir="$DELAYQ_ROOT/bench/peers/node" want
  want="$(cat "$lock_dir/package.json" "$lock_dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
  if [[ "$(cat "$node_dir/.installed-from" 2>/dev/null)" != "$want" || ! -d "$node_dir/node_modules/$2" ]]; then
    mkdir -p "$node_dir"
    rm -f "$node_dir/.installed-from"
    cp "$lock_dir/package.json" "$lock_dir/package-lock.json" "$node_dir/"
    (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=error)
    echo "$want" >"$node_dir/.installed-from"
  fi
}

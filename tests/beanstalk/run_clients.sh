#!/usr/bin/env bash
# tests/beanstalk/run_clients.sh - real third-party beanstalkd clients against
# a server this script starts (issue 26; tests/beanstalk/README.md).
#
#   bash tests/beanstalk/run_clients.sh [--clients php,node] [--node-modules DIR]
#        [--name NAME] [--start-timeout S] -- SERVER_CMD [ARGS...]
#
# Starts SERVER_CMD on a free loopback port, waits until that port accepts a
# connection (polled, at most --start-timeout seconds, default 30), runs each
# client's scenario against it one after the other, then stops the server
# (SIGTERM; SIGKILL 15 s later). In SERVER_CMD's arguments:
#   @PORT@   the port the server must speak beanstalk on
#   @TMP@    a fresh temp dir (a SQLite file, a binlog), removed at the end
#   @REDIS@  $DELAYQ_TEST_REDIS (scripts/with-redis.sh) with a fresh key prefix
# Examples (the suite's ctest entries, tests/beanstalk/CMakeLists.txt):
#   run_clients.sh -- beanstalkd -l 127.0.0.1 -p @PORT@
#   run_clients.sh -- build/server/delayq-server --listen 127.0.0.1:0 \
#       --beanstalk-listen 127.0.0.1:@PORT@ --store sqlite:@TMP@/tasks.db
#
# Clients (--clients, default both):
#   php   php/scenario.php: pheanstalk 4.0, Debian's php-pda-pheanstalk, php-cli
#   node  node/scenario.js: node-beanstalk from npm, from --node-modules DIR
#         (default: build/tests/beanstalk/node/node_modules, installed there
#         by npm_ci.sh when missing)
# Each client gets tubes of its own (a unique prefix). Exits 0 when every
# client passed; 1 with the failing client's message (and the server's log)
# otherwise, also when the server died, or reported a sanitizer error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../../scripts/common.sh
source "$root/scripts/common.sh"

clients="php,node"
node_modules=""
name="server"
start_timeout=30
while (($#)); do
  case "$1" in
    --clients) clients="${2:?--clients needs php, node or php,node}"; shift ;;
    --node-modules) node_modules="${2:?--node-modules needs a directory}"; shift ;;
    --name) name="${2:?--name needs a name}"; shift ;;
    --start-timeout) start_timeout="${2:?--start-timeout needs seconds}"; shift ;;
    --) shift; break ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    *) delayq_die "run_clients: unknown argument '$1' (see --help)" ;;
  esac
  shift
done
(($# > 0)) || delayq_die "run_clients: no server command after -- (see --help)"
for c in ${clients//,/ }; do
  [[ "$c" == php || "$c" == node ]] || delayq_die "run_clients: unknown client '$c' (php, node)"
done
want_client() { [[ ",$clients," == *",$1,"* ]]; }

# What each client needs, with how to get it: a missing tool fails the run.
command -v "$1" >/dev/null || delayq_die "run_clients: '$1' not found (beanstalkd: apt-get install beanstalkd; delayq-server: build it)"
if want_client php; then
  command -v php >/dev/null ||
    delayq_die "run_clients: php not found: apt-get install php-cli php-pda-pheanstalk (scripts/common.sh DELAYQ_TEST_DEPS)"
  [[ -f /usr/share/php/Pheanstalk/autoload.php ]] ||
    delayq_die "run_clients: pheanstalk not found: apt-get install php-pda-pheanstalk (scripts/common.sh DELAYQ_TEST_DEPS)"
fi
if want_client node; then
  if [[ -z "$node_modules" ]]; then
    bash "$here/npm_ci.sh" "$root/build/tests/beanstalk/node" >&2
    node_modules="$root/build/tests/beanstalk/node/node_modules"
  fi
  [[ -d "$node_modules/node-beanstalk" ]] ||
    delayq_die "run_clients: no node-beanstalk in $node_modules: run tests/beanstalk/npm_ci.sh $(dirname "$node_modules")"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/delayq-bsclients.XXXXXX")"
server_pid=""
server_log="$work/server.log"

stop_server() {
  [[ -n "$server_pid" ]] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 300; i++)); do  # 15 s: delayq-server drains on SIGTERM
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$server_pid" 2>/dev/null; then
    echo "run_clients: $name still running 15 s after SIGTERM: SIGKILL" >&2
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A sanitizer's report is shown whole (up to 400 lines from its first line:
# where the memory was freed and allocated come after the access), anything
# else by its last 40 lines.
show_log() {
  local first
  first="$(grep -n -m1 -E '^==[0-9]+==(ERROR|WARNING): |^WARNING: ThreadSanitizer|runtime error:' \
    "$server_log" 2>/dev/null | cut -d: -f1 || true)"
  if [[ -n "$first" ]]; then
    echo "--- $name's output (its sanitizer report, from line $first; $*):" >&2
    tail -n "+$first" "$server_log" | head -n 400 >&2 2>/dev/null || true
  else
    echo "--- $name's output (last 40 lines of $*):" >&2
    tail -n 40 "$server_log" >&2 2>/dev/null || true
  fi
  echo "---" >&2
}

# A unique, valid name for both protocols: beanstalkd tubes allow letters,
# digits and -+/;.$_(), delayq types letters, digits and ._:- (not first).
tag="$(tr -c 'A-Za-z0-9_\n' '_' <<<"$name" | cut -c1-24)"
tag="t${tag}.$$.$RANDOM"

redis_uri() {
  [[ -n "${DELAYQ_TEST_REDIS:-}" ]] ||
    delayq_die "run_clients: @REDIS@ needs a Redis server: run under scripts/with-redis.sh (ctest does, in scripts/test.sh)"
  local base="$DELAYQ_TEST_REDIS"
  # A key prefix of our own, 1-64 of [A-Za-z0-9._-], as the server tests do.
  local prefix="bsc_${tag//./_}"
  echo "$base$([[ "$base" == *\?* ]] && echo '&' || echo '?')prefix=${prefix:0:64}"
}

# start: the server on a free port; sets $port and $server_pid. A server that
# exits before it accepts (it lost the race for the port) is tried again on
# another port; one that keeps running without accepting fails the run.
start() {
  local attempt arg args i redis="" deadline
  for attempt in 1 2 3 4 5; do
    port="$(delayq_free_port)"
    mkdir -p "$work/tmp"
    args=()
    for arg in "$@"; do
      arg="${arg//@PORT@/$port}"
      arg="${arg//@TMP@/$work/tmp}"
      if [[ "$arg" == *@REDIS@* ]]; then
        [[ -n "$redis" ]] || redis="$(redis_uri)"
        arg="${arg//@REDIS@/$redis}"
      fi
      args+=("$arg")
    done
    echo "run_clients: starting $name: ${args[*]}" >&2
    # A parent-death signal: if this script is killed (a ctest timeout), the
    # server goes too.
    setpriv --pdeathsig KILL "${args[@]}" >"$server_log" 2>&1 &
    server_pid=$!
    deadline=$((SECONDS + start_timeout))
    while ((SECONDS <= deadline)); do
      if ! kill -0 "$server_pid" 2>/dev/null; then
        break
      fi
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        # Accepting, and still ours (not a stranger who took the port).
        kill -0 "$server_pid" 2>/dev/null && return 0
        break
      fi
      sleep 0.02
    done
    if kill -0 "$server_pid" 2>/dev/null; then
      show_log "a server that did not accept on 127.0.0.1:$port within ${start_timeout} s"
      delayq_die "run_clients: $name did not accept connections on 127.0.0.1:$port within ${start_timeout} s"
    fi
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    if ! grep -qi -e 'in use' "$server_log"; then
      show_log "a server that exited at start"
      delayq_die "run_clients: $name exited before accepting connections"
    fi
    echo "run_clients: port $port was taken (attempt $attempt); another" >&2
  done
  delayq_die "run_clients: $name could not get a free port in 5 attempts"
}

start "$@"
started=$SECONDS
echo "run_clients: $name accepts on 127.0.0.1:$port (pid $server_pid)" >&2

failed=()
for c in php node; do
  want_client "$c" || continue
  t0=$SECONDS
  rc=0
  case "$c" in
    php) timeout --kill-after=5 180 php "$here/php/scenario.php" 127.0.0.1 "$port" "$tag.php" || rc=$? ;;
    node) NODE_PATH="$node_modules" timeout --kill-after=5 180 node "$here/node/scenario.js" 127.0.0.1 "$port" "$tag.node" || rc=$? ;;
  esac
  ((rc == 124)) && echo "run_clients: the $c scenario did not finish within 180 s" >&2
  echo "run_clients: $c scenario against $name: $([[ $rc == 0 ]] && echo passed || echo "FAILED (exit $rc)") in $((SECONDS - t0)) s" >&2
  ((rc == 0)) || failed+=("$c")
  if ! kill -0 "$server_pid" 2>/dev/null; then
    show_log "a server that died during the $c scenario"
    delayq_die "run_clients: $name died during the $c scenario"
  fi
done

stop_server
# A sanitizer build of the server reports on its way out.
if grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'WARNING: ThreadSanitizer' \
  -e 'runtime error:' "$server_log"; then
  show_log "a server whose sanitizer reported an error"
  delayq_die "run_clients: $name's sanitizer reported an error"
fi
if ((${#failed[@]})); then
  show_log "the server the failed clients ran against"
  echo "run_clients: FAILED against $name: ${failed[*]}" >&2
  exit 1
fi
echo "run_clients: every client passed against $name ($((SECONDS - started)) s)"

#!/usr/bin/env bash
# scripts/with-postgres.sh CMD [ARGS...] - runs CMD beside a private PostgreSQL.
#
# Makes a fresh cluster (initdb) in a temp dir and starts Debian's PostgreSQL
# server binaries (/usr/lib/postgresql/N/bin, the newest N) on a free
# loopback port, with a password user `delayq` and a database `delayq`
# (fsync and synchronous_commit on, as shipped; DELAYQ_POSTGRES_FSYNC=off
# below), exports
#   DELAYQ_TEST_POSTGRES=postgres://delayq:PASSWORD@127.0.0.1:PORT/delayq
#   DELAYQ_TEST_POSTGRES_PORT=PORT
#   DELAYQ_TEST_POSTGRES_DIR=<its directory: data/, the log, the options>
#   DELAYQ_TEST_POSTGRES_CTL="bash <this script> --ctl <its directory>"
# runs CMD, then always stops the server and removes the dir. Exits with
# CMD's status. Needs the `postgresql` and `postgresql-client` packages.
#
# PostgreSQL refuses to run as root: as root (CI), the server runs as the
# `postgres` system user the package creates, and the dir is handed to it;
# otherwise as the calling user. Nothing here uses the cluster the package
# made at install (/var/lib/postgresql/N/main) or any service: the package
# is installed with services kept from starting (scripts/common.sh).
#
# $DELAYQ_TEST_POSTGRES_CTL stop|kill|start (an outage test): `stop` stops
# the server at once, as a crash would (pg_ctl stop -m immediate: no
# checkpoint, so the next start replays the WAL), `kill` sends SIGKILL to
# the postmaster and every backend, `start` starts it again on the same
# port and data. The script's exit stops a server `start` started too.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

# The newest server binaries Debian installed.
pg_bin() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$d" && -x "$d/postgres" && -x "$d/initdb" && -x "$d/pg_ctl" ]] ||
    { echo "with-postgres: no PostgreSQL server here; install it with: apt-get install postgresql" >&2; exit 1; }
  command -v psql >/dev/null ||
    { echo "with-postgres: psql not found; install it with: apt-get install postgresql-client" >&2; exit 1; }
  echo "$d"
}

# as_owner CMD... : runs CMD as the user that owns the server's files.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
  else
    "$@"
  fi
}

# The server's settings, one place for the first start and for `--ctl start`.
# DELAYQ_POSTGRES_FSYNC=off (scripts/test.sh sets it) turns fsync off: COMMIT
# still comes after the WAL is written, so a killed server (the outage
# tests) or a killed client (the crash tests) loses nothing; only an OS crash
# could, which no test makes. It keeps a loaded disk's fsyncs out of the
# tests' time. The benchmarks keep it on, the server's default.
server_args() {
  local dir="$1" port="$2"
  echo "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir" \
    "-c max_connections=300 -c logging_collector=off -c log_min_messages=warning" \
    "-c fsync=${DELAYQ_POSTGRES_FSYNC:-on}"
}

# Our server answers, not a stranger on the same port: compare data dirs.
ours() {
  local dir="$1" port="$2" served
  served="$(PGPASSWORD="$(cat "$dir/password")" PGCONNECT_TIMEOUT=2 \
    psql -X -q -t -A -h 127.0.0.1 -p "$port" -U delayq -d postgres \
    -c 'SHOW data_directory' 2>/dev/null || true)"
  [[ "$served" == "$dir/data" ]]
}

wait_ready() {
  local dir="$1" port="$2" i
  for ((i = 0; i < 300; i++)); do  # up to 30 s (a WAL replay after a crash)
    ours "$dir" "$port" && return 0
    sleep 0.1
  done
  return 1
}

# --ctl DIR stop|kill|start : an outage, for the tests (see the top).
if [[ "${1:-}" == --ctl ]]; then
  (($# == 3)) || { echo "usage: $0 --ctl DIR stop|kill|start" >&2; exit 2; }
  dir="$2"
  bin="$(pg_bin)"
  port="$(cat "$dir/port")"
  case "$3" in
    stop) as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null ;;
    kill)
      pid="$(head -n 1 "$dir/data/postmaster.pid")"
      # The postmaster's children (the backends, the WAL writer, ...) from
      # /proc (procps may not be installed), then the postmaster.
      kids=()
      for stat in /proc/[0-9]*/stat; do
        read -r -a fields <"$stat" 2>/dev/null || continue
        [[ "${fields[3]:-}" == "$pid" ]] && kids+=("${fields[0]}")
      done
      kill -KILL "$pid" "${kids[@]}" 2>/dev/null || true
      for p in "$pid" "${kids[@]}"; do
        for ((i = 0; i < 100; i++)); do
          kill -0 "$p" 2>/dev/null || break
          sleep 0.1
        done
      done
      ;;
    start)
      # shellcheck disable=SC2046
      as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
        -o "$(server_args "$dir" "$port")" start >/dev/null
      wait_ready "$dir" "$port" || { echo "with-postgres: restart failed" >&2; tail -n 20 "$dir/postgres.log" >&2; exit 1; }
      ;;
    *) echo "usage: $0 --ctl DIR stop|kill|start" >&2; exit 2 ;;
  esac
  exit 0
fi

if (($# == 0)); then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi
bin="$(pg_bin)"

dir="$(mktemp -d "${TMPDIR:-/tmp}/delayq-postgres.XXXXXX")"
pid=""
stop_postgres() {
  # Whoever started it last (this script, or a test's `--ctl start`).
  if [[ -s "$dir/data/postmaster.pid" ]]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 20 stop >/dev/null 2>&1 ||
      as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 20 stop >/dev/null 2>&1 || true
  fi
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap stop_postgres EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

password="$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$password" >"$dir/password"
: >"$dir/postgres.log"
if [[ "$(id -u)" == 0 ]]; then
  id postgres >/dev/null 2>&1 ||
    { echo "with-postgres: no 'postgres' user to run the server as (apt-get install postgresql makes it)" >&2; exit 1; }
  chown -R postgres:postgres "$dir"
fi
chmod 700 "$dir"
# C locale (byte order, as delayq compares ids), UTF-8, password logins over
# TCP; --no-sync: the fresh files need no fsync (the server's own writes do).
as_owner "$bin/initdb" -D "$dir/data" -U delayq --pwfile="$dir/password" \
  --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale --no-sync \
  >"$dir/initdb.log" 2>&1 ||
  { echo "with-postgres: initdb failed:" >&2; cat "$dir/initdb.log" >&2; exit 1; }

started=0
for attempt in 1 2 3 4 5; do
  port="$(delayq_free_port)"
  echo "$port" >"$dir/port"
  # In the foreground, as our child, under a parent-death signal: when this
  # script is killed (a ctest timeout sends SIGKILL), the server dies too,
  # and its backends follow it.
  # shellcheck disable=SC2046
  if [[ "$(id -u)" == 0 ]]; then
    setpriv --pdeathsig KILL --reuid=postgres --regid=postgres --init-groups -- \
      "$bin/postgres" -D "$dir/data" $(server_args "$dir" "$port") >"$dir/postgres.log" 2>&1 &
  else
    setpriv --pdeathsig KILL -- \
      "$bin/postgres" -D "$dir/data" $(server_args "$dir" "$port") >"$dir/postgres.log" 2>&1 &
  fi
  pid=$!
  for ((i = 0; i < 200; i++)); do  # up to 20 s
    if ours "$dir" "$port"; then
      started=1
      break
    fi
    # Lost the port race, or failed outright: stop waiting.
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  ((started)) && break
  echo "with-postgres: postgres did not start on port $port (attempt $attempt); log tail:" >&2
  tail -n 20 "$dir/postgres.log" >&2 2>/dev/null || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
done
if ((!started)); then
  echo "with-postgres: giving up: could not start postgres" >&2
  exit 1
fi
disown "$pid"  # no "Killed" notice when a test's `--ctl kill` ends it
PGPASSWORD="$password" psql -X -q -h 127.0.0.1 -p "$port" -U delayq -d postgres \
  -c 'CREATE DATABASE delayq' >/dev/null

export DELAYQ_TEST_POSTGRES="postgres://delayq:$password@127.0.0.1:$port/delayq"
export DELAYQ_TEST_POSTGRES_PORT="$port"
export DELAYQ_TEST_POSTGRES_DIR="$dir"
export DELAYQ_TEST_POSTGRES_CTL="bash $self --ctl $dir"
echo "with-postgres: postgres $pid on postgres://delayq:***@127.0.0.1:$port/delayq (data in $dir)" >&2

status=0
"$@" || status=$?
exit "$status"

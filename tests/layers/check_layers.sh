#!/usr/bin/env bash
# tests/layers/check_layers.sh - the include graph points one way.
#
#   bash tests/layers/check_layers.sh [ROOT]         check (exit 1 on a breach)
#   bash tests/layers/check_layers.sh --edges [ROOT] print the edges found
#
# Every quoted #include of the sources below is resolved to the file it names
# (next to the including file first, then under each include root of the
# tree), and both files are put into a layer by their path. An include from
# layer A into layer B is allowed when B is A itself or B is in ALLOWED[A];
# anything else is reported with its file and line, and the test fails.
# Angle includes are checked only for the third-party headers no engine file
# may name (house style: the engine's users never see hiredis, SQLite or
# cereal).
#
# The server's part of the table is the map of docs/server.md ("Source
# map"); the Redis connection's rule is in docs/persistence.md
# ("Connections, timeouts, reconnects"). Change a rule there and here
# together, and only to add an arrow that still points down. A new folder of
# server/src is a layer of its own that may include nothing and that no
# other layer may include until it is put on the map here.
set -euo pipefail

mode=check
if [[ "${1:-}" == --edges ]]; then
  mode=edges
  shift
fi
root="$(cd "${1:-"$(dirname "${BASH_SOURCE[0]}")/../.."}" && pwd)"

# Sets `layer` to the layer of a path relative to the root (longest prefix
# first), or to empty for a file outside every layer. No subshell: this runs
# for every include of the tree.
layer_of() {
  case "$1" in
    engine/include/delayq/*) layer=engine/include ;;
    engine/src/detail/*) layer=engine/src/detail ;;
    engine/src/*) layer=engine/src ;;
    persistence/include/delayq/*) layer=persistence/include ;;
    persistence/common/*) layer=persistence/common ;;
    persistence/redis/*) layer=persistence/redis ;;
    persistence/roles/*) layer=persistence/roles ;;
    persistence/postgres/*) layer=persistence/postgres ;;
    persistence/sqlite/*) layer=persistence/sqlite ;;
    umbrella/include/*) layer=umbrella ;;
    server/src/*/*)
      layer="${1#server/src/}"
      layer="server/${layer%%/*}"
      ;;
    server/src/*) layer=server/app ;;
    *) layer="" ;;
  esac
}

# What each layer may include besides itself. A layer missing here may
# include nothing but itself.
declare -A ALLOWED=(
  # The engine's public headers name only each other.
  [engine/include]=""
  [engine/src]="engine/include engine/src/detail"
  [engine/src/detail]="engine/include"
  # The stores see the engine through its public headers only: never its
  # detail/, never the server. The backends do not know each other.
  [persistence/include]="engine/include"
  [persistence/common]="engine/include persistence/include"
  # What the backends built from role objects share (role_store, the lease
  # table's bookkeeping, the batches of one-kind calls, a dead letter read
  # back, the strand a write pipeline runs on): it knows no backend.
  [persistence/roles]="engine/include persistence/include"
  [persistence/redis]="engine/include persistence/include persistence/roles"
  [persistence/sqlite]="engine/include persistence/include persistence/roles"
  [persistence/postgres]="engine/include persistence/include persistence/roles"
  [umbrella]="engine/include persistence/include"
  # server/src: wire/ (the formats) at the bottom, api/ (the routes) at the
  # top, server_app.cpp and main.cpp above all of them.
  [server/wire]="engine/include"
  [server/security]=""
  [server/io]=""
  [server/http]="engine/include server/io"
  [server/ops]="engine/include"
  [server/web]="server/http"
  [server/push]="engine/include server/wire server/http server/security"
  [server/pull]="engine/include server/wire server/security"
  [server/cluster]="engine/include server/wire server/http server/security"
  [server/beanstalk]="engine/include server/wire server/security server/pull server/io"
  [server/api]="engine/include server/wire server/http server/io server/security server/ops server/web
                server/push server/pull server/cluster"
  [server/app]="engine/include persistence/include umbrella server/wire server/http server/io
                server/security server/ops server/web server/push server/pull server/cluster
                server/api server/beanstalk"
)

# Files that may include only these files of their own layer: the Redis
# connection is plain RESP and knows none of the store's keys, scripts or
# routing (docs/persistence.md, "Connections, timeouts, reconnects"); its
# link check (a side dial of a late call's server) is as plain.
declare -A OWN_LAYER_ONLY=(
  [persistence/redis/connection.hpp]=""
  [persistence/redis/connection.cpp]="persistence/redis/connection.hpp persistence/redis/link_probe.hpp"
  [persistence/redis/link_probe.hpp]="persistence/redis/connection.hpp"
  [persistence/redis/link_probe.cpp]="persistence/redis/link_probe.hpp"
)

# Third-party headers (angle includes) a layer must not name.
declare -A FORBIDDEN_SYSTEM=(
  [engine/include]="hiredis/ sqlite3.h SQLiteCpp/ cereal/ libpq-fe.h"
  [engine/src]="hiredis/ sqlite3.h SQLiteCpp/ cereal/ libpq-fe.h"
  [engine/src/detail]="hiredis/ sqlite3.h SQLiteCpp/ cereal/ libpq-fe.h"
  [persistence/include]="hiredis/ sqlite3.h SQLiteCpp/ cereal/ libpq-fe.h"
)

# Where a quoted include may be found, after the including file's folder.
include_roots=(engine/include engine/src persistence/include umbrella/include server/src)

allowed() {  # from to
  [[ "$1" == "$2" ]] && return 0
  local a
  for a in ${ALLOWED[$1]:-}; do
    [[ "$a" == "$2" ]] && return 0
  done
  return 1
}

cd "$root"
mapfile -t files < <(find engine persistence umbrella server/src \
  \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' \) -type f 2>/dev/null | LC_ALL=C sort)
((${#files[@]} > 0)) || { echo "check_layers: no sources under $root" >&2; exit 2; }

breaches=0
checked=0
declare -A edges=()
# One grep for the whole tree: FILE:LINE:TEXT per include.
while IFS= read -r hit; do
  f="${hit%%:*}"
  rest="${hit#*:}"
  line="${rest%%:*}"
  text="${rest#*:}"
  layer_of "$f"
  from="$layer"
  [[ -n "$from" ]] || continue
  if [[ "$text" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
    name="${BASH_REMATCH[1]}"
    target=""
    if [[ -f "${f%/*}/$name" ]]; then
      target="${f%/*}/$name"
    else
      for r in "${include_roots[@]}"; do
        if [[ -f "$r/$name" ]]; then
          target="$r/$name"
          break
        fi
      done
    fi
    # A generated or missing file: the compiler has the last word on it.
    [[ -n "$target" ]] || continue
    # "../x.hpp": folded by hand (realpath would cost a process per include).
    while [[ "$target" =~ ^(.*/)?[^/]+/\.\./(.*)$ ]]; do
      target="${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
    done
    layer_of "$target"
    to="$layer"
    [[ -n "$to" ]] || continue
    checked=$((checked + 1))
    [[ "$from" == "$to" ]] || edges["$from -> $to"]=1
    if ! allowed "$from" "$to"; then
      echo "$f:$line: $from must not include $to (\"$name\")" >&2
      breaches=$((breaches + 1))
    elif [[ "$from" == "$to" && -n "${OWN_LAYER_ONLY[$f]+set}" &&
            " ${OWN_LAYER_ONLY[$f]} " != *" $target "* ]]; then
      echo "$f:$line: $f must not include $target" >&2
      breaches=$((breaches + 1))
    fi
  elif [[ "$text" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<([^\>]+)\> ]]; then
    name="${BASH_REMATCH[1]}"
    for bad in ${FORBIDDEN_SYSTEM[$from]:-}; do
      if [[ "$name" == "$bad"* ]]; then
        echo "$f:$line: $from must not include the third-party header <$name>" >&2
        breaches=$((breaches + 1))
      fi
    done
  fi
done < <(grep -n -H '^[[:space:]]*#[[:space:]]*include' "${files[@]}" || true)

if [[ "$mode" == edges ]]; then
  printf '%s\n' "${!edges[@]}" | LC_ALL=C sort
  exit 0
fi
if ((breaches > 0)); then
  echo "check_layers: $breaches include(s) against the layer map (tests/layers/check_layers.sh)" >&2
  exit 1
fi
echo "check_layers: ${#files[@]} files, $checked includes between layers' files, all allowed"

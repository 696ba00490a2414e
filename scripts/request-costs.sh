#!/usr/bin/env bash
# scripts/request-costs.sh [--rounds N] [--requests R] [--store memory|sqlite-normal]
#                          [--instructions [--keep DIR]] BIN [BIN...]
#
# What one request costs a delayq-server on `memory:` (or, with --store
# sqlite-normal, on a fresh SQLite file a run with synchronous=normal, the
# store's own work counted with the server's), one request at a time
# on one connection: heap allocations (malloc calls, counted by a perf
# uprobe on libc's malloc) and server CPU time (perf stat task-clock of the
# server process, in runs without the probe, which slows each call), for
# three requests (bench/peers/request_costs.py): a beanstalk put, a
# beanstalk reserve + delete, and an HTTP POST /v1/tasks. Each binary (say,
# two commits' builds) runs on a fresh server per round, the binaries in
# turn; R requests (default 10000) a run, N rounds (default 3) for the CPU
# time, one for the allocations (the same each run). Prints a line per run
# and, per request kind, allocations and the median CPU per request of each
# binary, with the ratio of each to the first. The window measured is the
# R requests alone: the client connects (and puts the jobs a cycle takes)
# before it. --instructions adds, per binary and request, the user-space
# instructions a request runs (valgrind's callgrind: the counts zeroed
# before the window and dumped after it), which unlike times hardly move
# with the machine's load; the kernel's part (the system calls) is not in
# them. --keep DIR keeps each window's callgrind file there, as
# KIND-I.callgrind (I: the binary's place in the list, from 0), for
# `callgrind_annotate --inclusive=yes FILE`. Needs root (uprobes). Not run
# by CI; docs/benchmarks.md quotes what it printed.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

rounds=3
requests=10000
store=memory
instructions=""
keep=""
while (($#)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --store) store="$2"; shift 2 ;;
    --instructions) instructions=1; shift ;;
    --keep) keep="$2"; shift 2 ;;
    *) break ;;
  esac
done
(($# >= 1)) || delayq_die "usage: $0 [--rounds N] [--requests R] [--store memory|sqlite-normal] [--instructions [--keep DIR]] BIN [BIN...]"
case "$store" in
  memory | sqlite-normal) ;;
  *) delayq_die "--store: memory or sqlite-normal, not '$store'" ;;
esac
[[ -z "$keep" || -n "$instructions" ]] || delayq_die "--keep keeps callgrind files: it needs --instructions"
ensure_packages python3 linux-perf
[[ -z "$instructions" ]] || ensure_packages valgrind
[[ -z "$keep" ]] || mkdir -p "$keep"
bins=()
labels=("$@")
for b in "$@"; do bins+=("$(realpath "$b")"); done

work=$(mktemp -d)
pid=""
client=""
cleanup() {
  local status=$?
  [[ -z "$client" ]] || kill "$client" 2>/dev/null || true
  [[ -z "$pid" ]] || kill "$pid" 2>/dev/null || true
  if ((status != 0)) && [[ -s "$work/server.log" ]]; then
    echo "the server's log, last lines:" >&2
    tail -n 20 "$work/server.log" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT

libc=$(ldd "${bins[0]}" | awk '/libc\.so\.6/ {print $3}')
[[ -n "$libc" ]] || delayq_die "no libc.so.6 in ldd ${bins[0]}"
perf probe -l 2>/dev/null | grep -q 'probe_libc:malloc' ||
  perf probe -q -x "$libc" malloc || delayq_die "perf probe on $libc malloc failed (root, uprobes)"

port=$(delayq_free_port)
beanstalk_port=$(delayq_free_port)
while [[ $beanstalk_port == "$port" ]]; do beanstalk_port=$(delayq_free_port); done
client_py="$DELAYQ_ROOT/bench/peers/request_costs.py"

# run BIN KIND EVENT: one measured run; sets run_seconds, and run_count: the
# event's total over the R requests.
run() {
  local bin=$1 kind=$2 event=$3 target line
  local -a under=()
  # Under callgrind the counts go to $work/cg.PID, the window's to cg.PID.1.
  [[ $event != instructions ]] || under=(valgrind --tool=callgrind -q "--callgrind-out-file=$work/cg.%p")
  local spec=memory:
  if [[ $store == sqlite-normal ]]; then
    rm -f "$work"/store.db*
    spec="sqlite:$work/store.db?synchronous=normal"
  fi
  "${under[@]}" "$bin" --listen "127.0.0.1:$port" --store "$spec" \
    --beanstalk-listen "127.0.0.1:$beanstalk_port" >"$work/server.log" 2>&1 &
  pid=$!
  target=$beanstalk_port
  [[ $kind == add ]] && target=$port
  local up=""
  for _ in $(seq 1200); do
    (echo >"/dev/tcp/127.0.0.1/$target") 2>/dev/null && up=1 && break
    kill -0 "$pid" 2>/dev/null || delayq_die "$kind: the server exited at start"
    sleep 0.05
  done
  [[ -n "$up" ]] || delayq_die "$kind: the server did not listen on $target within 60 s"
  rm -f "$work/in" "$work/out"
  mkfifo "$work/in" "$work/out"
  python3 -B "$client_py" "$kind" "$target" "$requests" <"$work/in" >"$work/out" &
  client=$!
  exec 5>"$work/in" 6<"$work/out"
  read -r line <&6 || line="(nothing: it exited)"
  [[ $line == ready ]] || delayq_die "$kind: the client said '$line'"
  if [[ $event == instructions ]]; then
    callgrind_control -z "$pid" >/dev/null
    echo go >&5
    read -r line <&6 || delayq_die "$kind: the client exited in the window"
    echo "$line" >"$work/done"
    callgrind_control -d "$pid" >/dev/null
    for _ in $(seq 600); do
      [[ -s "$work/cg.$pid.1" ]] && grep -q '^totals:' "$work/cg.$pid.1" && break
      sleep 0.1
    done
    echo "$(awk '/^totals:/ {print $2}' "$work/cg.$pid.1"),,instructions" >"$work/stat"
  else
    # shellcheck disable=SC2016 # $1 and $line are the inner shell's
    perf stat -x, -e "$event" -p "$pid" -o "$work/stat" -- \
      bash -c 'echo go >&5; read -r line <&6; echo "$line" >"$1"' _ "$work/done"
  fi
  exec 5>&- 6<&-
  wait "$client" || delayq_die "$kind: the client failed"
  client=""
  kill -0 "$pid" 2>/dev/null || delayq_die "$kind: the server died in the window"
  kill "$pid"
  wait "$pid" || true
  run_pid=$pid
  pid=""
  run_seconds=$(awk '{print $2}' "$work/done")
  run_count=$(awk -F, -v e="$event" 'index($3, e) == 1 {print $1; exit}' "$work/stat")
  [[ -n "$run_count" ]] || delayq_die "$kind: no $event count in $work/stat"
}

echo "store: $store; $requests requests a run; $(date -u '+%Y-%m-%d %H:%M UTC')"
declare -A cpu allocs rate instr
for kind in put cycle add; do
  for i in "${!bins[@]}"; do
    run "${bins[$i]}" "$kind" probe_libc:malloc
    allocs[$kind,$i]=$(awk -v c="$run_count" -v n="$requests" 'BEGIN {printf "%.1f", c / n}')
    echo "$kind ${labels[$i]}: ${allocs[$kind,$i]} allocations a request"
  done
  if [[ -n "$instructions" ]]; then
    for i in "${!bins[@]}"; do
      run "${bins[$i]}" "$kind" instructions
      [[ -z "$keep" ]] || cp "$work/cg.$run_pid.1" "$keep/$kind-$i.callgrind"
      instr[$kind,$i]=$(awk -v c="$run_count" -v n="$requests" 'BEGIN {printf "%.0f", c / n}')
      echo "$kind ${labels[$i]}: ${instr[$kind,$i]} user-space instructions a request"
    done
  fi
  for r in $(seq "$rounds"); do
    for i in "${!bins[@]}"; do
      run "${bins[$i]}" "$kind" task-clock
      us=$(awk -v c="$run_count" -v n="$requests" 'BEGIN {printf "%.2f", c * 1000 / n}')
      per_s=$(awk -v s="$run_seconds" -v n="$requests" 'BEGIN {printf "%.0f", n / s}')
      cpu[$kind,$i]="${cpu[$kind,$i]:-} $us"
      rate[$kind,$i]="${rate[$kind,$i]:-} $per_s"
      echo "round $r $kind ${labels[$i]}: $us us of server CPU a request, $per_s requests/s"
    done
  done
done

echo
echo "| request | binary | allocations | instructions | server CPU µs (median) | requests/s (median) | CPU ÷ first |"
echo "|---|---|---:|---:|---:|---:|---:|"
for kind in put cycle add; do
  # shellcheck disable=SC2086
  first=$(delayq_median ${cpu[$kind,0]})
  for i in "${!bins[@]}"; do
    # shellcheck disable=SC2086
    m=$(delayq_median ${cpu[$kind,$i]})
    # shellcheck disable=SC2086
    q=$(delayq_median ${rate[$kind,$i]})
    echo "| $kind | ${labels[$i]} | ${allocs[$kind,$i]} | ${instr[$kind,$i]:--} | $m | $q | $(awk -v a="$first" -v b="$m" 'BEGIN {printf "%.2f", b / a}')x |"
  done
done

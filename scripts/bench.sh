#!/usr/bin/env bash
# scripts/bench.sh - the benchmark run behind docs/benchmarks.md.
#
#   bash scripts/bench.sh [--quick] [--no-full] [--reps N] [--min-time S] [--only micro|engine|latency|report]
#
# Installs the Debian packages the build needs (scripts/common.sh), builds
# build-bench/ (Release, benchmarks on, no tests or examples), runs the micro
# benchmarks (N = 1e3 .. 1e7), the engine API benchmark (a plain program:
# engine against one Asio timer per task at 1e3 .. 1e7 pending, 1 and 4
# threads, memory, firing) and the memory latency benchmark, and writes to
# bench/results/:
#   micro.json, latency.json   Google Benchmark's JSON, every repetition
#   micro.tsv, latency.tsv     one row per benchmark: median and cv
#   engine.json                delayq-bench-engine: config, every round, medians,
#                              the target check
#   engine.tsv                 one row per figure: median, min, max of the rounds
#   engine-tables.md           its tables and target check (also on stdout)
#   tables.md                  the micro and latency tables and their target check
#   <name>.machine.txt         CPU, cores, compiler, flags, load, commit of each run
#   micro-<op>.png             ns/op against N, log-log, one line per structure
#   micro-wheel.png            the wheel's four operations
#   engine-ns-per-op.png       engine against Asio timers, ns/op against pending
#
#   --quick       tiny sizes, one repetition, into bench/results/quick/: checks
#                 the pipeline in seconds
#   --no-full     stop at N = 1e6 (the full run also does 1e7, needs ~4 GB)
#   --reps N      repetitions per micro/latency benchmark (default 5); tables
#                 use the median (the engine benchmark has its own rounds: 9)
#   --min-time S  minimum timed seconds per repetition (default 0.5)
#   --only NAME   run only the micro, engine or latency benchmark, or (report) none;
#                 the tables and plots are made from the files in bench/results/
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

quick=0
full=1
reps=5
min_time=0.5
only=""
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --no-full) full=0 ;;
    --reps) reps="${2:?--reps needs a number}"; shift ;;
    --min-time) min_time="${2:?--min-time needs seconds}"; shift ;;
    --only) only="${2:?--only needs micro, engine, latency or report}"; shift ;;
    -h | --help) sed -n '2,31p' "$0"; exit 0 ;;
    *) delayq_die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
case "$only" in
  "" | micro | engine | latency | report) ;;
  *) delayq_die "--only takes micro, engine, latency or report, not '$only'" ;;
esac

ensure_packages "${DELAYQ_TEST_DEPS[@]}"

build="build-bench"
configure_and_build "$build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DDELAYQ_BUILD_BENCH=ON \
  -DDELAYQ_BUILD_TESTS=OFF \
  -DDELAYQ_BUILD_EXAMPLES=OFF \
  -DDELAYQ_INSTALL=OFF

# A quick run writes beside the real results, never over them.
out=bench/results
mode=()
if ((quick)); then
  out=bench/results/quick
  mode=(--quick)
  reps=1
elif ((full)); then
  mode=(--full)
fi
mkdir -p "$out"
rm -rf "$out/plot-data"

# ------------------------------------------------------------ the runs
machine() { delayq_machine "$build"; }  # scripts/common.sh
gbench=(
  --benchmark_repetitions="$reps"
  --benchmark_min_time="$min_time"
  --benchmark_display_aggregates_only=true
  --benchmark_out_format=json
)
run() {  # run <name> <binary> : writes $out/<name>.json and $out/<name>.machine.txt
  [[ -z "$only" || "$only" == "$1" ]] || return 0
  local cmd=("$2" "${mode[@]}" "${gbench[@]}" --benchmark_out="$out/$1.json")
  machine >"$out/$1.machine.txt"
  echo "command:    ${cmd[*]}" >>"$out/$1.machine.txt"
  echo
  cat "$out/$1.machine.txt"
  "${cmd[@]}"
  echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end" >>"$out/$1.machine.txt"
}
# delayq-bench-engine is a plain program (it forks fresh processes for its
# scenarios): its own flags, its own files.
run_engine() {
  [[ -z "$only" || "$only" == engine ]] || return 0
  local cmd=("$build/bench/engine/delayq-bench-engine" "${mode[@]}" --out "$out/engine.json"
    --tsv "$out/engine.tsv" --tables "$out/engine-tables.md")
  machine >"$out/engine.machine.txt"
  echo "command:    ${cmd[*]}" >>"$out/engine.machine.txt"
  echo
  cat "$out/engine.machine.txt"
  "${cmd[@]}"
  echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end" >>"$out/engine.machine.txt"
}
run micro "$build/bench/micro/delayq-bench-micro"
run_engine
run latency "$build/bench/latency/delayq-bench-latency"

# ------------------------------------------------------------ tables and plots
for name in micro latency; do
  [[ -f "$out/$name.json" ]] || delayq_die "no $out/$name.json: run it first (without --only)"
  awk -f bench/report/medians.awk "$out/$name.json" >"$out/$name.tsv"
done
[[ -f "$out/engine.tsv" ]] || delayq_die "no $out/engine.tsv: run it first (without --only)"
task_size="$(sed -n 's/.*"delayq.sizeof_task": "\([0-9]*\)".*/\1/p' "$out/micro.json")"
awk -v task_size="${task_size:-112}" -f bench/report/tables.awk \
  "$out/micro.tsv" "$out/latency.tsv" >"$out/tables.md"

mkdir -p "$out/plot-data"
awk -F'\t' -v dir="$out/plot-data" 'NR > 1 && $9 != "" {
    print $4, $9 > (dir "/" $3 "." $2 ".dat")
  }' "$out/micro.tsv"
awk -F'\t' -v dir="$out/plot-data" '$1 == "ops" && $2 ~ /^(schedule|cancel|reschedule)$/ {
    print $4, $7 > (dir "/engine." $2 "." $3 ".dat")
  }' "$out/engine.tsv"
gnuplot -e "dir='$out'" bench/report/plots.gp
gnuplot -e "dir='$out'" bench/report/engine-plots.gp

echo
cat "$out/tables.md"
echo
[[ -f "$out/engine-tables.md" ]] && cat "$out/engine-tables.md"
echo
echo "results in $out/:" "$(cd "$out" && printf "%s " *.json *.tsv *.md *.png *.txt)"

#!/usr/bin/env bash
# scripts/bench-e2e.sh - the end-to-end benchmark behind docs/benchmarks.md.
#
#   bash scripts/bench-e2e.sh [--quick] [--only-report] [-- DELAYQ-BENCH ARGS...]
#
# On a fresh Debian 12 machine, as root: installs the packages the build, the
# Redis server and the plots need (scripts/common.sh: ensure_packages, which
# includes redis-server and gnuplot-nox), builds build-bench/ (the configure
# of scripts/bench.sh: Release, benchmarks on), starts a private redis-server
# on a free loopback port (scripts/with-redis.sh: AOF on, appendfsync always)
# and runs build-bench/bench/e2e/delayq-bench full size (about 6 minutes on 2
# cores). Writes to bench/results/:
#   e2e.json            every figure, the config, the lateness percentiles 1..100
#   e2e.machine.txt     CPU, cores, compiler, flags, load, commit, the command
#   e2e-tables.md       the Markdown tables (also printed)
#   e2e-lateness-t1.png, e2e-lateness-t8.png
#                       lateness CDF per design (log x), 1 and 8 scheduling threads
#   e2e-throughput.png  durable schedule throughput per design and thread count
#   e2e-plot-data/      the plots' inputs (not kept in git)
#
#   --quick        tiny sizes (seconds), into bench/results/quick/: checks the pipeline
#   --only-report  no run: redraw the plots from <out>/e2e-plot-data/
#   -- ARGS        passed to delayq-bench (e.g. -- durable --durable-tasks 20000)
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DELAYQ_ROOT"

quick=0
report_only=0
extra=()
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --only-report) report_only=1 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    *) delayq_die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

out=bench/results
mode=()
if ((quick)); then
  out=bench/results/quick
  mode=(--quick)
fi
mkdir -p "$out"

if ((!report_only)); then
  ensure_packages "${DELAYQ_TEST_DEPS[@]}"
  build="build-bench"
  configure_and_build "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DDELAYQ_BUILD_BENCH=ON \
    -DDELAYQ_BUILD_TESTS=OFF \
    -DDELAYQ_BUILD_EXAMPLES=OFF \
    -DDELAYQ_INSTALL=OFF

  rm -rf "$out/e2e-plot-data"
  cmd=("$build/bench/e2e/delayq-bench" "${mode[@]}"
    --out "$out/e2e.json" --tables "$out/e2e-tables.md" --plot-data "$out/e2e-plot-data"
    ${extra[@]+"${extra[@]}"})
  {
    delayq_machine "$build"
    echo "redis:      $(redis-server --version | head -n 1)"
    echo "command:    scripts/with-redis.sh ${cmd[*]}"
  } >"$out/e2e.machine.txt"
  echo
  cat "$out/e2e.machine.txt"
  # with-redis.sh exports DELAYQ_TEST_REDIS, which delayq-bench uses by default.
  scripts/with-redis.sh "${cmd[@]}"
  echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end" >>"$out/e2e.machine.txt"
fi

[[ -d "$out/e2e-plot-data" ]] || delayq_die "no $out/e2e-plot-data: run without --only-report first"
gnuplot -e "dir='$out'" bench/report/e2e-plots.gp
echo
echo "results in $out/:" "$(cd "$out" && printf "%s " e2e.json e2e.machine.txt e2e-tables.md e2e-*.png)"

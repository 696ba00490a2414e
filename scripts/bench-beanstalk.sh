#!/usr/bin/env bash
# scripts/bench-beanstalk.sh - delayq-server's beanstalk listener against
# beanstalkd 1.12, one protocol, one client, one run (issue 26, "Measured
# against beanstalkd").
#
#   bash scripts/bench-beanstalk.sh [--quick] [--build DIR] [--no-build] [--out DIR]
#                                   [--beanstalkd-only] [--only-report]
#                                   [-- DELAYQ-BENCH-SERVER ARGS...]
#
# The same load client as scripts/bench-server.sh (bench/server,
# delayq-bench-server), but every target is spoken to in beanstalkd's text
# protocol: delayq-server through --beanstalk-listen, not HTTP. Installs what
# scripts/common.sh lists, builds delayq-server and delayq-bench-server in
# build/ (DELAYQ_MAIN_BUILD_ARGS), then starts on free loopback ports, each
# with a temp dir:
#   beanstalkd-fsync   beanstalkd -b DIR -f 0 (binlog, fsync after every write)
#   delayq-sqlite      delayq-server --store sqlite:DIR/x.db (synchronous=full)
#   delayq-redis       delayq-server --store redis://... on a private
#                      redis-server with appendonly yes, appendfsync always
#                      (scripts/with-redis.sh)
#   beanstalkd-mem     beanstalkd without -b (nothing on disk)
#   delayq-memory      delayq-server --store memory:
# (delayq-server with its defaults: --tick 1 --workers 2 --io-threads auto, and
# --beanstalk-listen 127.0.0.1:PORT), runs delayq-bench-server against all
# five in one run (rounds alternate between them) and stops them. It measures
# puts/s and put+reserve+delete cycles/s with 1 and 32 connections, and the
# lateness of jobs due 1 s after their put. Pairs of equal durability:
# delayq-sqlite and delayq-redis against beanstalkd-fsync, delayq-memory
# against beanstalkd-mem. Writes to bench/results/ (about 3 minutes; run it on
# a quiet machine):
#   beanstalk.json             every round of every figure, the config, verdicts
#   beanstalk.machine.txt      CPU, cores, compiler, flags, load, commit, versions, command
#   beanstalk-tables.md        the tables and the verdicts (also printed)
#   beanstalk-throughput.png   put and cycle throughput per system (log scale)
#   beanstalk-plot-data.tsv    the plot's input
#
#   --quick            tiny sizes (~15 s), into bench/results/quick/: checks the pipeline
#   --build DIR        the build directory (default build/)
#   --no-build         use DIR as it is: no package install, no configure, no build
#   --out DIR          where the results go (default bench/results, or .../quick)
#   --beanstalkd-only  the two beanstalkd targets alone, no pairs. Also what
#                      happens, with a note, when delayq-server has no
#                      --beanstalk-listen (before issue 26's listener)
#   --only-report      no run: redraw the plot from <out>/beanstalk-plot-data.tsv
#   -- ARGS            passed to delayq-bench-server (e.g. -- --rounds 5 --seconds 3)
set -euo pipefail

# The run is scripts/bench-server.sh's: the same servers, client, checks and
# output, with --beanstalk (the protocol, the file names and this header).
exec bash "$(dirname "${BASH_SOURCE[0]}")/bench-server.sh" --beanstalk "$@"

#!/usr/bin/env bash
# scripts/pg-churn.sh [--seconds S] [--rate R] [--delay-ms D] [--no-long-tx]
#                     [--variants "plain tuned rotate rotate@50"] [--build DIR] [--out DIR]
#
# The PostgreSQL store's table bloat under churn (issue 34): for each variant,
# delayq-bench-pg-churn on a private PostgreSQL (scripts/with-postgres.sh, one
# server per variant), R tasks a second each due D ms later, for S seconds
# (default 600), with one REPEATABLE READ transaction held open in another
# session for the whole run (unless --no-long-tx). Variants:
#   plain      PostgreSQL's default autovacuum settings, no rotation
#   tuned      the store's per-table autovacuum settings, no rotation
#   rotate     tuned + the generation rotation (the default: flipping at
#              dead = 50% of live)
#   rotate@P   the same, flipping at dead = P% of live (rotate_at=P)
# Each variant's report goes to OUT/pg-churn-VARIANT.txt (default
# bench/results/postgres/), and a table of the summaries is printed at the end.
# Not run by CI (it takes S seconds per variant); docs/persistence.md,
# "PostgreSQL", has the figures it produced.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

seconds=600
rate=2000
delay_ms=5000
long_tx=--long-tx
variants="plain tuned rotate rotate@100"
build="$DELAYQ_ROOT/build"
out="$DELAYQ_ROOT/bench/results/postgres"
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --delay-ms) delay_ms="$2"; shift 2 ;;
    --no-long-tx) long_tx=""; shift ;;
    --variants) variants="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) delayq_die "unknown argument '$1' (see the top of $0)" ;;
  esac
done
bin="$build/bench/postgres/delayq-bench-pg-churn"
delayq_need_built "$build" "$bin"
mkdir -p "$out"

summary=()
for v in $variants; do
  variant="$v" extra=""
  if [[ "$v" == rotate@* ]]; then
    variant=rotate
    extra="rotate_at=${v#rotate@}"
  fi
  file="$out/pg-churn-${v/@/-at-}${long_tx:+-long-tx}.txt"
  delayq_log "==> $v: ${seconds} s, ${rate} tasks/s due ${delay_ms} ms later${long_tx:+, a long transaction open} -> $file"
  {
    delayq_machine "$build"
    echo "command:    scripts/pg-churn.sh --seconds $seconds --rate $rate --delay-ms $delay_ms ${long_tx:---no-long-tx} --variants $v"
    # shellcheck disable=SC2016
    "$DELAYQ_ROOT/scripts/with-postgres.sh" bash -c \
      '"$0" --uri="$DELAYQ_TEST_POSTGRES${1:+?$1}" --variant="$2" $3 --seconds="$4" --rate="$5" --delay-ms="$6"' \
      "$bin" "$extra" "$variant" "$long_tx" "$seconds" "$rate" "$delay_ms" 2>&1
  } | tee "$file"
  summary+=("$(printf '%-10s %s' "$v" "$(grep '^# size at the start' "$file" | sed 's/^# //')")")
done
echo
printf '%s\n' "${summary[@]}"

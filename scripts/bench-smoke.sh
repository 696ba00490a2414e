#!/usr/bin/env bash
# scripts/bench-smoke.sh [builddir] - runs every benchmark binary once in its
# quick mode (tiny sizes, a few milliseconds per benchmark) to show that it
# still builds, starts and finishes. scripts/test.sh calls it (stage "bench")
# on build/, which it configures with -DDELAYQ_BUILD_BENCH=ON.
#
# Fails only when a binary crashes, exits non-zero or hangs (5 minutes). No
# timing is checked: timings on a shared CI machine mean nothing. A benchmark
# that reports an error (Google Benchmark's "ERROR OCCURRED", e.g. a cancel
# that found no task) is printed as a warning. For real figures use
# scripts/bench.sh.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

dir="${1:-$DELAYQ_ROOT/build}"
[[ "$dir" = /* ]] || dir="$PWD/$dir"
[[ -d "$dir/bench" ]] ||
  delayq_die "no $dir/bench: configure $dir with -DDELAYQ_BUILD_BENCH=ON and build it first"

mapfile -t binaries < <(find "$dir/bench" -type f -name 'delayq-bench-*' -perm -u+x | sort)
((${#binaries[@]} > 0)) ||
  delayq_die "no delayq-bench-* binaries under $dir/bench: build $dir first"

log="$(mktemp "${TMPDIR:-/tmp}/delayq-bench-smoke.XXXXXX")"
trap 'rm -f "$log"' EXIT

failed=0
start=$SECONDS
for bin in "${binaries[@]}"; do
  name="$(basename "$bin")"
  rc=0
  timeout 300 "$bin" --quick --benchmark_counters_tabular=false >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    if ((rc == 124)); then
      echo "FAIL $name: still running after 300 s"
    elif ((rc > 128)); then
      echo "FAIL $name: killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
    else
      echo "FAIL $name: exit status $rc"
    fi
    sed 's/^/    /' "$log" | tail -n 40
    failed=1
    continue
  fi
  runs="$(grep -cE '^[a-z_]+/' "$log" || true)"
  errors="$(grep -c 'ERROR OCCURRED' "$log" || true)"
  echo "ok   $name --quick: $runs benchmarks"
  if ((errors > 0)); then
    echo "     warning: $errors benchmarks reported an error:"
    grep 'ERROR OCCURRED' "$log" | sed 's/^/       /'
  fi
done
echo "bench smoke: ${#binaries[@]} binaries in $((SECONDS - start)) s"
exit "$failed"

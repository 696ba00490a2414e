# tables.awk - the Markdown tables and the target check of the micro and
# latency benchmarks in docs/benchmarks.md, from the TSV files medians.awk
# writes. (delayq-bench-engine writes its own tables: engine-tables.md.)
#
#   awk -v task_size=112 -f bench/report/tables.awk micro.tsv [latency.tsv]
#
# Every figure is a median over the repetitions; "±x%" is the coefficient of
# variation of those repetitions. Ratios divide two medians of the same run.
BEGIN { FS = "\t"; if (task_size == "") task_size = 112 }
FNR == 1 { next }
{
  fam = $2; op = $3; size = $4 + 0; thr = $5 + 0
  k = fam SUBSEP op SUBSEP size SUBSEP thr
  ns[k] = $9; cv[k] = $10; real[k] = $8; bpt[k] = $11; wbpt[k] = $12; mt[k] = $13; ips[k] = $14
  # Repetitions per benchmark (a run's files may differ: micro, latency).
  if (fam == "latency") lreps = $6
  else mreps = $6
  if (fam == "latency" && op == "steady_clock_now") {
    clock_ns = $9; clock_cv = $10
  } else if (fam == "latency") {
    if (!(size in lseen)) { lseen[size] = 1; lsizes[++nl] = size }
  } else if (!(size in seen)) {
    seen[size] = 1; sizes[++nsizes] = size
  }
}
function num(x) { return x == "" ? -1 : x + 0 }
function fmt(x) {
  if (x == "" || x < 0) return "n/a"
  x += 0
  if (x >= 1e6) return sprintf("%.2fM", x / 1e6)
  if (x >= 10000) return sprintf("%.0fk", x / 1e3)
  if (x >= 100 || x == int(x)) return sprintf("%.0f", x)
  if (x >= 10) return sprintf("%.1f", x)
  return sprintf("%.2f", x)
}
# Sizes as powers of ten where they are (1e3 .. 1e7), else plainly.
function fmtn(x,   e, p) {
  x += 0
  p = 10
  for (e = 1; e <= 12; e++) { if (x == p && x >= 1000) return "1e" e; p *= 10 }
  return sprintf("%.0f", x)
}
function pct(c) { return c == "" ? "" : sprintf(" ±%.0f%%", 100 * c) }
function ratio(a, b) { return (a == "" || b == "" || b + 0 == 0) ? "n/a" : sprintf("%.1fx", a / b) }
function cell(fam, op, size) {
  k = fam SUBSEP op SUBSEP size SUBSEP 1
  return (k in ns) ? fmt(ns[k]) pct(cv[k]) : "n/a"
}
function get(arr, fam, op, size, thr) {
  k = fam SUBSEP op SUBSEP size SUBSEP thr
  return (k in arr) ? arr[k] : ""
}
function verdict(ok, text) {
  printf "- **%s** %s\n", ok ? "met" : "MISSED", text
}
END {
  # Sort the sizes (few of them: insertion sort; mawk has no asort).
  for (i = 2; i <= nsizes; i++)
    for (j = i; j > 1 && sizes[j - 1] > sizes[j]; j--) { t = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = t }
  nfam = split("wheel zset heap asio", fams, " ")
  nops = split("schedule cancel reschedule fire", ops, " ")

  for (o = 1; o <= nops; o++) {
    op = ops[o]
    unit = op == "fire" ? "ns per task fired" : "ns per op"
    printf "\n#### %s (%s, median of %s runs)\n\n", op, unit, mreps
    printf "| N | wheel | zset | heap | asio | zset ÷ wheel | heap ÷ wheel | asio ÷ wheel |\n"
    printf "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    for (i = 1; i <= nsizes; i++) {
      n = sizes[i]
      w = get(ns, "wheel", op, n, 1)
      printf "| %s |", fmtn(n)
      for (f = 1; f <= nfam; f++) printf " %s |", cell(fams[f], op, n)
      for (f = 2; f <= nfam; f++) printf " %s |", ratio(get(ns, fams[f], op, n, 1), w)
      printf "\n"
    }
    if (op == "fire") {
      printf "\nFiring rate, million tasks per second:\n\n"
      printf "| N | wheel | zset | heap | asio |\n|---:|---:|---:|---:|---:|\n"
      for (i = 1; i <= nsizes; i++) {
        n = sizes[i]
        printf "| %s |", fmtn(n)
        for (f = 1; f <= nfam; f++) printf " %s |", fmt(get(mt, fams[f], "fire", n, 1))
        printf "\n"
      }
    }
  }

  printf "\n#### memory per pending task (bytes)\n\n"
  printf "Net heap bytes held after filling N tasks, over N (counting operator new).\n"
  printf "Wheel overhead = wheel total − sizeof(delayq::task) (%d): what the wheel adds to the task.\n\n", task_size
  printf "| N | wheel total | wheel `memory_bytes()`/N | wheel overhead | zset | heap | asio |\n"
  printf "|---:|---:|---:|---:|---:|---:|---:|\n"
  for (i = 1; i <= nsizes; i++) {
    n = sizes[i]
    wb = get(bpt, "wheel", "schedule", n, 1)
    printf "| %s | %s | %s | %s | %s | %s | %s |\n", fmtn(n), fmt(wb), fmt(get(wbpt, "wheel", "schedule", n, 1)),
           wb == "" ? "n/a" : fmt(wb - task_size), fmt(get(bpt, "zset", "schedule", n, 1)),
           fmt(get(bpt, "heap", "schedule", n, 1)), fmt(get(bpt, "asio", "schedule", n, 1))
  }

  if (nl > 0) {
    for (i = 2; i <= nl; i++)
      for (j = i; j > 1 && lsizes[j - 1] > lsizes[j]; j--) { t = lsizes[j]; lsizes[j] = lsizes[j - 1]; lsizes[j - 1] = t }
    printf "\n#### the machine: one dependent random access (ns, median of %s runs)\n\n", lreps
    printf "| working set | 4 KiB pages | huge pages requested |\n|---:|---:|---:|\n"
    for (i = 1; i <= nl; i++) {
      n = lsizes[i]
      printf "| %s | %s | %s |\n", (n >= 1048576 ? sprintf("%d MiB", n / 1048576) : sprintf("%d KiB", n / 1024)),
             cell("latency", "4k_pages", n), cell("latency", "huge_pages", n)
    }
    if (clock_ns != "")
      printf "\nOne `std::chrono::steady_clock::now()`: %s ns%s (read twice per timed batch in the micro benchmarks).\n", fmt(clock_ns), pct(clock_cv)
  }

  # ------------------------------------------------------------ targets
  printf "\n#### targets\n\n"
  big = 1000000; small = 1000; huge = 10000000
  for (o = 1; o <= 2; o++) {
    op = ops[o]
    w = get(ns, "wheel", op, big, 1)
    if (w != "") verdict(w <= 50, sprintf("wheel %s at 1e6 ≤ 50 ns: %s ns", op, fmt(w)))
    else printf "- not measured: wheel %s at 1e6\n", op
  }
  m = get(mt, "wheel", "fire", big, 1)
  if (m != "") verdict(m >= 20, sprintf("wheel firing at 1e6 ≥ 20 M tasks/s: %s M/s", fmt(m)))
  wb = get(bpt, "wheel", "schedule", big, 1)
  if (wb != "") verdict(wb - task_size <= 64, sprintf("wheel overhead at 1e6 ≤ 64 bytes per task beyond the task: %s (total %s − %d)", fmt(wb - task_size), fmt(wb), task_size))
  for (o = 1; o <= nops; o++) {
    op = ops[o]
    a = get(ns, "wheel", op, small, 1); b = get(ns, "wheel", op, huge, 1)
    if (a != "" && b != "") verdict(b <= 2 * a, sprintf("wheel %s at 1e7 ≤ 2x 1e3: %s ns vs %s ns = %s", op, fmt(b), fmt(a), ratio(b, a)))
    else printf "- not measured: wheel %s at 1e7 against 1e3 (run with --full)\n", op
  }
  for (o = 1; o <= 2; o++) {
    op = ops[o]
    w = get(ns, "wheel", op, big, 1)
    split("zset asio", alt, " ")
    for (x = 1; x <= 2; x++) {
      v = get(ns, alt[x], op, big, 1)
      if (w != "" && v != "") verdict(v >= 10 * w, sprintf("wheel %s at 1e6 ≥ 10x faster than %s: %s", op, alt[x], ratio(v, w)))
    }
  }
}

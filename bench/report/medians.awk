# medians.awk - Google Benchmark JSON (--benchmark_out_format=json) to one TSV
# row per benchmark: the median aggregate of its repetitions (with the
# coefficient of variation), or its single run when it ran once.
#
#   awk -f bench/report/medians.awk bench/results/micro.json > micro.tsv
#
# Columns: run_name family op size threads reps stat real_ns ns ns_cv
#          bytes_per_task wheel_bytes_per_task Mtasks_per_s items_per_second
# where run_name is family/op/<argname>:size/..., ns is the ns_per_op,
# ns_per_task or seconds_per_load (turned into ns) counter (empty for
# benchmarks without one), stat is "median" or "single". Relies on the
# one-key-per-line layout Google Benchmark writes.
BEGIN {
  OFS = "\t"
  ncols = split("real_ns ns_per_op ns_per_task seconds_per_load bytes_per_task " \
                "wheel_bytes_per_task Mtasks_per_s items_per_second", cols, " ")
  print "run_name", "family", "op", "size", "threads", "reps", "stat", "real_ns", "ns", "ns_cv", \
        "bytes_per_task", "wheel_bytes_per_task", "Mtasks_per_s", "items_per_second"
}
/"benchmarks": \[/ { inside = 1; next }
!inside { next }
/^ *"[A-Za-z_][A-Za-z0-9_.]*": / {
  line = $0
  sub(/^ *"/, "", line)
  key = line; sub(/".*/, "", key)
  v = line; sub(/^[^"]*": */, "", v); sub(/,$/, "", v); gsub(/"/, "", v)
  rec[key] = v
  next
}
/^ *}/ {
  if ("run_name" in rec) finish()
  split("", rec)
}
function finish(   rn, kind, k, scale) {
  rn = rec["run_name"]
  scale = 1
  if (rec["time_unit"] == "us") scale = 1e3
  else if (rec["time_unit"] == "ms") scale = 1e6
  else if (rec["time_unit"] == "s") scale = 1e9
  # A cv aggregate is a ratio, whatever the time unit.
  rec["real_ns"] = rec["aggregate_name"] == "cv" ? rec["real_time"] : rec["real_time"] * scale
  if (!(rn in seen)) { seen[rn] = 1; order[++n] = rn; threads[rn] = rec["threads"]; reps[rn] = 0 }
  if (rec["run_type"] == "iteration") { kind = "single"; reps[rn]++ }
  else if (rec["aggregate_name"] == "median") kind = "median"
  else if (rec["aggregate_name"] == "cv") kind = "cv"
  else return
  for (k = 1; k <= ncols; k++)
    if (cols[k] in rec) val[rn, kind, cols[k]] = rec[cols[k]]
  has[rn, kind] = 1
}
function get(rn, kind, key) { return ((rn, kind, key) in val) ? val[rn, kind, key] : "" }
END {
  for (i = 1; i <= n; i++) {
    rn = order[i]
    kind = has[rn, "median"] ? "median" : "single"
    split(rn, part, "/")
    size = part[3]; sub(/^[^:]*:/, "", size)
    ns = get(rn, kind, "ns_per_op"); if (ns == "") ns = get(rn, kind, "ns_per_task")
    if (ns == "" && get(rn, kind, "seconds_per_load") != "") ns = get(rn, kind, "seconds_per_load") * 1e9
    cv = get(rn, "cv", "ns_per_op"); if (cv == "") cv = get(rn, "cv", "ns_per_task")
    if (cv == "") cv = get(rn, "cv", "seconds_per_load")
    if (cv == "") cv = get(rn, "cv", "real_ns")
    print rn, part[1], part[2], size, threads[rn], reps[rn], kind, get(rn, kind, "real_ns"), ns, cv, \
          get(rn, kind, "bytes_per_task"), get(rn, kind, "wheel_bytes_per_task"), \
          get(rn, kind, "Mtasks_per_s"), get(rn, kind, "items_per_second")
  }
}

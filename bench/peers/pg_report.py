#!/usr/bin/env python3
"""bench/peers/pg_report.py - the table of issue 34's side-by-side benchmark
(pg-boss, graphile-worker and delayq on one PostgreSQL): pg-peers.json in,
markdown and the plot's inputs out.

    python3 bench/peers/pg_report.py bench/results/pg-peers.json [OUTDIR]

writes OUTDIR/pg-peers-tables.md (default: the JSON's folder),
pg-peers-plot-throughput.tsv and pg-peers-plot-lateness.tsv (drawn by
bench/report/pg-peers-plots.gp), and prints the tables. pg_peers.py calls
write_all() at the end of a run; scripts/bench-pg-peers.sh --only-report runs
this file alone.

Ratios are between medians of the same run. The issue's targets: at least
1.0x each peer on every throughput row (goal 2x), lateness p99 within 10 ms.
A ratio under 1.0x and a p99 over 10 ms are in bold; nothing is enforced.
"""

import json
import os
import statistics
import sys

PEERS = ("pg-boss", "graphile-worker")
P99_TARGET_MS = 10.0


def rate(x):
    return "-" if x is None else f"{x:,.0f} /s"


def ratio_cell(d, p):
    if d is None or not p:
        return "-"
    r = d / p
    return f"**{r:.2f}x**" if r < 1.0 else f"{r:.2f}x"


def rounds_text(n):
    return f"{n} round" + ("" if n == 1 else "s")


def med(res, row, sys_name, key="per_s"):
    return res["rows"].get(row, {}).get(sys_name, {}).get("median", {}).get(key)


def delayq_cols(res):
    cols = [s for s in res["rows"].get("burst", {}) if s.startswith("delayq")]
    return cols or ["delayq"]


def mode_of(res, col):
    return col.split("-", 1)[1] if "-" in col else res["worker_modes"][0]


def table(res):
    cfg = res["config"]
    v = res.get("versions", {})
    st = res.get("settings", {})
    out = [f"### pg-boss {v.get('pg-boss', '?')} and graphile-worker {v.get('graphile-worker', '?')} against "
           f"delayq-server's HTTP API, one PostgreSQL {v.get('postgres', '?')}, Node.js {v.get('node', '?')} "
           f"for all three (median of {rounds_text(cfg['rounds'])})", ""]
    pb, gw = st.get("pgboss", {}), st.get("graphile", {})
    out.append(f"Jobs of {res['payload_bytes']} bytes, no-op handlers. Each system in a database of its own on "
               f"the one server. delayq: `{res.get('delayq_command', 'delayq-server')}`, {cfg['workers']} loops "
               f"of reserve (`max` 1) and finish (mode: {', '.join(res['worker_modes'])})"
               + (f"; mode batch: {max(1, round(cfg['workers'] / cfg.get('batch', 8)))} loops of reserve "
                  f"(`max` {cfg.get('batch', 8)}) and one `POST /v1/tasks:finish` of the batch carrying the next "
                  f"reserve, {cfg['workers']} jobs at once" if 'batch' in res['worker_modes'] else "")
               + ". pg-boss: "
               f"`new PgBoss({json.dumps(pb.get('boss', {}))})`, `createQueue(name, {json.dumps(pb.get('queue', {}))})`, "
               f"`send(name, data, {{startAfter}})`, `work(name, {json.dumps(pb.get('work', {}))}, handler)`. "
               f"graphile-worker: `addJob(task, payload, {{runAt, maxAttempts: 1}})` through `makeWorkerUtils`, "
               f"`run({json.dumps(gw.get('run', {}))})` with `preset.worker` "
               f"`{json.dumps(gw.get('preset', {}))}`. {res['note']}.")
    out.append("")
    out.append("| measure | delayq | pg-boss | graphile-worker | delayq ÷ pg-boss | delayq ÷ graphile-worker | target |")
    out.append("|---|---:|---:|---:|---:|---:|---|")
    tsv = {}

    def throughput_row(label, row, dcol):
        d = med(res, row, dcol)
        p = [med(res, row, s) for s in PEERS]
        out.append(f"| {label} | {rate(d)} | {rate(p[0])} | {rate(p[1])} | {ratio_cell(d, p[0])} | "
                   f"{ratio_cell(d, p[1])} | at least 1.0x (goal 2x) |")
        tsv[row] = {"delayq": d, "pg-boss": p[0], "graphile-worker": p[1]}

    throughput_row(f"add one at a time, sequential ({cfg['seq']:,})", "add-1", "delayq")
    throughput_row(f"add, {cfg['inFlight']} in flight ({cfg['par']:,})", "add-32", "delayq")
    for col in delayq_cols(res):
        throughput_row(f"burst: {cfg['burst']:,} due at one instant, {cfg['workers']} at once "
                       f"(delayq: {mode_of(res, col)})", "burst", col)
    lat_tsv = {}
    for col in delayq_cols(res):
        def lat(s):
            return tuple(med(res, "late", s, k) for k in ("late_p50_ms", "late_p99_ms", "late_max_ms"))

        d, p = lat(col), [lat(s) for s in PEERS]

        def show(t):
            return " / ".join("-" if x is None else f"{x:,.1f}" for x in t) + " ms"

        def lower(peer):
            if d[1] is None or peer[1] is None:
                return "-"
            return f"p99 {peer[1] / d[1]:.1f}x lower" if d[1] <= peer[1] else f"**p99 {d[1] / peer[1]:.1f}x higher**"

        dshow = show(d)
        if d[1] is not None and d[1] > P99_TARGET_MS:
            dshow = f"**{dshow}**"
        out.append(f"| lateness p50 / p99 / max, {cfg['late']:,} jobs over {cfg['spreadMs'] / 1000:g} s "
                   f"(delayq: {mode_of(res, col)}) | {dshow} | {show(p[0])} | {show(p[1])} | {lower(p[0])} | "
                   f"{lower(p[1])} | p99 within {P99_TARGET_MS:g} ms |")
        lat_tsv = {"p50": {"delayq": d[0], "pg-boss": p[0][0], "graphile-worker": p[1][0]},
                   "p99": {"delayq": d[1], "pg-boss": p[0][1], "graphile-worker": p[1][1]},
                   "max": {"delayq": d[2], "pg-boss": p[0][2], "graphile-worker": p[1][2]}}
    b = [med(res, "add-32", s, "bytes_per_job") for s in ("delayq",) + PEERS]

    def less(peer):
        if b[0] is None or peer is None or b[0] <= 0:
            return "-"
        return f"{peer / b[0]:.1f}x less" if b[0] <= peer else f"{b[0] / peer:.1f}x more"

    fmt = lambda x: "-" if x is None else f"{x:,.0f} B"  # noqa: E731
    out.append(f"| bytes per waiting job (`pg_total_relation_size` of the schema's tables after VACUUM FULL, "
               f"before and after add-32) | {fmt(b[0])} | {fmt(b[1])} | {fmt(b[2])} | {less(b[1])} | {less(b[2])} | |")
    out.append("")
    out.append("CPU per job (median over the rounds; µs of CPU time per job: delayq-server, PostgreSQL "
               "(the postmaster and every backend), the Node.js client, which for pg-boss and graphile-worker "
               "is the library itself). Each span is the row's whole: for the burst, its 20,000 adds, the wait "
               "until the due instant (the peers' workers poll meanwhile) and the run. PostgreSQL's CPU is the "
               "whole server's: autovacuum, and another system's background work (pg-boss's maintenance), "
               "count where they fall.")
    out.append("")
    out.append("| measure | delayq: server / postgres / client | pg-boss: postgres / client | graphile-worker: postgres / client |")
    out.append("|---|---:|---:|---:|")
    for row, dcol in [("add-1", "delayq"), ("add-32", "delayq")] + [("burst", c) for c in delayq_cols(res)]:
        cells = []
        for s in (dcol,) + PEERS:
            rs = res["rows"].get(row, {}).get(s, {}).get("rounds", [])
            if not rs:
                cells.append("-")
                continue
            n = rs[0].get("ops") or rs[0].get("jobs")
            keys = ("server_cpu_s", "postgres_cpu_s", "client_cpu_s") if s.startswith("delayq") else \
                ("postgres_cpu_s", "client_cpu_s")
            cells.append(" / ".join(f"{statistics.median(x[k] / n * 1e6 for x in rs):.0f}" for k in keys))
        label = f"{row} ({mode_of(res, dcol)})" if row == "burst" else row
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    # The lateness row again, from its first due instant on (its adds left
    # out): the share of a core each process takes while the jobs fall due.
    # A client near 100% of its one thread delays what it measures.
    shares = []
    for s in tuple(delayq_cols(res)) + PEERS:
        rs = [x for x in res["rows"].get("late", {}).get(s, {}).get("rounds", []) if "client_cpu_s_after_due" in x]
        if not rs:
            shares.append("-")
            continue
        keys = ("server_cpu_s", "postgres_cpu_s", "client_cpu_s") if s.startswith("delayq") else \
            ("postgres_cpu_s", "client_cpu_s")
        shares.append(" / ".join(f"{statistics.median(x[k + '_after_due'] / x['seconds'] * 100 for x in rs):.0f}%"
                                 for k in keys))
    if any(c != "-" for c in shares):
        out.append("")
        out.append("While the lateness row's jobs fall due (from the first due instant to the last job; its adds "
                   "left out), the share of one core each process takes (median over the rounds). The machine "
                   "has two; a client near 100% of its one thread delays what it measures.")
        out.append("")
        out.append("| " + " | ".join(f"{c}: {'server / postgres / client' if c.startswith('delayq') else 'postgres / client'}"
                                     for c in tuple(delayq_cols(res)) + PEERS) + " |")
        out.append("|" + "---:|" * len(shares))
        out.append("| " + " | ".join(shares) + " |")
    over = [f"{s} {row} round {i + 1} ({x['adds_done_before_due_ms']:.0f} ms)"
            for row in ("burst", "late") for s, v in res["rows"].get(row, {}).items()
            for i, x in enumerate(v["rounds"]) if x.get("adds_done_before_due_ms", 0) < 0]
    if over:
        out.append("")
        out.append("**Adds still running when the first job was due** (the figure includes them): " + "; ".join(over) + ".")
    # A lateness round with a long tail: was a store write behind it? (A
    # worker's finish waits for its write.) Runs before this field existed
    # have none, and say nothing; a round whose reading failed says so.
    writes = []
    for s in delayq_cols(res):
        for i, x in enumerate(res["rows"].get("late", {}).get(s, {}).get("rounds", [])):
            p99 = x.get("late_p99_ms")
            head = f"{s} round {i + 1}: p99 " + (f"{p99:.1f} ms" if p99 is not None else "?")
            if "store_over_10ms" in x:
                writes.append(f"{head}, {x['store_over_10ms']} / {x.get('store_over_100ms', '?')} / "
                              f"{x.get('store_over_1s', '?')} of {x.get('store_writes', '?')}")
            elif x.get("store_writes_unread"):
                writes.append(f"{head}, not read (/metrics did not answer)")
    if writes:
        out.append("")
        out.append("delayq's store writes during each lateness round (its adds included) that took longer than "
                   "10 ms / 100 ms / 1 s, of all its writes (`delayq_store_write_seconds` in `/metrics` before "
                   "and after): " + "; ".join(writes) + ".")
    early = [f"{s} {x['early']}" for s, v in res["rows"].get("late", {}).items() for x in v["rounds"] if x.get("early")]
    if early:
        out.append("")
        out.append("Jobs run before their due time (lateness run, per round): " + ", ".join(early) + ".")
    return "\n".join(out) + "\n", tsv, lat_tsv


def write_tsv(path, rows, cols):
    with open(path, "w") as f:
        f.write("measurement\t" + "\t".join(cols) + "\n")
        for row, by in rows.items():
            f.write(row + "\t" + "\t".join("" if by.get(c) is None else f"{by[c]:.3f}" for c in cols) + "\n")


def write_all(res, outdir):
    text, tsv, lat = table(res)
    with open(os.path.join(outdir, "pg-peers-tables.md"), "w") as f:
        f.write(text)
    cols = ["delayq", "pg-boss", "graphile-worker"]
    write_tsv(os.path.join(outdir, "pg-peers-plot-throughput.tsv"), tsv, cols)
    write_tsv(os.path.join(outdir, "pg-peers-plot-lateness.tsv"), lat, cols)
    return text


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        res = json.load(f)
    print(write_all(res, sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(sys.argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

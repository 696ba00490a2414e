#!/usr/bin/env python3
"""bench/peers/report.py - the peer benchmark's table writer: peers.json in,
markdown tables and the plot's inputs out.

    python3 bench/peers/report.py bench/results/peers.json [OUTDIR]

writes OUTDIR/peers-tables.md (default: the JSON's folder),
peers-plot-beanstalk.tsv and peers-plot-http.tsv (bench/report/peers-plots.gp
draws them), and prints the tables. peers.py calls write_all() at the end of
a run; scripts/bench-peers.sh --only-report runs this file alone.

Every ratio is between medians of the same run. A ratio under its target
(issue 32's "Targets") is in bold; the targets are printed, never enforced.
"""

import json
import os
import statistics
import sys

LABELS = {
    "beanstalkd-mem": "beanstalkd, in memory",
    "delayq-memory": "delayq `memory:`",
    "beanstalkd-binlog": "beanstalkd `-b DIR` (fsync at most every 50 ms)",
    "delayq-sqlite-normal": "delayq `sqlite:PATH?synchronous=normal`",
    "beanstalkd-fsync": "beanstalkd `-b DIR -f 0` (fsync every write)",
    "delayq-sqlite-full": "delayq `sqlite:PATH` (synchronous=full)",
    "delayq-redis": "delayq `redis://` (appendfsync everysec)",
}


def table1_order(res):
    """Table 1's servers, pairs together (peers.json's keys are sorted);
    the floors are not among them (floors())."""
    names = [n for n, s in res.get("table1_servers", {}).items() if not s.get("floor")]
    return [n for n in LABELS if n in names] + [n for n in names if n not in LABELS]


def rounds_text(n):
    return f"{n} round" + ("" if n == 1 else "s")


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rate(x):
    if x is None:
        return "-"
    return f"{x:,.0f} /s"


def ratio(x, target=None, better="higher"):
    """'0.73x', bold when it misses TARGET."""
    if x is None:
        return "-"
    text = f"{x:.2f}x"
    if target is not None and ((better == "higher" and x < target) or (better == "lower" and x > target)):
        return f"**{text}**"
    return text


def _div(a, b):
    return a / b if a is not None and b else None


def table1(res):
    t1 = res.get("table1")
    if not t1:
        return "", {}
    pairs = {d: (b, target) for d, b, target in res["pairs"]}
    servers = table1_order(res)
    rounds = res["config"]["rounds"]
    conns = res["config"]["connections"]
    rows = ["put-1", "cycle-1", f"cycle-{conns}"]
    out = [f"### Table 1: beanstalkd's protocol, one Python client for both (median of {rounds_text(rounds)})", ""]
    out.append(f"{res['config']['sequential']:,} puts one at a time on one connection (body "
               f"{res['config']['body_bytes']} bytes, delay 0); then {res['config']['sequential']:,} "
               f"reserve+delete cycles on it (the jobs just put); then {conns} connections doing "
               f"put/reserve/delete, {res['config']['concurrent_cycles']:,} cycles in all. Ratios: delayq "
               f"against the beanstalkd of matched durability (target 1.0x; `redis://` 0.5x of `-b`).")
    out.append("")
    out.append(f"| server | puts/s, 1 connection | cycles/s, 1 connection | cycles/s, {conns} connections |")
    out.append("|---|---:|---:|---:|")
    met = total = 0
    tsv = {}
    for name in servers:
        cells = []
        for row in rows:
            m = t1.get(row, {}).get(name, {}).get("median_per_s")
            tsv.setdefault(row, {})[name] = m
            cell = rate(m)
            if name in pairs:
                peer, target = pairs[name]
                r = _div(m, t1.get(row, {}).get(peer, {}).get("median_per_s"))
                if r is not None:
                    total += 1
                    met += r >= target
                cell += f" ({ratio(r, target)})"
            cells.append(cell)
        out.append(f"| {LABELS.get(name, name)} | " + " | ".join(cells) + " |")
    out.append("")
    out.append(f"Targets met on **{met} of {total}** delayq cells. Pairs: " +
               "; ".join(f"`{d}` against `{b}` ({t}x)" for d, b, t in res["pairs"]) + ".")
    timed = {n: sum(x.get("timed_out", 0) for row in rows for x in t1.get(row, {}).get(n, {}).get("rounds", []))
             for n in servers}
    if any(timed.values()):
        out.append("")
        out.append("Reserves that answered TIMED_OUT although a job had been put and acknowledged (retried; "
                   "their second counts in the time): " +
                   ", ".join(f"{n} {c}" for n, c in timed.items() if c) + ".")
    out.append("")
    out.append("Where the CPU went (median over the rounds): the server's CPU time per operation, "
               "redis-server's for `redis://`, and how busy the Python client was (cores; 1.0 = "
               "the client was the bound).")
    out.append("")
    out.append(f"| server | put-1 µs/op | cycle-1 µs/cycle | cycle-{conns} µs/cycle | client cores, put-1 / cycle-1 / cycle-{conns} |")
    out.append("|---|---:|---:|---:|---:|")
    for name in servers:
        cells, clients = [], []
        for row in rows:
            rs = t1.get(row, {}).get(name, {}).get("rounds", [])
            us = median([x["server_cpu_s"] / x["ops"] * 1e6 for x in rs])
            rus = median([x["redis_cpu_s"] / x["ops"] * 1e6 for x in rs if "redis_cpu_s" in x])
            cells.append("-" if us is None else f"{us:.1f}" + (f" + {rus:.1f} redis" if rus is not None else ""))
            c = median([x["client_cpu_s"] / x["seconds"] for x in rs])
            clients.append("-" if c is None else f"{c:.2f}")
        out.append(f"| {name} | " + " | ".join(cells) + " | " + " / ".join(clients) + " |")
    return "\n".join(out) + "\n", tsv


def floors(res):
    """The bound table: each floor (bench/floor/floor_server.cpp) against the
    beanstalkd and the delayq of its durability, on the one-connection rows."""
    t1 = res.get("table1")
    bounds = res.get("bounds") or []
    if not t1 or not bounds:
        return ""

    def per_s(row, name):
        return t1.get(row, {}).get(name, {}).get("median_per_s")

    out = ["### The floor under table 1's one-connection rows", ""]
    out.append("`delayq-bench-floor` (bench/floor/floor_server.cpp): one thread, poll(), a request parsed "
               "and answered, and with `--sqlite` one raw SQLite commit (WAL, one row in a one-table "
               "schema) for every put and every delete before its answer. A server that writes what the "
               "floor writes cannot answer one request at a time faster, so floor ÷ beanstalkd is the most "
               "it can reach against that beanstalkd (the *ceiling*); delayq ÷ floor is how near delayq is "
               "to it. Same client, same run, medians of the rounds.")
    out.append("")
    out.append("| row | floor | beanstalkd | ceiling (floor ÷ beanstalkd) | delayq | delayq ÷ beanstalkd | delayq ÷ floor |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for floor, peer, delayq in bounds:
        for row, what in (("put-1", "puts"), ("cycle-1", "cycles")):
            f, b, d = per_s(row, floor), per_s(row, peer), per_s(row, delayq)
            out.append(f"| `{floor}` {what}, against `{peer}` | {rate(f)} | {rate(b)} | "
                       f"{ratio(_div(f, b), 1.0)} | {rate(d)} | {ratio(_div(d, b))} | {ratio(_div(d, f))} |")
    out.append("")
    out.append("A ceiling under 1.0x (bold): in this run even the floor was slower than that beanstalkd; "
               "a 1.0x target is out of reach for a store that commits what the floor commits only where "
               "that holds run after run. The 8-connection rows have no floor here (there a commit "
               "carries many writes).")
    return "\n".join(out) + "\n"


def fmt_us(x):
    return "-" if x is None else f"{x:.1f} µs"


def fmt_c(x):
    return "-" if x is None else f"{x:.2f}"


def table2(res):
    b = res.get("backlog")
    if not b:
        return ""
    cfg = res["config"]
    n = cfg["backlog"]
    bs, dq = b.get("beanstalkd-mem", {}), b.get("delayq-memory", {})
    out = [f"### Table 2: a backlog, pipelined (median of {rounds_text(cfg['backlog_rounds'])}, fresh servers each round)", ""]
    out.append(f"One connection pipelines {n:,} puts of {cfg['backlog_body_bytes']} bytes "
               f"({cfg['backlog_in_flight']:,} in flight), then takes them one by one with "
               "reserve-with-timeout and delete. Resident memory: VmRSS of the server process "
               "(/proc) once `stats-tube` counts them all ready, less its VmRSS before the puts.")
    out.append("")
    out.append("| measure | beanstalkd (memory) | delayq `memory:` | delayq ÷ beanstalkd | target |")
    out.append("|---|---:|---:|---:|---|")
    pp = (bs.get("put_pipelined_per_s"), dq.get("put_pipelined_per_s"))
    out.append(f"| pipelined puts | {rate(pp[0])} | {rate(pp[1])} | {ratio(_div(pp[1], pp[0]), 1.0)} | at least 1.0x |")
    cy = (bs.get("cycle_backlog_per_s"), dq.get("cycle_backlog_per_s"))
    out.append(f"| reserve+delete with {n:,} ready | {rate(cy[0])} | {rate(cy[1])} | {ratio(_div(cy[1], cy[0]))} | |")
    mb = lambda x: "-" if x is None else f"{x / 1e6:.1f} MB"  # noqa: E731
    rh = (bs.get("rss_holding_bytes"), dq.get("rss_holding_bytes"))
    out.append(f"| resident memory holding {n:,} ready jobs | {mb(rh[0])} | {mb(rh[1])} | {ratio(_div(rh[1], rh[0]))} | |")
    pj = (bs.get("rss_per_job_bytes"), dq.get("rss_per_job_bytes"))
    fmt = lambda x: "-" if x is None else f"{x:,.0f} B"  # noqa: E731
    out.append(f"| resident memory per ready job (growth ÷ {n:,}) | {fmt(pj[0])} | {fmt(pj[1])} | "
               f"{ratio(_div(pj[1], pj[0]), 1.5, better='lower')} | at most 1.5x |")
    def per_round(sysres, fn):
        return median([fn(x) for x in sysres.get("rounds", [])])

    us = [per_round(x, lambda r: r["put-pipelined"]["server_cpu_s"] / r["put-pipelined"]["ops"] * 1e6) for x in (bs, dq)]
    cl = [per_round(x, lambda r: r["put-pipelined"]["client_cpu_s"] / r["put-pipelined"]["seconds"]) for x in (bs, dq)]
    out.append(f"| server CPU per pipelined put | {fmt_us(us[0])} | {fmt_us(us[1])} | {ratio(_div(us[1], us[0]))} | |")
    out.append(f"| the Python client's CPU during the pipelined puts (cores; 1.0 = the bound) | "
               f"{fmt_c(cl[0])} | {fmt_c(cl[1])} | | |")
    rw = (bs.get("ready_wait_s"), dq.get("ready_wait_s"))
    ms = lambda x: "-" if x is None else f"{x * 1000:,.1f} ms"  # noqa: E731
    out.append(f"| from the last INSERTED until `stats-tube` counts all ready | {ms(rw[0])} | {ms(rw[1])} | | |")
    return "\n".join(out) + "\n"


def checks(res):
    c = res.get("checks")
    if not c:
        return ""
    cfg = res["config"]
    out = [f"### Ordering and timing parity ({c.get('busy_loops', 0)} busy loops running)", ""]
    out.append(f"**Ordering**: on one connection, put priority 2, put priority 1, `reserve`: the priority-1 "
               f"job must come back ({cfg['ordering_tries']:,} tries). **Timing parity**: a job released "
               f"with delay 2, then `reserve-with-timeout 1` twice: TIMED_OUT, then the job, within 50 ms of "
               f"2 s ({cfg['timing_tries']} tries, {cfg['timing_clients']} clients at once, each its own "
               "connection and tube). The server starts the 2 s between the release's send and its RELEASED, "
               "so on time is: not before 2 s - 50 ms from the send, not after 2 s + 50 ms from the RELEASED. "
               "Target: every try, as beanstalkd does.")
    out.append("")
    out.append("| server | ordering | timing parity | job after the release's send: min / median / max | "
               "after its RELEASED: max | other outcomes |")
    out.append("|---|---:|---:|---:|---:|---|")
    for name in table1_order(res):
        o, t = c["ordering"].get(name), c["timing"].get(name)
        if not o and not t:
            continue
        oc = f"{o['ok']:,} of {o['tries']:,}" if o else "-"
        if o and o["ok"] < o["tries"]:
            oc = f"**{oc}**"
        tc = f"{t['ok']} of {t['tries']}" if t else "-"
        if t and t["ok"] < t["tries"]:
            tc = f"**{tc}**"
        el = ack = "-"
        other = ""
        if t:
            e, a = t["from_release_sent_s"], t["from_released_s"]
            if e["min"] is not None:
                el = f"{e['min'] * 1000:,.1f} / {e['median'] * 1000:,.1f} / {e['max'] * 1000:,.1f} ms"
                ack = f"{a['max'] * 1000:,.1f} ms"
            other = "; ".join(f"{k}: {v}" for k, v in sorted(t["outcomes"].items()) if k != "ok")
        out.append(f"| {LABELS.get(name, name)} | {oc} | {tc} | {el} | {ack} | {other} |")
    return "\n".join(out) + "\n"


def table3(res):
    b = res.get("bullmq")
    if not b:
        return "", {}
    rows, cfg = b["rows"], b["config"]
    med = lambda row, sys, k="per_s": rows.get(row, {}).get(sys, {}).get("median", {}).get(k)  # noqa: E731
    dq_cols = [s for s in rows.get("burst", {}) if s.startswith("delayq")] or ["delayq"]
    out = [f"### Table 3: BullMQ {res.get('versions', {}).get('bullmq', '5')} against delayq-server's HTTP API, "
           f"same redis-server, Node.js both sides (median of {rounds_text(cfg['rounds'])})", ""]
    out.append(f"Jobs of {b['payload_bytes']} bytes, no-op workers, removed on completion. "
               f"{cfg['workers']} workers: BullMQ's Worker with concurrency {cfg['workers']}; delayq's are "
               f"{cfg['workers']} loops of reserve (`max` 1) and finish, in mode: {', '.join(b['worker_modes'])}"
               + (f"; mode batch: {max(1, round(cfg['workers'] / cfg.get('batch', 8)))} loops of reserve "
                  f"(`max` {cfg.get('batch', 8)}) and one `POST /v1/tasks:finish` of the batch carrying the next "
                  f"reserve, {cfg['workers']} jobs at once" if 'batch' in b['worker_modes'] else "")
               + f". {b['note']}.")
    out.append("")
    out.append("| measure | BullMQ | delayq | delayq ÷ BullMQ | target |")
    out.append("|---|---:|---:|---:|---|")
    tsv = {}
    a1b, a1d, floor = med("add-1", "bullmq"), med("add-1", "delayq"), med("floor", "delayq")
    share = _div(a1d, floor)
    met1 = (a1d is not None and a1b and a1d >= a1b) or (share is not None and share >= 0.85)
    r1 = _div(a1d, a1b)
    r1s = f"{r1:.2f}x" if r1 is not None else "-"
    if not met1:
        r1s = f"**{r1s}**"
    out.append(f"| add one at a time, 1 connection ({cfg['seq']:,}) | {rate(a1b)} | {rate(a1d)} | {r1s} | "
               f"at least 1.0x, or 85% of the floor below |")
    out.append(f"| the floor: sequential `GET /healthz` through the same agent | | {rate(floor)} | "
               f"add = {'-' if share is None else f'{share * 100:.0f}%'} of it | |")
    rtt = med("redis-rtt", "delayq")
    if rtt and floor:
        # A durable add is the floor's HTTP round trip plus at least one
        # Redis round trip: at most this many a second, whatever the server.
        bound = 1 / (1 / floor + 1 / rtt)
        bb, bf = _div(bound, a1b), bound / floor
        out.append(f"| the bound: one floor round trip plus one Redis round trip (sequential SET by "
                   f"`redis-benchmark -c 1`: {rate(rtt)} alone) | | {rate(bound)} | "
                   f"= {'-' if bb is None else f'{bb:.2f}x'} BullMQ's add, {bf * 100:.0f}% of the floor; "
                   f"add = {'-' if a1d is None else f'{a1d / bound * 100:.0f}%'} of it | |")
    a32b, a32d = med("add-32", "bullmq"), med("add-32", "delayq")
    out.append(f"| add, 32 in flight ({cfg['par']:,}) | {rate(a32b)} | {rate(a32d)} | {ratio(_div(a32d, a32b), 1.0)} | at least 1.0x |")
    floor32 = med("floor-32", "delayq")
    if floor32 is not None:
        share32, over = _div(a32d, floor32), _div(floor32, a32b)
        out.append(f"| the floor, 32 in flight: `GET /healthz` through the same agent | | {rate(floor32)} | "
                   f"add = {'-' if share32 is None else f'{share32 * 100:.0f}%'} of it; "
                   f"the floor = {'-' if over is None else f'{over:.2f}x'} BullMQ's add | |")
    tsv["add-1"] = {"bullmq": a1b, "delayq": a1d}
    tsv["healthz-floor"] = {"bullmq": None, "delayq": floor}
    tsv["add-32"] = {"bullmq": a32b, "delayq": a32d}
    bb = med("burst", "bullmq")
    tsv["burst"] = {"bullmq": bb}
    for col in dq_cols:
        bd = med("burst", col)
        tsv["burst"]["delayq"] = tsv["burst"].get("delayq") or bd
        mode = col.split("-", 1)[1] if "-" in col else b["worker_modes"][0]
        out.append(f"| burst: {cfg['burst']:,} due at one instant, {cfg['workers']} workers (delayq: {mode}) | "
                   f"{rate(bb)} | {rate(bd)} | {ratio(_div(bd, bb), 1.0)} | at least 1.0x |")
    for col in dq_cols:
        lat = lambda sys: tuple(med("late", sys, k) for k in ("late_p50_ms", "late_p99_ms", "late_max_ms"))  # noqa: E731
        lb, ld = lat("bullmq"), lat(col)
        show = lambda t: " / ".join("-" if x is None else f"{x:,.1f}" for x in t) + " ms"  # noqa: E731
        better = _div(lb[1], ld[1])
        if better is None:
            verdict = "-"
        elif better >= 1:
            verdict = f"p99 {better:.1f}x lower"
        else:
            verdict = f"**p99 {1 / better:.1f}x higher**"
        mode = col.split("-", 1)[1] if "-" in col else b["worker_modes"][0]
        early = [med("late", sys, "early") for sys in ("bullmq", col)]
        if any(early):
            verdict += f" (run before their due time: BullMQ {early[0]:.0f}, delayq {early[1]:.0f})"
        out.append(f"| lateness p50 / p99 / max, {cfg['late']:,} jobs over {cfg['spreadMs'] / 1000:g} s (delayq: {mode}) | "
                   f"{show(lb)} | {show(ld)} | {verdict} | kept ahead |")
    mb, md = med("add-32", "bullmq", "memory_per_job_bytes"), med("add-32", "delayq", "memory_per_job_bytes")
    less = _div(mb, md)
    out.append(f"| Redis memory per delayed job (`used_memory` before and after add-32) | "
               f"{'-' if mb is None else f'{mb:,.0f} B'} | {'-' if md is None else f'{md:,.0f} B'} | "
               f"{'-' if less is None else f'{less:.1f}x less'} | kept ahead |")
    out.append("")
    out.append("CPU per job (median over the rounds; µs of CPU time per job; delayq-server, redis-server, the Node client):")
    out.append("")
    out.append("| measure | BullMQ: redis / client | delayq: server / redis / client |")
    out.append("|---|---:|---:|")
    for row, sys_dq in ([("add-1", "delayq"), ("add-32", "delayq")] + [("burst", c) for c in dq_cols]
                        + ([("floor-32", "delayq")] if "floor-32" in rows else [])):
        cells = []
        for sys in ("bullmq", sys_dq):
            rs = rows.get(row, {}).get(sys, {}).get("rounds", [])
            if not rs:
                cells.append("-")
                continue
            n = rs[0].get("ops") or rs[0].get("jobs")
            keys = ("redis_cpu_s", "client_cpu_s") if sys == "bullmq" else ("server_cpu_s", "redis_cpu_s", "client_cpu_s")
            cells.append(" / ".join(f"{median([x[k] / n * 1e6 for x in rs]):.0f}" for k in keys))
        label = f"{row} ({sys_dq.split('-', 1)[1]})" if "-" in sys_dq else row
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    over = [f"{sys} {row} round {i + 1} ({x['adds_done_before_due_ms']:.0f} ms)"
            for row in ("burst", "late") for sys, v in rows.get(row, {}).items()
            for i, x in enumerate(v["rounds"]) if x.get("adds_done_before_due_ms", 0) < 0]
    if over:
        out.append("")
        out.append("**Adds still running when the first job was due** (the figure includes them): " + "; ".join(over) + ".")
    return "\n".join(out) + "\n", tsv


def write_tsv(path, rows, cols):
    with open(path, "w") as f:
        f.write("measurement\t" + "\t".join(cols) + "\n")
        for row, by in rows.items():
            f.write(row + "\t" + "\t".join("" if by.get(c) is None else f"{by[c]:.1f}" for c in cols) + "\n")


def write_all(res, outdir):
    t1, tsv1 = table1(res)
    t3, tsv3 = table3(res)
    parts = [p for p in (t1, floors(res), table2(res), checks(res), t3) if p]
    text = "\n".join(parts)
    with open(os.path.join(outdir, "peers-tables.md"), "w") as f:
        f.write(text)
    if tsv1:
        write_tsv(os.path.join(outdir, "peers-plot-beanstalk.tsv"), tsv1, table1_order(res))
    if tsv3:
        write_tsv(os.path.join(outdir, "peers-plot-http.tsv"), tsv3, ["bullmq", "delayq"])
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

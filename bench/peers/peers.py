#!/usr/bin/env python3
"""bench/peers/peers.py - the peer benchmark's driver (issue 32, "Peer
benchmarks in the repository"). scripts/bench-peers.sh runs it under
scripts/with-redis.sh after installing and building what it needs; run that
script, not this file (its --help tells the whole run).

It starts every server itself (processes.py), on free loopback ports with
temp dirs, and stops them all at the end, on an error, and on SIGINT or
SIGTERM:

  table 1  beanstalk protocol, one client (beanstalk_client.py) for all:
           beanstalkd in memory, -b DIR, -b DIR -f 0; delayq-server on
           memory:, sqlite:?synchronous=normal, sqlite: (full), redis://
  table 2  a backlog, pipelined: fresh beanstalkd and delayq-server (memory)
           every round
  checks   ordering and timing parity against table 1's servers, with two
           busy loops running
  table 3  BullMQ 5 against delayq-server's HTTP API on the same
           redis-server, from Node.js (http_peers.js)

Rounds alternate between the servers: each round starts one further along
the list, so none always goes first. Writes OUT/peers.json (every round)
and, through report.py, OUT/peers-tables.md and the plot's inputs.
"""

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import beanstalk_scenarios as scen  # noqa: E402
import report  # noqa: E402
import processes  # noqa: E402
from processes import fleet, redis_info  # noqa: E402

FULL = dict(
    rounds=3, warmup=200, sequential=5000, connections=8, concurrent_cycles=8000, body_bytes=100,
    backlog=200000, backlog_in_flight=1000, backlog_body_bytes=8, backlog_rounds=3,
    ordering_tries=1000, timing_tries=200, timing_clients=50, busy_loops=2,
)
QUICK = dict(
    rounds=1, warmup=10, sequential=200, connections=8, concurrent_cycles=200, body_bytes=100,
    backlog=5000, backlog_in_flight=1000, backlog_body_bytes=8, backlog_rounds=1,
    ordering_tries=50, timing_tries=10, timing_clients=10, busy_loops=2,
)

# Table 1's servers, in start order: (name, kind, how, durability).
TABLE1 = [
    ("beanstalkd-mem", "beanstalkd", [], "none (memory)"),
    ("delayq-memory", "delayq", "memory:", "none (memory)"),
    ("beanstalkd-binlog", "beanstalkd", ["-b", "@DIR@"], "binlog, fsync at most every 50 ms"),
    ("delayq-sqlite-normal", "delayq", "sqlite:@DIR@/x.db?synchronous=normal", "WAL, synchronous=normal"),
    ("beanstalkd-fsync", "beanstalkd", ["-b", "@DIR@", "-f", "0"], "binlog, fsync every write"),
    ("delayq-sqlite-full", "delayq", "sqlite:@DIR@/x.db", "WAL, synchronous=full"),
    ("delayq-redis", "delayq", "redis://127.0.0.1:{redis}?prefix=peers-bs", "redis AOF, appendfsync everysec"),
]
# The floors (bench/floor/floor_server.cpp, --floor): the least a beanstalk
# server can do a request, alone or with one raw SQLite commit a write, on
# table 1's one-connection rows. (name, arguments, what it writes.)
FLOORS = [
    ("floor-memory", [], "nothing"),
    ("floor-sqlite-normal", ["--sqlite", "@DIR@/floor.db", "--sync", "normal"],
     "raw SQLite, WAL, synchronous=normal, one commit a put or delete"),
    ("floor-sqlite-full", ["--sqlite", "@DIR@/floor.db", "--sync", "full"],
     "raw SQLite, WAL, synchronous=full, one commit a put or delete"),
]
# (floor, beanstalkd, delayq): floor ÷ beanstalkd is the most any server
# that writes what the floor writes can reach against that beanstalkd.
BOUNDS = [
    ("floor-memory", "beanstalkd-mem", "delayq-memory"),
    ("floor-sqlite-normal", "beanstalkd-binlog", "delayq-sqlite-normal"),
    ("floor-sqlite-full", "beanstalkd-fsync", "delayq-sqlite-full"),
]
# (delayq, beanstalkd, target ratio) of matched durability.
PAIRS = [
    ("delayq-memory", "beanstalkd-mem", 1.0),
    ("delayq-sqlite-normal", "beanstalkd-binlog", 1.0),
    ("delayq-sqlite-full", "beanstalkd-fsync", 1.0),
    ("delayq-redis", "beanstalkd-binlog", 0.5),
]
PARTS = ("table1", "backlog", "checks", "bullmq")


_t0 = time.monotonic()


def say(msg):
    print(f"bench-peers [{time.monotonic() - _t0:6.1f} s]: {msg}", file=sys.stderr, flush=True)


class interrupted(Exception):
    pass


_signalled = []


def _on_signal(signum, _frame):
    # Once: a second signal (bash forwards the one the terminal also sent
    # us) must not interrupt the clean-up the first one started.
    if not _signalled:
        _signalled.append(signum)
        raise interrupted(f"signal {signum}")


def rotate(xs, k):
    k %= len(xs)
    return xs[k:] + xs[:k]


def start_table1(f, args, redis_port, floors):
    servers = {}
    for name, kind, how, durability in TABLE1:
        if kind == "beanstalkd":
            s = f.start_beanstalkd(name, how)
        else:
            s = f.start_delayq(name, args.server, how.format(redis=redis_port))
            s.info["redis"] = how.startswith("redis")
        s.info["durability"] = durability
        servers[name] = s
        say(f"{name}: {' '.join(s.cmd)} (pid {s.pid})")
    for name, how, durability in FLOORS if floors else []:
        s = f.start_beanstalkd(name, how, binary=args.floor)
        s.info["durability"] = durability
        s.info["floor"] = True
        servers[name] = s
        say(f"{name}: {' '.join(s.cmd)} (pid {s.pid})")
    return servers


def check_alive(servers):
    for s in servers.values():
        if not s.alive():
            raise RuntimeError(f"{s.name} (pid {s.pid}) is no longer running; its log:\n{s.log_tail()}")


def run_table1(servers, cfg, redis_pid):
    names = list(servers)
    rows = {}
    for r in range(cfg["rounds"]):
        for name in rotate(names, r):
            say(f"table 1, round {r + 1}/{cfg['rounds']}: {name}")
            res = scen.table1_round(servers[name], cfg, r, redis_pid)
            check_alive(servers)
            for row, fig in res.items():
                rows.setdefault(row, {}).setdefault(name, []).append(fig)
    return {row: {name: {"rounds": rs, "median_per_s": report.median([x["per_s"] for x in rs])}
                  for name, rs in by.items()} for row, by in rows.items()}


def run_backlog(f, args, cfg):
    kinds = [("beanstalkd-mem", "beanstalkd", []), ("delayq-memory", "delayq", "memory:")]
    per = {}
    for r in range(cfg["backlog_rounds"]):
        for name, kind, how in rotate(kinds, r):
            label = f"{name}-backlog-{r}"
            s = f.start_beanstalkd(label, how) if kind == "beanstalkd" else f.start_delayq(label, args.server, how)
            say(f"table 2, round {r + 1}/{cfg['backlog_rounds']}: {name} (fresh, pid {s.pid})")
            try:
                res = scen.backlog_round(s, cfg)
            finally:
                f.stop(label, s.proc)
                shutil.rmtree(s.workdir, ignore_errors=True)
            per.setdefault(name, []).append(res)
    out = {}
    for name, rounds in per.items():
        out[name] = {
            "rounds": rounds,
            "put_pipelined_per_s": report.median([x["put-pipelined"]["per_s"] for x in rounds]),
            "cycle_backlog_per_s": report.median([x["cycle-backlog"]["per_s"] for x in rounds]),
            "rss_holding_bytes": report.median([x["rss"]["holding_bytes"] for x in rounds]),
            "rss_per_job_bytes": report.median([x["rss"]["per_job_bytes"] for x in rounds]),
            "ready_wait_s": report.median([x["rss"]["ready_wait_s"] for x in rounds]),
        }
    return out


def run_checks(f, servers, cfg, quick):
    names = [n for n, s in servers.items() if not s.info.get("floor")]
    if quick:  # the memory pair only: the checks' cost is their waits
        names = ["beanstalkd-mem", "delayq-memory"]
    loops = f.busy_loops(cfg["busy_loops"])
    say(f"checks: {len(loops)} busy loops started (pids {' '.join(str(p.pid) for p in loops)})")
    out = {"ordering": {}, "timing": {}, "busy_loops": len(loops)}
    try:
        for name in names:
            say(f"ordering check: {name}, {cfg['ordering_tries']} tries")
            out["ordering"][name] = scen.ordering_check(servers[name], cfg["ordering_tries"])
            check_alive(servers)
        for name in names:
            say(f"timing check: {name}, {cfg['timing_tries']} tries, {cfg['timing_clients']} at once")
            out["timing"][name] = scen.timing_check(servers[name], cfg["timing_tries"], cfg["timing_clients"])
            check_alive(servers)
    finally:
        for p in loops:
            f.stop("busy loop", p)
    return out


def run_bullmq(f, args, redis_port, redis_pid):
    s = f.start_delayq("delayq-http-redis", args.server, f"redis://127.0.0.1:{redis_port}?prefix=peers-http",
                       beanstalk=False)
    say(f"table 3: {' '.join(s.cmd)} (pid {s.pid}), BullMQ on the same redis-server")
    out_file = os.path.join(f.workdir, "http-peers.json")
    cmd = ["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "http_peers.js"),
           "--delayq", f"http://127.0.0.1:{s.http_port}", "--delayq-pid", str(s.pid),
           "--redis-port", str(redis_port), "--redis-pid", str(redis_pid),
           "--worker-mode", args.worker_mode, "--clk-tck", str(os.sysconf("SC_CLK_TCK")), "--out", out_file]
    if args.quick:
        cmd.append("--quick")
    if args.rounds:
        cmd += ["--rounds", str(args.rounds)]
    env = dict(os.environ, NODE_PATH=args.node_modules)
    try:
        rc = f.run(cmd, env)
        if rc != 0:
            raise RuntimeError(f"http_peers.js exited {rc}; delayq-server's log:\n{s.log_tail()}")
        if not s.alive():
            raise RuntimeError(f"delayq-server (HTTP) died during table 3; its log:\n{s.log_tail()}")
        with open(out_file) as fh:
            res = json.load(fh)
        res["delayq_command"] = " ".join(s.cmd)
        return res
    finally:
        f.stop(s.name, s.proc)


def versions(args):
    def first_line(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
        except Exception:  # noqa: BLE001
            return "?"

    bullmq = "?"
    try:
        with open(os.path.join(args.node_modules, "bullmq", "package.json")) as fh:
            bullmq = json.load(fh)["version"]
    except OSError:
        pass
    return {
        "beanstalkd": first_line(["beanstalkd", "-v"]),
        "redis": first_line(["redis-server", "--version"]),
        "node": first_line(["node", "--version"]),
        "bullmq": bullmq,
        "python": platform.python_version(),
        "delayq_server": first_line([args.server, "--version"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="the delayq-server binary")
    ap.add_argument("--node-modules", required=True, help="where npm ci put bullmq")
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--machine", help="the machine header file (scripts/bench-peers.sh writes it)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0, help="rounds of tables 1 and 3 (default 3, quick 1)")
    ap.add_argument("--backlog-rounds", type=int, default=0)
    ap.add_argument("--only", default=",".join(PARTS), help="comma-separated: " + ",".join(PARTS))
    ap.add_argument("--worker-mode", default="auto",
                    help="auto, plain, next, both, batch, or a comma list of plain, next and batch")
    ap.add_argument("--command", default="", help="the command line to record")
    ap.add_argument("--floor", default="", help="delayq-bench-floor: table 1's floors (one connection)")
    args = ap.parse_args()

    only = [p for p in args.only.split(",") if p]
    for p in only:
        if p not in PARTS:
            ap.error(f"--only: unknown part {p!r} (parts: {', '.join(PARTS)})")
    cfg = dict(QUICK if args.quick else FULL)
    if args.rounds:
        cfg["rounds"] = args.rounds
    if args.backlog_rounds or args.rounds:
        cfg["backlog_rounds"] = args.backlog_rounds or args.rounds
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    # The script that started us may be killed outright: then we get a
    # SIGTERM and stop every server (they die with us, PR_SET_PDEATHSIG).
    processes.die_with_parent(signal.SIGTERM)
    work = tempfile.mkdtemp(prefix="delayq-bench-peers.")
    f = fleet(work, say)
    started = time.time()
    result = {"config": dict(cfg, quick=args.quick, parts=only), "pairs": PAIRS,
              "bounds": BOUNDS if args.floor else []}
    try:
        # One redis-server for table 1's redis:// row and all of table 3.
        redis = f.start_redis("redis")
        redis_port, redis_pid = redis.port, redis.pid
        say(f"redis: {' '.join(redis.cmd)} (pid {redis_pid})")
        result["redis"] = {"command": " ".join(redis.cmd), "appendonly": "yes", "appendfsync": "everysec",
                           "version": redis_info(redis_port, "server").get("redis_version")}
        result["versions"] = versions(args)
        servers = {}
        if "table1" in only or "checks" in only:
            # The floors take part in table 1's one-connection rows only.
            servers = start_table1(f, args, redis_port, bool(args.floor) and "table1" in only)
            result["table1_servers"] = {n: {"command": " ".join(s.cmd), "durability": s.info["durability"],
                                            "floor": bool(s.info.get("floor"))}
                                        for n, s in servers.items()}
        if "table1" in only:
            result["table1"] = run_table1(servers, cfg, redis_pid)
        if "backlog" in only:
            result["backlog"] = run_backlog(f, args, cfg)
        if "checks" in only:
            result["checks"] = run_checks(f, servers, cfg, args.quick)
        f.stop_many([(n, s.proc) for n, s in servers.items()])
        if "bullmq" in only:
            result["bullmq"] = run_bullmq(f, args, redis_port, redis_pid)
    except interrupted as e:
        say(f"interrupted ({e}): stopping every server")
        f.stop_all()
        shutil.rmtree(work, ignore_errors=True)
        return 130
    except Exception:
        f.stop_all()
        say(f"failed; the servers' logs are in {work}")
        raise
    finally:
        f.stop_all()
    shutil.rmtree(work, ignore_errors=True)

    result["seconds"] = round(time.time() - started, 1)
    machine = ""
    if args.machine and os.path.exists(args.machine):
        with open(args.machine) as fh:
            machine = fh.read()
    load = open("/proc/loadavg").read().split()[:3]
    machine += f"load:       {' '.join(load)} (1, 5, 15 min) at the end\n"
    machine += f"run:        {result['seconds']} s\n"
    if args.machine:
        with open(args.machine, "w") as fh:
            fh.write(machine)
    result["machine"] = machine
    result["command"] = args.command
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.json"), "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
        fh.write("\n")
    tables = report.write_all(result, args.out)
    print(tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())

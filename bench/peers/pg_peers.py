#!/usr/bin/env python3
"""bench/peers/pg_peers.py - the driver of issue 34's side-by-side benchmark:
delayq-server on PostgreSQL against pg-boss and graphile-worker.
scripts/bench-pg-peers.sh runs it under scripts/with-postgres.sh (which
exports DELAYQ_TEST_POSTGRES, DELAYQ_TEST_POSTGRES_DIR) after installing what
it needs; run that script, not this file (its --help tells the whole run).

On the one PostgreSQL server it makes a database per system (peers_delayq,
peers_pgboss, peers_graphile), starts delayq-server on
postgres://.../peers_delayq?schema=delayq on a free loopback port
(processes.py: stopped at the end, on an error, on SIGINT or SIGTERM, and
with this driver), runs pg_peers.js (Node.js: the three systems side by
side), and writes OUT/pg-peers.json and, through pg_report.py, the table and
the plot's input.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pg_report  # noqa: E402
import processes  # noqa: E402
from processes import fleet  # noqa: E402

DATABASES = {"delayq": "peers_delayq", "pgboss": "peers_pgboss", "graphile": "peers_graphile"}

_t0 = time.monotonic()


def say(msg):
    print(f"bench-pg-peers [{time.monotonic() - _t0:6.1f} s]: {msg}", file=sys.stderr, flush=True)


class interrupted(Exception):
    pass


_signalled = []


def _on_signal(signum, _frame):
    # Once: a second signal must not interrupt the clean-up the first began.
    if not _signalled:
        _signalled.append(signum)
        raise interrupted(f"signal {signum}")


def with_database(url, db):
    """URL (postgres://USER:PASS@HOST:PORT/DB) with another database."""
    u = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))


def psql(url, sql):
    """One statement through psql (the password from the URL)."""
    u = urllib.parse.urlsplit(url)
    env = dict(os.environ, PGPASSWORD=urllib.parse.unquote(u.password or ""))
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", u.hostname, "-p", str(u.port),
                    "-U", urllib.parse.unquote(u.username or ""), "-d", u.path.lstrip("/") or "postgres",
                    "-c", sql], check=True, env=env, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="the delayq-server binary")
    ap.add_argument("--node-modules", required=True, help="where npm ci put pg-boss and graphile-worker")
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--machine", help="the machine header file (scripts/bench-pg-peers.sh writes it)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default 3, quick 1)")
    ap.add_argument("--worker-mode", default="auto",
                    help="auto, plain, next, both, batch, or a comma list of plain, next and batch")
    ap.add_argument("--pgboss", default="", help="JSON overriding pg-boss's settings (pg_peers.js)")
    ap.add_argument("--graphile", default="", help="JSON overriding graphile-worker's settings (pg_peers.js)")
    ap.add_argument("--systems", default="", help="some of delayq,pg-boss,graphile-worker (default all)")
    ap.add_argument("--spread-ms", type=int, default=0, help="the lateness row's spread (default 5000)")
    ap.add_argument("--delayq-store", default="",
                    help="a diagnostic: delayq's side on this store instead (e.g. memory:, the floor "
                         "of the client and the HTTP path); its bytes row then reads an empty schema")
    ap.add_argument("--command", default="", help="the command line to record")
    args = ap.parse_args()

    base = os.environ.get("DELAYQ_TEST_POSTGRES")
    pgdir = os.environ.get("DELAYQ_TEST_POSTGRES_DIR")
    if not base or not pgdir:
        ap.error("no DELAYQ_TEST_POSTGRES: run under scripts/with-postgres.sh (scripts/bench-pg-peers.sh does)")
    with open(os.path.join(pgdir, "data", "postmaster.pid")) as fh:
        pg_pid = int(fh.readline())

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    processes.die_with_parent(signal.SIGTERM)
    work = tempfile.mkdtemp(prefix="delayq-bench-pg-peers.")
    f = fleet(work, say)
    started = time.time()
    result = {"config": {"quick": args.quick}}
    try:
        urls = {}
        for sys_name, db in DATABASES.items():
            psql(base, f"CREATE DATABASE {db}")
            urls[sys_name] = with_database(base, db)
        store = urls["delayq"] + "?schema=delayq"
        s = f.start_delayq("delayq-pg", args.server, args.delayq_store or store, beanstalk=False)
        # The command as recorded: the password masked.
        shown = [c.replace(urllib.parse.urlsplit(base).password or "\0", "***") for c in s.cmd]
        say(f"delayq-server: {' '.join(shown)} (pid {s.pid}); PostgreSQL pid {pg_pid}")
        out_file = os.path.join(work, "pg-peers-node.json")
        cmd = ["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pg_peers.js"),
               "--delayq", f"http://127.0.0.1:{s.http_port}", "--delayq-pid", str(s.pid),
               "--delayq-db", store, "--pgboss-db", urls["pgboss"], "--graphile-db", urls["graphile"],
               "--pg-pid", str(pg_pid), "--worker-mode", args.worker_mode,
               "--clk-tck", str(os.sysconf("SC_CLK_TCK")), "--out", out_file]
        if args.quick:
            cmd.append("--quick")
        if args.rounds:
            cmd += ["--rounds", str(args.rounds)]
        if args.pgboss:
            cmd += ["--pgboss", args.pgboss]
        if args.graphile:
            cmd += ["--graphile", args.graphile]
        if args.systems:
            cmd += ["--systems", args.systems]
        if args.spread_ms:
            cmd += ["--spread-ms", str(args.spread_ms)]
        env = dict(os.environ, NODE_PATH=args.node_modules)
        rc = f.run(cmd, env)
        if rc != 0:
            raise RuntimeError(f"pg_peers.js exited {rc}; delayq-server's log:\n{s.log_tail()}")
        if not s.alive():
            raise RuntimeError(f"delayq-server died during the run; its log:\n{s.log_tail()}")
        with open(out_file) as fh:
            result.update(json.load(fh))
        result["delayq_command"] = " ".join(shown)
        result["delayq_log_tail"] = s.log_tail(40)
        f.stop(s.name, s.proc)
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
    with open(os.path.join(args.out, "pg-peers.json"), "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
        fh.write("\n")
    print(pg_report.write_all(result, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

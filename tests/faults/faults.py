#!/usr/bin/python3
"""The fault harness (issue 33): three delayq-server instances under
--cluster, Redis, and a client with a push receiver, each in a network
namespace of its own, run through partitions, pauses, kills, clock skew, slow
and lossy links and a hostile client, with a checker that counts every task.

    python3 tests/faults/faults.py --server build/server/delayq-server [--full] [--out DIR]

As root (network namespaces). This process stays in the root namespace only
to make and remove the namespaces; everything else (the driver, the
workload, the receiver, the checker's reads) runs inside them. It removes
what it made on exit, on SIGINT and SIGTERM; the namespaces of an earlier run
that was killed with SIGKILL are removed at the next start.

Modes:
  (default) short: each fault once, 4 s on (twice the lease) and 3 s off
                   (about 2 minutes): CI
  --full:          each fault twice, 10 s on and 10 s off, then 60 s of
                   faults mixed (about 11 minutes)
"""

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="the delayq-server binary")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--out", help="where the run's history, logs and report go (default: a temp dir)")
    ap.add_argument("--lease-ms", type=int, default=2000)
    ap.add_argument("--only", default="", help="comma-separated fault names (default: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--on-s", type=float)
    ap.add_argument("--off-s", type=float)
    ap.add_argument("--cycles", type=int)
    ap.add_argument("--mix-s", type=float)
    ap.add_argument("--mix-of", default="", help="comma-separated faults the mix picks from")
    ap.add_argument("--warmup-s", type=float, default=4)
    ap.add_argument("--server-arg", action="append", default=[])
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("faults.py: needs root (it makes network namespaces)")
    for tool in ("ip", "redis-server", "redis-cli", "setpriv"):
        if subprocess.run(["which", tool], stdout=subprocess.DEVNULL).returncode != 0:
            sys.exit("faults.py: %s not found (scripts/common.sh installs what the harness needs)" % tool)
    if not os.path.exists("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"):
        sys.exit("faults.py: libfaketime not found (Debian package faketime)")
    server = os.path.abspath(args.server)
    if not os.access(server, os.X_OK):
        sys.exit("faults.py: %s is not an executable" % server)

    full = args.full
    on_s = args.on_s if args.on_s is not None else (10 if full else 4)
    off_s = args.off_s if args.off_s is not None else (10 if full else 3)
    cycles = args.cycles if args.cycles is not None else (2 if full else 1)
    mix_s = args.mix_s if args.mix_s is not None else (60 if full else 0)

    run_dir = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="delayq-faults.")
    os.makedirs(run_dir, exist_ok=True)
    prefix = "dqf-%d" % os.getpid()
    net = netns.Network(prefix)

    stale = netns.remove_stale()
    if stale:
        print("faults: removed %d namespaces of an earlier run that was killed: %s" %
              (len(stale), " ".join(stale)), flush=True)

    driver = None

    def cleanup(*_):
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()
        net.destroy()

    def on_signal(signum, _):
        cleanup()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    rc = 1
    try:
        net.create()
        net.check_isolated()
        commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", HERE, "diff", "--quiet", "HEAD"]).returncode != 0
        command = " ".join(shlex.quote(a) for a in sys.argv)
        argv = ["ip", "netns", "exec", net.ns("client"), "setpriv", "--pdeathsig", "KILL",
                sys.executable, os.path.join(HERE, "driver.py"), "--prefix", prefix,
                "--run-dir", run_dir, "--server", server, "--mode", "full" if full else "short",
                "--lease-ms", str(args.lease_ms), "--on-s", str(on_s), "--off-s", str(off_s),
                "--cycles", str(cycles), "--mix-s", str(mix_s), "--seed", str(args.seed),
                "--only", args.only, "--mix-of", args.mix_of, "--warmup-s", str(args.warmup_s),
                "--commit", commit + ("+dirty" if dirty else ""),
                "--command", command]
        for a in args.server_arg:
            argv += ["--server-arg=" + a]
        print("faults: %s run, %d faults, namespaces %s-*, output in %s" %
              ("full" if full else "short", len(args.only.split(",")) if args.only else 14,
               prefix, run_dir), flush=True)
        started = time.time()
        driver = subprocess.Popen(argv)
        rc = driver.wait()
        if rc != 0:
            print("faults: the driver failed (exit %d); logs in %s/logs" % (rc, run_dir))
            return rc
        rc = subprocess.run([sys.executable, os.path.join(HERE, "checker.py"), run_dir]).returncode
        print("faults: %.0f s in all; history, logs and report.json in %s" %
              (time.time() - started, run_dir), flush=True)
        return rc
    finally:
        cleanup()


if __name__ == "__main__":
    sys.exit(main())

"""The fault harness's driver. Runs inside the client's namespace (faults.py
starts it there): starts Redis, the proxy and three delayq-server instances in
their own namespaces, runs the workload through the nemeses' schedule, heals,
waits for every due task, and hands the history to the checker.

Every process it starts runs under `setpriv --pdeathsig KILL`, started from
the main thread, so that none outlives the driver.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402
import netns  # noqa: E402
import proxy as proxy_ctl  # noqa: E402
from workload import PULL_TYPE, PUSH_TYPE, Hostile, Receiver, Recorder, Workload  # noqa: E402

HTTP_PORT, BS_PORT, REDIS_PORT, PROXY_PORT, RECEIVER_PORT = 7700, 11300, 6379, 6380, 8088
TOKEN = "fault-harness-token-0123456789"
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


class Cluster:
    instances = ["s1", "s2", "s3"]

    def __init__(self, args, rec):
        self.args, self.rec = args, rec
        self.net = netns.Network(args.prefix)
        self.run_dir = args.run_dir
        self.procs = {}
        self.incarnation = {}
        self.redis_dir = os.path.join(self.run_dir, "redis")
        os.makedirs(self.redis_dir, exist_ok=True)
        os.makedirs(os.path.join(self.run_dir, "logs"), exist_ok=True)
        self.proxy_sock = os.path.join(self.run_dir, "proxy.sock")

    def http_addr(self, inst):
        return netns.host_addr(inst), HTTP_PORT

    def bs_addr(self, inst):
        return netns.host_addr(inst), BS_PORT

    def event(self, **kw):
        kw.setdefault("t", time.time())
        kw["ev"] = kw.get("ev", "proc")
        self.rec.add(kw)

    def spawn(self, party, name, argv, env=None):
        n = self.incarnation.get(name, 0)
        self.incarnation[name] = n + 1
        log = open(os.path.join(self.run_dir, "logs", "%s.%d.log" % (name, n)), "w")
        full = ["ip", "netns", "exec", self.net.ns(party), "setpriv", "--pdeathsig", "KILL"] + argv
        e = dict(os.environ)
        if env:
            e.update(env)
        p = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, env=e,
                             stdin=subprocess.DEVNULL)
        p.log_path = log.name
        log.close()
        self.procs[name] = p
        self.event(party=party, name=name, what="start", pid=p.pid)
        return p

    def wait_for_line(self, name, text, timeout=20):
        p = self.procs[name]
        end = time.time() + timeout
        while time.time() < end:
            with open(p.log_path, errors="replace") as f:
                if text in f.read():
                    return True
            if p.poll() is not None:
                raise RuntimeError("%s exited (%s) before saying %r; see %s" %
                                   (name, p.returncode, text, p.log_path))
            time.sleep(0.05)
        raise RuntimeError("%s did not say %r within %d s; see %s" % (name, text, timeout, p.log_path))

    # ---- Redis (its data and AOF in run_dir/redis) ----
    def start_redis(self):
        self.spawn("redis", "redis", [
            "redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1",
            "--protected-mode", "no", "--save", "", "--appendonly", "yes",
            "--appendfsync", "always", "--dir", self.redis_dir, "--daemonize", "no"])
        self.wait_for_line("redis", "Ready to accept connections")

    def redis_cli(self, *args):
        r = subprocess.run(["ip", "netns", "exec", self.net.ns("redis"), "redis-cli", "-p",
                            str(REDIS_PORT)] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        return r.stdout

    def start_proxy(self):
        self.spawn("redis", "proxy", [
            sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "proxy.py"),
            "--listen", "%s:%d" % (netns.host_addr("redis"), PROXY_PORT),
            "--to", "127.0.0.1:%d" % REDIS_PORT, "--control", self.proxy_sock])
        self.wait_for_line("proxy", "proxy listening")

    def proxy(self, **cmd):
        return proxy_ctl.send(self.proxy_sock, **cmd)

    # ---- delayq-server ----
    def skew_file(self, inst):
        return os.path.join(self.run_dir, "%s.faketime" % inst)

    def set_skew(self, inst, spec):
        with open(self.skew_file(inst), "w") as f:
            f.write(spec + "\n")

    def start_server(self, inst, wait=True):
        if not os.path.exists(self.skew_file(inst)):
            self.set_skew(inst, "+0")
        a = self.args
        argv = [a.server,
                "--store", "redis://%s:%d/0?prefix=faults" % (netns.host_addr("redis"), PROXY_PORT),
                "--listen", "0.0.0.0:%d" % HTTP_PORT, "--token", TOKEN,
                "--cluster", "--shards", str(a.shards), "--lease", "%dms" % a.lease_ms,
                "--instance", inst, "--advertise", "http://%s:%d" % (netns.host_addr(inst), HTTP_PORT),
                "--forward-timeout", "5s",
                "--push-allow", netns.host_addr("client") + "/32",
                "--beanstalk-listen", "0.0.0.0:%d" % BS_PORT,
                "--beanstalk-allow", "10.201.0.0/16",
                "--max-connections", str(a.max_connections),
                "--retry-base", "200", "--retry-cap", "1000", "--retry-max", "10",
                "--tick", "1", "--drain-timeout", "2s"]
        argv += a.server_arg
        # Every instance runs under libfaketime, its offset read from a file
        # (re-read every second) that the clock nemesis writes; steady_clock
        # is left alone.
        env = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": self.skew_file(inst),
               "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_CACHE_DURATION": "1"}
        self.spawn(inst, inst, argv, env)
        if wait:
            self.wait_for_line(inst, "listening on")

    def signal(self, name, sig):
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return False
        # `ip netns exec` and setpriv exec the program: p.pid is its pid.
        os.kill(p.pid, sig)
        self.event(name=name, what={signal.SIGKILL: "kill", signal.SIGSTOP: "stop",
                                    signal.SIGCONT: "cont"}.get(sig, str(sig)), pid=p.pid)
        if sig == signal.SIGKILL:
            p.wait()
        return True

    def alive(self, name):
        p = self.procs.get(name)
        return p is not None and p.poll() is None

    def stop_all(self):
        for name, p in self.procs.items():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def http(self, inst, method, path, body=None, timeout=5):
        host, port = self.http_addr(inst)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request("http://%s:%d%s" % (host, port, path), data=data, method=method)
        req.add_header("Authorization", "Bearer " + TOKEN)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError as e:
            return 0, str(e).encode()


# ---- nemeses ----
# kind: which bound the checker applies to the tasks a fault delays
#   "instance": 2 leases + 1 tick after the later of the due time and the
#               fault's start (docs/scale-out.md, "Stalled instances")
#   "redis":    2 leases + 1 tick after the later of the due time and the
#               fault's end (nothing runs its course without the store)
#   "clock":    as "instance"; early and late measured on the true clock
class Nemesis:
    kind = "instance"
    per_instance = True

    def __init__(self, c):
        self.c = c

    def on(self, target):
        raise NotImplementedError

    def off(self, target):
        raise NotImplementedError


class PartRedis(Nemesis):
    name = "partition-redis"

    def on(self, t):
        self.c.net.set_link(t, "redis", False)

    def off(self, t):
        self.c.net.set_link(t, "redis", True)


class PartPeers(Nemesis):
    name = "partition-peers"

    def on(self, t):
        for o in Cluster.instances:
            if o != t:
                self.c.net.set_link(t, o, False)

    def off(self, t):
        for o in Cluster.instances:
            if o != t:
                self.c.net.set_link(t, o, True)


class PartBoth(Nemesis):
    name = "partition-both"

    def on(self, t):
        PartRedis(self.c).on(t)
        PartPeers(self.c).on(t)

    def off(self, t):
        PartRedis(self.c).off(t)
        PartPeers(self.c).off(t)


class RedisPause(Nemesis):
    name = "redis-pause"
    kind = "redis"
    per_instance = False

    def on(self, t):
        self.c.signal("redis", signal.SIGSTOP)

    def off(self, t):
        self.c.signal("redis", signal.SIGCONT)


class RedisKill(Nemesis):
    name = "redis-kill"
    kind = "redis"
    per_instance = False

    def on(self, t):
        self.c.signal("redis", signal.SIGKILL)

    def off(self, t):
        self.c.start_redis()


class Pause(Nemesis):
    name = "instance-pause"

    def on(self, t):
        self.c.signal(t, signal.SIGSTOP)

    def off(self, t):
        self.c.signal(t, signal.SIGCONT)


class Kill(Nemesis):
    name = "instance-kill"

    def on(self, t):
        self.c.signal(t, signal.SIGKILL)

    def off(self, t):
        self.c.start_server(t)


class ClockAhead(Nemesis):
    name = "clock-ahead"
    kind = "clock"
    skew = "+5s"

    def on(self, t):
        self.c.set_skew(t, self.skew)

    def off(self, t):
        self.c.set_skew(t, "+0")


class ClockBehind(ClockAhead):
    name = "clock-behind"
    skew = "-5s"


class LinkSlow(Nemesis):
    name = "link-slow"
    mode = {"mode": "delay", "ms": 100, "jitter_ms": 200}

    def on(self, t):
        self.c.proxy(cmd="set", src=netns.host_addr(t), **self.mode)

    def off(self, t):
        self.c.proxy(cmd="clear", src=netns.host_addr(t))


class LinkStall(LinkSlow):
    name = "link-stall"
    mode = {"mode": "stall"}


class LinkDrop(LinkSlow):
    name = "link-drop"
    mode = {"mode": "drop"}


class LinkLossy(LinkSlow):
    name = "link-lossy"
    mode = {"mode": "lossy", "ms": 20, "jitter_ms": 300, "reset_every_s": 2}


class HostileClient(Nemesis):
    name = "hostile-client"
    kind = "instance"

    def on(self, t):
        self.h = Hostile(self.c, self.c.rec, t, self.c.args.max_connections + 64)
        self.h.start()

    def off(self, t):
        stats = self.h.finish()
        self.c.event(ev="hostile", target=t, **stats)


NEMESES = [PartRedis, PartPeers, PartBoth, RedisPause, RedisKill, Pause, Kill, ClockAhead,
           ClockBehind, LinkSlow, LinkStall, LinkDrop, LinkLossy, HostileClient]

# What may run at once in the mix: at most one Redis fault, and each
# instance under one fault at most.
def mix_pick(rng, c):
    pool = [n for n in NEMESES if not c.args.mix_of or n.name in c.args.mix_of.split(",")]
    redis_ones = [n for n in pool if not n.per_instance]
    inst_ones = [n for n in pool if n.per_instance]
    if not redis_ones or len(inst_ones) < 2:
        picks = []
        targets = rng.sample(list(Cluster.instances), 2)
        for n, t in zip(rng.sample(pool, min(2, len(pool))), targets):
            picks.append((n(c), t if n.per_instance else None))
        return picks
    picks = []
    targets = list(Cluster.instances)
    rng.shuffle(targets)
    if rng.random() < 0.4:
        picks.append((rng.choice(redis_ones)(c), None))
        picks.append((rng.choice(inst_ones)(c), targets[0]))
    else:
        a, b = rng.sample(inst_ones, 2)
        picks.append((a(c), targets[0]))
        picks.append((b(c), targets[1]))
    return picks


def monitor(c, rec, stop):
    """Every 250 ms, each instance's lease figures (GET /v1/stats): which
    shards it holds, hands over, and whether its lease rounds go on, for
    reading a late task's story afterwards."""
    from workload import Api
    api = Api(c, TOKEN, 2)
    while not stop.is_set():
        for inst in Cluster.instances:
            st, js, hd, t0, t1 = api.call(inst, "GET", "/v1/stats")
            if st == 200 and isinstance(js, dict):
                rec.add({"ev": "stats", "t": t1, "inst": inst,
                         "held": js.get("shards_held"), "leaving": js.get("shards_leaving"),
                         "rounds": js.get("lease_rounds"), "gained": js.get("shards_gained"),
                         "lost": js.get("shards_lost"), "kept": js.get("writes_kept"),
                         "ready": (js.get("server") or {}).get("ready_for_consumers")})
        stop.wait(0.25)


def run(args):
    rec = Recorder()
    c = Cluster(args, rec)
    rng = random.Random(args.seed)
    meta = {"lease_ms": args.lease_ms, "tick_ms": 1, "mode": args.mode, "seed": args.seed,
            "shards": args.shards, "on_s": args.on_s, "off_s": args.off_s,
            "cycles": args.cycles, "commit": args.commit, "command": args.command,
            "started": time.time()}
    receiver = Receiver(netns.host_addr("client"), RECEIVER_PORT, rec)
    receiver.start()
    c.start_redis()
    c.start_proxy()
    for inst in Cluster.instances:
        c.start_server(inst, wait=False)
    for inst in Cluster.instances:
        c.wait_for_line(inst, "listening on")
    # The push type, on one instance: cluster-wide through the store.
    url = "http://%s:%d/push" % (netns.host_addr("client"), RECEIVER_PORT)
    for _ in range(100):
        st, body = c.http("s1", "PUT", "/v1/types/" + PUSH_TYPE,
                          {"push_url": url, "timeout_ms": 3000, "concurrency": 64})
        if st == 204:
            break
        time.sleep(0.2)
    else:
        raise RuntimeError("could not register the push type: %s %s" % (st, body))
    # Every instance holds shards before the workload starts.
    end = time.time() + 30
    while time.time() < end:
        held = []
        for inst in Cluster.instances:
            st, body = c.http(inst, "GET", "/v1/stats")
            held.append(json.loads(body).get("shards_held", 0) if st == 200 else 0)
        if all(h > 0 for h in held) and sum(held) == args.shards:
            break
        time.sleep(0.2)
    c.event(ev="phase", name="warmup")
    work = Workload(c, rec, TOKEN, args.seed)
    work.start()
    work.spawn(monitor, c, rec, work.stop)
    time.sleep(args.warmup_s)

    active = []  # (nemesis, target) on now

    fence_marks = []  # (phase, refusals counted at the store when it began)

    def fence_sum():
        total = 0
        for s in range(args.shards):
            v = c.redis_cli("HGET", "{faults:%d}:lease" % s, "fence_refused").strip()
            total += int(v) if v.isdigit() else 0
        return total

    def phase(name):
        fence_marks.append((name, fence_sum()))
        c.event(ev="phase", name=name)

    def fault(n, target, on):
        rec.add({"ev": "fault", "t": time.time(), "name": n.name, "kind": n.kind,
                 "target": target, "on": on})
        (n.on if on else n.off)(target)
        rec.add({"ev": "fault_done", "t": time.time(), "name": n.name, "target": target, "on": on})

    def heal_all():
        for n, t in active:
            fault(n, t, False)
        active.clear()

    schedule = []
    names = args.only.split(",") if args.only else [n.name for n in NEMESES]
    for i, cls in enumerate([n for n in NEMESES if n.name in names]):
        schedule.append(("single", cls))
    if args.mix_s > 0:
        schedule.append(("mix", None))
    try:
        for idx, (what, cls) in enumerate(schedule):
            if what == "single":
                phase(cls.name)
                for k in range(args.cycles):
                    n = cls(c)
                    target = Cluster.instances[(idx + k) % 3] if n.per_instance else None
                    fault(n, target, True)
                    active.append((n, target))
                    time.sleep(args.on_s)
                    heal_all()
                    time.sleep(args.off_s)
            else:
                phase("mix")
                end = time.time() + args.mix_s
                while time.time() < end:
                    for n, t in mix_pick(rng, c):
                        fault(n, t, True)
                        active.append((n, t))
                    time.sleep(args.on_s)
                    heal_all()
                    time.sleep(args.off_s)
    finally:
        heal_all()
    phase("drain")
    work.stop_producing.set()
    time.sleep(0.5)
    # Wait for every due task: until nothing acknowledged is missing, or the
    # last due time + 2 leases + 30 s.
    deadline = checker.last_due(rec.events) + 2 * args.lease_ms / 1000.0 + 30
    while time.time() < deadline:
        missing = checker.missing_now(rec.events, time.time())
        if not missing:
            break
        time.sleep(1)
    meta["drained_at"] = time.time()
    work.join(15)
    # What the servers and the store counted.
    metrics = {}
    for inst in Cluster.instances:
        st, body = c.http(inst, "GET", "/metrics")
        metrics[inst] = body.decode(errors="replace") if st == 200 else ""
    refused = fence_sum()
    meta["fence_refused_at_store"] = refused
    fence_marks.append(("end", refused))
    meta["fence_by_phase"] = {"warmup": fence_marks[0][1] if fence_marks else refused}
    for (name, at), (_, nxt) in zip(fence_marks, fence_marks[1:]):
        meta["fence_by_phase"][name] = nxt - at
    meta["metrics"] = metrics
    meta["ended"] = time.time()
    receiver.close()
    c.stop_all()
    hist = os.path.join(args.run_dir, "history.jsonl")
    n = rec.dump(hist)
    with open(os.path.join(args.run_dir, "meta.json"), "w") as f:
        json.dump(meta, f)
    print("driver: %d events in %s" % (n, hist), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--mode", default="short")
    ap.add_argument("--lease-ms", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--on-s", type=float, default=5)
    ap.add_argument("--off-s", type=float, default=4)
    ap.add_argument("--cycles", type=int, default=1)
    ap.add_argument("--mix-s", type=float, default=0)
    ap.add_argument("--warmup-s", type=float, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--mix-of", default="", help="the faults the mix picks from (default: all)")
    ap.add_argument("--max-connections", type=int, default=256)
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--commit", default="")
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    run(args)


if __name__ == "__main__":
    main()

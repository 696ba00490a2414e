"""bench/peers/beanstalk_scenarios.py - what the peer benchmark does over
beanstalkd's protocol (tables 1 and 2, the ordering and timing checks), with
the one client of beanstalk_client.py against every server.

Each function takes servers (processes.server) and returns plain dicts that
peers.py writes into peers.json; report.py turns them into tables.
"""

import statistics
import threading
import time
import uuid

import beanstalk_client as bc
from processes import cpu_seconds, rss_bytes


def _median(xs):
    return statistics.median(xs) if xs else None


class _usage:
    """CPU seconds of the servers involved and of this client, over a span."""

    def __init__(self, pids):
        self.pids = {k: v for k, v in pids.items() if v}
        self.before = {k: cpu_seconds(p) for k, p in self.pids.items()}
        self.client0 = time.process_time()

    def done(self):
        out = {k + "_cpu_s": round(cpu_seconds(p) - self.before[k], 3) for k, p in self.pids.items()}
        out["client_cpu_s"] = round(time.process_time() - self.client0, 3)
        return out


def _pids(srv, redis_pid):
    return {"server": srv.pid, "redis": redis_pid if srv.info.get("redis") else None}


def _take_all(c, n, name):
    """N jobs that were put and acknowledged, each taken on C with
    reserve-with-timeout 1 and delete. Returns (seconds, timed_out): a
    TIMED_OUT while jobs are there is a job acknowledged but not yet ready;
    it is counted, shown, and retried (at most 100 times)."""
    timed = done = 0
    t0 = time.perf_counter()
    while done < n:
        got = c.reserve(1)
        if got is None:
            timed += 1
            if timed > 100:
                raise bc.protocol_error(f"{name}: 100 reserves timed out with jobs put and acknowledged")
            continue
        c.delete(got[0])
        done += 1
    return time.perf_counter() - t0, timed


# --- table 1 ---------------------------------------------------------------

def table1_round(srv, cfg, round_no, redis_pid):
    """One round of table 1 on SRV: N puts one at a time on one connection,
    then N reserve+delete cycles on it (the jobs just put), then
    put/reserve/delete on 8 connections. Returns {row: figures}."""
    tube = f"peers-t1-{round_no}-{uuid.uuid4().hex[:8]}"
    body = b"x" * cfg["body_bytes"]
    n = cfg["sequential"]
    out = {}
    with bc.conn("127.0.0.1", srv.beanstalk_port) as c:
        # Warm-up, untimed: the connection, the server's caches and (for a
        # store) its files have seen this work once before it is timed.
        c.use(tube + "-warm")
        c.watch_only(tube + "-warm")
        for _ in range(cfg["warmup"]):
            c.put(body)
        for _ in range(cfg["warmup"]):
            got = c.reserve(5)
            if got is None:
                raise bc.protocol_error(f"{srv.name}: a warm-up job was not ready within 5 s")
            c.delete(got[0])
        c.use(tube)
        c.watch_only(tube)
        c.command(b"ignore " + (tube + "-warm").encode())
        u = _usage(_pids(srv, redis_pid))
        t0 = time.perf_counter()
        for _ in range(n):
            c.put(body)
        secs = time.perf_counter() - t0
        out["put-1"] = dict(ops=n, seconds=round(secs, 4), per_s=n / secs, **u.done())

        u = _usage(_pids(srv, redis_pid))
        secs, timed = _take_all(c, n, srv.name)
        out["cycle-1"] = dict(ops=n, seconds=round(secs, 4), per_s=n / secs, timed_out=timed, **u.done())

    if srv.info.get("floor"):
        return out  # a floor bounds one request at a time: no group commit to bound
    conns, total = cfg["connections"], cfg["concurrent_cycles"]
    u = _usage(_pids(srv, redis_pid))
    secs, timed = bc.cycles_on_connections("127.0.0.1", srv.beanstalk_port, tube + "-8", conns, total, body)
    out[f"cycle-{conns}"] = dict(ops=total, seconds=round(secs, 4), per_s=total / secs, timed_out=timed,
                                 **u.done())
    return out


# --- table 2 ---------------------------------------------------------------

def backlog_round(srv, cfg):
    """Table 2 on a fresh SRV: CFG backlog puts pipelined (backlog_in_flight
    in flight) on one connection, the RSS once they are all ready, then each
    taken with reserve + delete, one at a time."""
    n = cfg["backlog"]
    body = b"x" * cfg["backlog_body_bytes"]
    tube = "peers-backlog"
    rss0 = rss_bytes(srv.pid)
    u = _usage({"server": srv.pid})
    secs = bc.pipelined_puts("127.0.0.1", srv.beanstalk_port, tube, n, cfg["backlog_in_flight"], body)
    puts = dict(ops=n, seconds=round(secs, 4), per_s=n / secs, **u.done())
    with bc.conn("127.0.0.1", srv.beanstalk_port) as c:
        c.watch_only(tube)
        # "Holding N ready jobs": wait (at most 60 s) until stats-tube says
        # they all are, so a job still on its way is not missed in the RSS.
        t0 = time.perf_counter()
        ready = 0
        while time.perf_counter() - t0 < 60:
            ready = int((c.stats_tube(tube) or {}).get("current-jobs-ready", 0))
            if ready >= n:
                break
            time.sleep(0.01)
        ready_after = time.perf_counter() - t0
        if ready < n:
            raise bc.protocol_error(f"{srv.name}: {ready} of {n} jobs ready 60 s after the last INSERTED")
        rss1 = rss_bytes(srv.pid)
        u = _usage({"server": srv.pid})
        secs, timed = _take_all(c, n, srv.name)
    cycles = dict(ops=n, seconds=round(secs, 4), per_s=n / secs, timed_out=timed, **u.done())
    return {
        "put-pipelined": puts,
        "cycle-backlog": cycles,
        "rss": dict(before_bytes=rss0, holding_bytes=rss1, per_job_bytes=(rss1 - rss0) / n,
                    ready_wait_s=round(ready_after, 4)),
    }


# --- the checks ------------------------------------------------------------

def ordering_check(srv, tries):
    """Put priority 2, put priority 1, reserve: the priority-1 job must come
    back, TRIES times on one connection. A reserve is plain `reserve` (what
    a client's default is), with a 10 s socket timeout in case none comes."""
    tube = f"peers-order-{uuid.uuid4().hex[:8]}"
    ok = 0
    wrong = []
    with bc.conn("127.0.0.1", srv.beanstalk_port, timeout=10) as c:
        c.use(tube)
        c.watch_only(tube)
        for i in range(tries):
            a = c.put(b"pri-2", pri=2)
            b = c.put(b"pri-1", pri=1)
            got, _ = c.reserve()
            if got == b:
                ok += 1
            elif len(wrong) < 10:
                wrong.append(i)
            c.delete(got)
            other, _ = c.reserve()
            if {got, other} != {a, b}:
                raise bc.protocol_error(f"{srv.name}: reserved {got} and {other}, put {a} and {b}")
            c.delete(other)
    return {"ok": ok, "tries": tries, "first_failed_tries": wrong}


def _parity_client(port, tube, barrier, window, out):
    """One client of the timing check: its job released with delay 2, then
    reserve-with-timeout 1 twice. OUT gets the outcome and two times: from
    sending the release to the job's RESERVED ("sent"), and from its
    RELEASED to the job ("acked"). The server starts the 2 s somewhere
    between the two, so the job is on time when it comes no earlier than
    2 s - WINDOW after the send and no later than 2 s + WINDOW after the
    RELEASED: a server slow to answer the release itself (beanstalkd -f 0
    fsyncs 50 releases one after the other) is not counted late for it."""
    try:
        with bc.conn("127.0.0.1", port, timeout=30) as c:
            c.use(tube)
            c.watch_only(tube)
            job = c.put(b"parity")
            got = c.reserve(5)
            if got is None or got[0] != job:
                out["outcome"] = "setup: the put job was not reserved"
                return
            barrier.wait(30)
            t0 = time.perf_counter()
            c.release(job, 0, 2)
            t_ack = time.perf_counter()
            first = c.reserve(1)
            t1 = time.perf_counter()
            if first is not None:
                out["outcome"] = "early: the first reserve got the job"
                out["sent"], out["acked"] = t1 - t0, t1 - t_ack
                c.delete(first[0])
                return
            second = c.reserve(1)
            t2 = time.perf_counter()
            if second is None:
                out["outcome"] = "missed: the second reserve timed out"
                # The job is still there: take it so the tube ends empty.
                got = c.reserve(5)
                if got:
                    c.delete(got[0])
                return
            out["sent"], out["acked"] = t2 - t0, t2 - t_ack
            c.delete(second[0])
            if second[0] != job:
                out["outcome"] = "another job"
            elif out["sent"] < 2.0 - window:
                out["outcome"] = f"early: more than {int(window * 1000)} ms before 2 s"
            elif out["acked"] > 2.0 + window:
                out["outcome"] = f"late: more than {int(window * 1000)} ms after 2 s"
            else:
                out["outcome"] = "ok"
    except Exception as e:  # noqa: BLE001 - every failure is an outcome
        out["outcome"] = f"error: {type(e).__name__}: {e}"


def timing_check(srv, tries, clients, window=0.05):
    """TRIES tries of the timing check, CLIENTS at once (each its own
    connection and tube, released within a barrier's wake-up of each
    other): TIMED_OUT then the job, within WINDOW of 2 s."""
    outcomes = []
    run = uuid.uuid4().hex[:8]
    done = 0
    while done < tries:
        n = min(clients, tries - done)
        barrier = threading.Barrier(n)
        results = [{} for _ in range(n)]
        threads = [threading.Thread(target=_parity_client,
                                    args=(srv.beanstalk_port, f"peers-parity-{run}-{done + i}", barrier,
                                          window, results[i]))
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outcomes += results
        done += n
    kinds = {}
    for o in outcomes:
        k = o.get("outcome", "error: no outcome")
        kinds[k] = kinds.get(k, 0) + 1
    def spread(key):
        xs = sorted(o[key] for o in outcomes if key in o)
        if not xs:
            return {"min": None, "median": None, "max": None}
        return {"min": round(xs[0], 4), "median": round(_median(xs), 4), "max": round(xs[-1], 4)}

    return {
        "ok": kinds.get("ok", 0),
        "tries": tries,
        "clients_at_once": clients,
        "window_s": window,
        "outcomes": kinds,
        "from_release_sent_s": spread("sent"),
        "from_released_s": spread("acked"),
    }

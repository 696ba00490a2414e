"""The fault harness's workload: producers, consumers, a push receiver, a
beanstalk producer and workers, and the hostile beanstalk client. Every call
and its answer is recorded with its time (time.time(), the client namespace's
clock, which no nemesis skews), and so is every delivery.

Each task's payload is a unique key ("k<number>"); deliveries are matched to
calls by it, so a task whose add timed out is still recognised when it runs.
"""

import http.client
import json
import random
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PUSH_TYPE = "fpush"
PULL_TYPE = "fpull"
TUBE = "fbs"


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []
        self.keys = 0

    def add(self, ev):
        with self.lock:
            self.events.append(ev)

    def new_key(self):
        with self.lock:
            self.keys += 1
            return "k%d" % self.keys

    def dump(self, path):
        with self.lock:
            evs = list(self.events)
        with open(path, "w") as f:
            for e in evs:
                f.write(json.dumps(e, separators=(",", ":")) + "\n")
        return len(evs)


def fails_first(key):
    """About 5% of the keys have their first attempt failed on purpose (by the
    receiver or the consumer), to run retries through the faults too."""
    return zlib.crc32(key.encode()) % 20 == 0


class Api:
    """One HTTP/1.1 keep-alive connection per instance, for one thread."""

    def __init__(self, cluster, token, timeout):
        self.cluster, self.token, self.timeout = cluster, token, timeout
        self.conns = {}

    def call(self, inst, method, path, body=None):
        """Returns (status, json body or None, headers dict, t0, t1). status 0:
        no answer (connect failed: "unreachable"; sent and no answer:
        "no_answer")."""
        host, port = self.cluster.http_addr(inst)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": "Bearer " + self.token}
        if data is not None:
            headers["Content-Type"] = "application/json"
        t0 = time.time()
        sent = ever_sent = False
        for attempt in (0, 1):
            c = self.conns.get(inst)
            fresh = c is None
            if c is None:
                c = http.client.HTTPConnection(host, port, timeout=self.timeout)
                self.conns[inst] = c
            try:
                c.request(method, path, body=data, headers=headers)
                sent = True
                r = c.getresponse()
                raw = r.read()
                t1 = time.time()
                try:
                    js = json.loads(raw) if raw else None
                except ValueError:
                    js = None
                return r.status, js, {k.lower(): v for k, v in r.getheaders()}, t0, t1
            except (OSError, http.client.HTTPException) as e:
                c.close()
                self.conns.pop(inst, None)
                # A kept-alive connection the server closed before reading
                # this request (idle): send once more on a fresh one, only
                # when nothing of an answer came (the same rule the server's
                # forwarder follows).
                # The first try's request may have reached the server all
                # the same (it was read, then the server died): once any try
                # was written, the outcome is unknown, whatever follows.
                ever_sent = ever_sent or sent
                if not fresh and attempt == 0 and isinstance(
                        e, (http.client.RemoteDisconnected, BrokenPipeError,
                            ConnectionResetError)):
                    sent = False
                    continue
                t1 = time.time()
                kind = "no_answer" if (sent or ever_sent) else "unreachable"
                return 0, {"error": kind, "message": str(e)[:200]}, {}, t0, t1
        return 0, {"error": "unreachable"}, {}, t0, time.time()


class Workload:
    def __init__(self, cluster, rec, token, rng_seed=1):
        self.cluster, self.rec, self.token = cluster, rec, token
        self.stop = threading.Event()
        self.stop_producing = threading.Event()
        self.threads = []
        self.ids_lock = threading.Lock()
        self.id_tasks = []  # ids added with an id, for cancels, reschedules, conflicts
        self.rng = random.Random(rng_seed)
        self.id_seq = 0

    # ---- recording ----
    def record_call(self, inst, op, st, js, hd, t0, t1, **extra):
        ev = {"ev": "call", "op": op, "inst": inst, "t0": t0, "t1": t1, "status": st}
        if st == 0 or st >= 300:
            ev["err"] = (js or {}).get("error", "") if isinstance(js, dict) else ""
        if "x-delayq-instance" in hd:
            ev["owner"] = hd["x-delayq-instance"]
        ev.update(extra)
        self.rec.add(ev)
        return ev

    def start(self, producers=3, consumers_per_instance=2):
        for i in range(producers):
            self.spawn(self.producer, i)
        for inst in self.cluster.instances:
            for j in range(consumers_per_instance):
                self.spawn(self.consumer, inst, j)
            self.spawn(self.bs_worker, inst)
        self.spawn(self.bs_producer)

    def spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def join(self, timeout):
        self.stop.set()
        end = time.time() + timeout
        for t in self.threads:
            t.join(max(0.1, end - time.time()))

    # ---- producers ----
    def task_body(self, rng, key, with_id=None, conflict=None):
        delay = rng.uniform(0.2, 6.0)
        t = {"type": PUSH_TYPE if rng.random() < 0.5 else PULL_TYPE, "payload": key}
        now = time.time()
        if rng.random() < 0.7:
            t["due_ms"] = int((now + delay) * 1000)
        else:
            t["delay_ms"] = int(delay * 1000)
        if with_id:
            t["id"] = with_id
        if conflict:
            t["conflict"] = conflict
        return t

    def task_meta(self, t, t0):
        due = t["due_ms"] / 1000.0 if "due_ms" in t else None
        rel = t["delay_ms"] / 1000.0 if "delay_ms" in t else None
        return {"key": t["payload"], "type": t["type"], "due": due, "rel": rel,
                "id": t.get("id"), "conflict": t.get("conflict")}

    def next_id(self, thread):
        with self.ids_lock:
            self.id_seq += 1
            return "t%d-%d" % (thread, self.id_seq)

    def producer(self, n):
        rng = random.Random(1000 + n)
        api = Api(self.cluster, self.token, 12)
        while not self.stop_producing.is_set():
            inst = rng.choice(self.cluster.instances)
            r = rng.random()
            if r < 0.45:
                key = self.rec.new_key()
                t = self.task_body(rng, key)
                st, js, hd, t0, t1 = api.call(inst, "POST", "/v1/tasks", t)
                tid = (js or {}).get("id") if st == 201 else None
                self.record_call(inst, "add", st, js, hd, t0, t1, task=self.task_meta(t, t0), id=tid)
            elif r < 0.60:
                tasks = []
                for _ in range(rng.randint(2, 8)):
                    key = self.rec.new_key()
                    with_id = self.next_id(n) if rng.random() < 0.4 else None
                    tasks.append(self.task_body(rng, key, with_id, "reject" if with_id else None))
                st, js, hd, t0, t1 = api.call(inst, "POST", "/v1/tasks:batch", {"tasks": tasks})
                ids = (js or {}).get("ids") if isinstance(js, dict) else None
                failed = (js or {}).get("failed") if isinstance(js, dict) else None
                self.record_call(inst, "batch", st, js, hd, t0, t1,
                                 tasks=[self.task_meta(t, t0) for t in tasks], ids=ids,
                                 failed=failed)
                if ids:
                    for t, i in zip(tasks, ids):
                        if i is not None and "id" in t:
                            self.remember_id(t["id"], t["type"])
            elif r < 0.78:
                key = self.rec.new_key()
                tid = self.next_id(n)
                t = self.task_body(rng, key, tid, "reject")
                st, js, hd, t0, t1 = api.call(inst, "POST", "/v1/tasks", t)
                self.record_call(inst, "add", st, js, hd, t0, t1, task=self.task_meta(t, t0), id=tid)
                if st == 201:
                    self.remember_id(tid, t["type"])
            elif r < 0.86:
                picked = self.pick_id(rng)
                if picked:
                    tid, ttype = picked
                    key = self.rec.new_key()
                    conflict = rng.choice(["replace", "keep", "reject"])
                    t = self.task_body(rng, key, tid, conflict)
                    t["type"] = ttype
                    st, js, hd, t0, t1 = api.call(inst, "POST", "/v1/tasks", t)
                    self.record_call(inst, "add", st, js, hd, t0, t1, task=self.task_meta(t, t0),
                                     id=tid)
            elif r < 0.93:
                picked = self.pick_id(rng)
                if picked:
                    tid = picked[0]
                    st, js, hd, t0, t1 = api.call(inst, "DELETE", "/v1/tasks/" + tid)
                    self.record_call(inst, "cancel", st, js, hd, t0, t1, id=tid)
            else:
                picked = self.pick_id(rng)
                if picked:
                    tid = picked[0]
                    delay = rng.uniform(0.5, 5.0)
                    if rng.random() < 0.7:
                        body = {"due_ms": int((time.time() + delay) * 1000)}
                    else:
                        body = {"delay_ms": int(delay * 1000)}
                    st, js, hd, t0, t1 = api.call(inst, "POST", "/v1/tasks/%s/reschedule" % tid, body)
                    self.record_call(inst, "reschedule", st, js, hd, t0, t1, id=tid,
                                     due=body.get("due_ms", 0) / 1000.0 or None,
                                     rel=body.get("delay_ms", 0) / 1000.0 or None)
            self.stop_producing.wait(rng.uniform(0.02, 0.12))

    def remember_id(self, tid, ttype):
        with self.ids_lock:
            self.id_tasks.append((time.time(), tid, ttype))
            if len(self.id_tasks) > 400:
                del self.id_tasks[:100]

    def pick_id(self, rng):
        with self.ids_lock:
            now = time.time()
            # Mostly ids still pending: added in the last few seconds.
            recent = [x for x in self.id_tasks if now - x[0] < 4]
            pool = recent if recent and rng.random() < 0.9 else self.id_tasks
            if not pool:
                return None
            _, tid, ttype = rng.choice(pool)
            return tid, ttype

    # ---- pull consumers ----
    def consumer(self, inst, j):
        rng = random.Random(hash((inst, j)) & 0xffff)
        api = Api(self.cluster, self.token, 12)
        while not self.stop.is_set():
            st, js, hd, t0, t1 = api.call(inst, "POST", "/v1/reserve",
                                          {"types": [PULL_TYPE], "max": 4, "wait_ms": 1000,
                                           "ttr_ms": 5000})
            tasks = (js or {}).get("tasks", []) if st == 200 and isinstance(js, dict) else []
            if st != 200:
                self.record_call(inst, "reserve", st, js, hd, t0, t1)
                if st == 0:
                    self.stop.wait(0.2)
                continue
            if tasks:
                self.record_call(inst, "reserve", st, js, hd, t0, t1, n=len(tasks))
            for t in tasks:
                key = t.get("payload", "")
                self.rec.add({"ev": "deliver", "via": "pull", "t": t1, "key": key, "id": t["id"],
                              "attempt": t.get("attempts", 0) + 1, "inst": inst,
                              "lease": t.get("lease", "")})
            # Finished on a thread of their own: a finish sent to an instance
            # that is stopped waits for the client's timeout, and the next
            # reserve must not wait behind it (the lateness measured is the
            # server's, not this consumer's).
            if not tasks:
                continue
            vias = [rng.choice(self.cluster.instances) for _ in tasks]
            touch = [rng.random() < 0.15 for _ in tasks]
            threading.Thread(target=self.settle, args=(tasks, vias, touch), daemon=True).start()

    def settle(self, tasks, vias, touch):
        other = Api(self.cluster, self.token, 12)

        def call(via, op, tid, key, path, body):
            # A call that did nothing (no connection, or the instance could
            # not reach the lease's owner) goes once more through another
            # instance, as a careful consumer would; anything else is final.
            st, js, hd, t0, t1 = other.call(via, "POST", path, body)
            self.record_call(via, op, st, js, hd, t0, t1, id=tid, key=key)
            err = (js or {}).get("error") if isinstance(js, dict) else None
            if (st == 0 and err == "unreachable") or (st == 503 and err in ("owner_unreachable",
                                                                            "busy")):
                via2 = random.choice([i for i in self.cluster.instances if i != via])
                st, js, hd, t0, t1 = other.call(via2, "POST", path, body)
                self.record_call(via2, op, st, js, hd, t0, t1, id=tid, key=key, retry=True)
            return st

        try:
            for t, via, do_touch in zip(tasks, vias, touch):
                key, tid, lease = t.get("payload", ""), t["id"], t.get("lease", "")
                path = "/v1/tasks/%s/" % tid
                if fails_first(key) and t.get("attempts", 0) == 0:
                    call(via, "fail", tid, key, path + "fail", {"lease": lease, "error": "on purpose"})
                    continue
                if do_touch:
                    call(via, "touch", tid, key, path + "touch", {"lease": lease, "ttr_ms": 5000})
                call(via, "finish", tid, key, path + "finish", {"lease": lease})
        finally:
            for c in other.conns.values():
                c.close()

    # ---- beanstalk ----
    def bs_producer(self):
        rng = random.Random(77)
        conn = None
        while not self.stop_producing.is_set():
            inst = rng.choice(self.cluster.instances)
            if conn is None or conn[0] != inst:
                if conn:
                    conn[1].close()
                conn = None
                try:
                    c = BeanstalkConn(self.cluster.bs_addr(inst), 5)
                    c.cmd(b"use %s\r\n" % TUBE.encode())
                    conn = (inst, c)
                except OSError as e:
                    self.rec.add({"ev": "call", "op": "bs_connect", "inst": inst, "t0": time.time(),
                                  "t1": time.time(), "status": 0, "err": str(e)[:100]})
                    self.stop_producing.wait(0.2)
                    continue
            key = self.rec.new_key()
            delay = rng.randint(0, 4)
            t0 = time.time()
            try:
                line = conn[1].cmd(b"put 0 %d 30 %d\r\n%s\r\n" % (delay, len(key), key.encode()))
                t1 = time.time()
                ok = line.startswith(b"INSERTED ")
                self.rec.add({"ev": "call", "op": "bs_put", "inst": inst, "t0": t0, "t1": t1,
                              "status": 201 if ok else 500, "err": "" if ok else line.decode()[:40],
                              "task": {"key": key, "type": TUBE, "due": None, "rel": delay},
                              "id": line.split()[1].decode() if ok else None})
            except OSError as e:
                self.rec.add({"ev": "call", "op": "bs_put", "inst": inst, "t0": t0,
                              "t1": time.time(), "status": 0, "err": "no_answer",
                              "task": {"key": key, "type": TUBE, "due": None, "rel": delay}})
                conn[1].close()
                conn = None
            self.stop_producing.wait(rng.uniform(0.05, 0.2))

    def bs_worker(self, inst):
        conn = None
        while not self.stop.is_set():
            if conn is None:
                try:
                    conn = BeanstalkConn(self.cluster.bs_addr(inst), 8)
                    conn.cmd(b"watch %s\r\n" % TUBE.encode())
                except OSError:
                    conn = None
                    self.stop.wait(0.3)
                    continue
            try:
                line = conn.cmd(b"reserve-with-timeout 1\r\n")
                if line.startswith(b"RESERVED "):
                    _, jid, n = line.split()
                    body = conn.read_body(int(n))
                    t = time.time()
                    key = body.decode(errors="replace")
                    self.rec.add({"ev": "deliver", "via": "bs", "t": t, "key": key, "id": jid.decode(),
                                  "attempt": 0, "inst": inst})
                    t0 = time.time()
                    r = conn.cmd(b"delete %s\r\n" % jid)
                    self.rec.add({"ev": "call", "op": "bs_delete", "inst": inst, "t0": t0,
                                  "t1": time.time(), "status": 204 if r == b"DELETED" else 500,
                                  "err": "" if r == b"DELETED" else r.decode()[:40], "key": key,
                                  "id": jid.decode()})
            except OSError:
                conn.close()
                conn = None
                self.stop.wait(0.2)


class BeanstalkConn:
    def __init__(self, addr, timeout):
        self.s = socket.create_connection(addr, timeout=timeout)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def cmd(self, data):
        self.s.sendall(data)
        return self.line()

    def read_body(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed")
            self.buf += chunk
        body, self.buf = self.buf[:n], self.buf[n + 2:]
        return body

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class Hostile:
    """The hostile beanstalk client: a flood of connections that say nothing,
    and commands started and never finished (a put line without its body, a
    line without its end), on one instance, while a probe checks every 200 ms
    that a new client is still served there."""

    def __init__(self, cluster, rec, inst, flood):
        self.cluster, self.rec, self.inst, self.flood = cluster, rec, inst, flood
        self.stop = threading.Event()
        self.socks = []
        self.threads = []
        self.opened = 0
        self.closed_by_server = 0

    def start(self):
        for fn in (self.flooder, self.prober):
            t = threading.Thread(target=fn, daemon=True)
            t.start()
            self.threads.append(t)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(5)
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks = []
        return {"opened": self.opened, "closed_by_server": self.closed_by_server}

    def flooder(self):
        addr = self.cluster.bs_addr(self.inst)
        stalls = [b"put 0 0 10 100\r\nabc", b"reserv", b"put 0 0 10 5\r\n", b"peek 1"]
        i = 0
        while not self.stop.is_set():
            # Keep `flood` connections open: those the server closed are
            # opened again (a client that leaks connections).
            alive = []
            for s in self.socks:
                try:
                    s.setblocking(False)
                    d = s.recv(1, socket.MSG_PEEK)
                    if d == b"":
                        self.closed_by_server += 1
                        s.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed_by_server += 1
                    s.close()
                    continue
                alive.append(s)
            self.socks = alive
            while len(self.socks) < self.flood and not self.stop.is_set():
                try:
                    s = socket.create_connection(addr, timeout=2)
                except OSError:
                    break
                self.opened += 1
                i += 1
                if i % 10 == 0:
                    try:
                        s.sendall(stalls[(i // 10) % len(stalls)])
                    except OSError:
                        pass
                self.socks.append(s)
            self.stop.wait(0.2)

    def prober(self):
        addr = self.cluster.bs_addr(self.inst)
        while not self.stop.is_set():
            t0 = time.time()
            ok, err = False, ""
            try:
                c = BeanstalkConn(addr, 3)
                line = c.cmd(b"list-tube-used\r\n")
                ok = line == b"USING default"
                err = "" if ok else line.decode()[:40]
                c.close()
            except OSError as e:
                err = type(e).__name__
            self.rec.add({"ev": "call", "op": "bs_probe", "inst": self.inst, "t0": t0,
                          "t1": time.time(), "status": 200 if ok else 0, "err": err})
            self.stop.wait(0.2)


class Receiver:
    """The push receiver: records each push, answers 200, or 500 to the first
    attempt of the keys fails_first() picks."""

    def __init__(self, host, port, rec):
        self.rec = rec
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                t = time.time()
                try:
                    task = json.loads(raw)
                except ValueError:
                    task = {}
                key = task.get("payload", "")
                attempt = int(self.headers.get("X-Delayq-Attempt", "0") or 0)
                fail = fails_first(key) and attempt == 1
                outer.rec.add({"ev": "deliver", "via": "push", "t": t, "key": key,
                               "id": task.get("id"), "attempt": attempt,
                               "inst": self.headers.get("X-Delayq-Instance", ""),
                               "shard": int(self.headers.get("X-Delayq-Shard", "-1") or -1),
                               "fence": int(self.headers.get("X-Delayq-Fence", "0") or 0),
                               "answered": 500 if fail else 200})
                code = 500 if fail else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(ThreadingHTTPServer):
            # Python's default listen backlog is 5: a burst of new push
            # connections (an instance firing its backlog after Redis came
            # back) overflowed it, and a request whose push had timed out
            # and been retried was read 34 s later, a "stale push" of the
            # receiver's own making. A real server's backlog is hundreds.
            request_queue_size = 1024

        self.server = Server((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

"""bench/peers/processes.py - the servers of the peer benchmark: started on
free loopback ports, each in a temp dir of its own, and always stopped.

Every process started here is registered with a `fleet`, whose stop_all()
runs from a `finally` (and from SIGINT and SIGTERM, which main() turns into
exceptions), and each gets PR_SET_PDEATHSIG(SIGKILL): if this driver itself
is killed with SIGKILL, the kernel kills its servers too. Nothing outlives
the run.
"""

import ctypes
import os
import signal
import socket
import subprocess
import time

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig):
    """SIG to this process when its parent dies."""
    _libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def _die_with_parent():
    # Runs in the child between fork and exec.
    die_with_parent(signal.SIGKILL)


def free_port():
    """A loopback port the kernel just handed out (a start that loses the
    race for it is retried on another one)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    """User + system CPU seconds of PID so far (from /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid):
    """Resident set size of PID (VmRSS of /proc/PID/status), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class server:
    """A server process: its name, the ports it answers on, its command."""

    def __init__(self, name, proc, cmd, workdir, beanstalk_port=None, http_port=None, log=None):
        self.name = name
        self.proc = proc
        self.pid = proc.pid
        self.cmd = cmd
        self.workdir = workdir
        self.beanstalk_port = beanstalk_port
        self.http_port = http_port
        self.log = log
        self.info = {}

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, lines=20):
        if not self.log or not os.path.exists(self.log):
            return ""
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-lines:])


class fleet:
    """Every process of the run, stopped by stop_all()."""

    def __init__(self, workdir, say):
        self.workdir = workdir
        self.say = say
        self.procs = []  # (name, Popen)

    def spawn(self, name, cmd, log):
        out = open(log, "ab")
        try:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 preexec_fn=_die_with_parent, cwd=self.workdir)
        finally:
            out.close()
        self.procs.append((name, p))
        return p

    def run(self, cmd, env):
        """Runs CMD in the foreground (its output is ours) and returns its
        exit status; stopped with the rest on an interrupt."""
        name = os.path.basename(cmd[1] if len(cmd) > 1 else cmd[0])
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
        self.procs.append((name, p))
        try:
            p.wait()
        finally:
            self.stop(name, p)  # a no-op once it exited
        return p.returncode

    def stop(self, name, p, grace=5.0, signalled=False):
        """SIGTERM (delayq-server drains; a second one would cut the drain
        short, hence SIGNALLED), then SIGKILL after GRACE seconds."""
        if p.poll() is None:
            if not signalled:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                self.say(f"{name} (pid {p.pid}) still running {grace} s after SIGTERM: SIGKILL")
                p.kill()
                p.wait()
        self.procs = [(n, q) for n, q in self.procs if q is not p]

    def stop_many(self, procs, grace=5.0):
        """SIGTERM to all of PROCS ((name, Popen) pairs) at once, then each
        waited for, SIGKILL past GRACE seconds."""
        for _, p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for name, p in procs:
            self.stop(name, p, max(0.1, deadline - time.monotonic()), signalled=True)

    def stop_all(self):
        self.stop_many(list(reversed(self.procs)))

    def busy_loops(self, n):
        """N processes spinning on a core each (the checks' "busy machine")."""
        return [self.spawn(f"busy-loop-{i}", ["python3", "-c", "while True: pass"], os.devnull)
                for i in range(n)]

    # --- the servers ---

    def start_redis(self, name):
        """redis-server on a free port, AOF on with appendfsync everysec
        (Redis's default once AOF is on, and what BullMQ's docs recommend),
        no RDB, its data in a fresh dir."""
        base = os.path.join(self.workdir, name)
        os.makedirs(base, exist_ok=True)
        log = os.path.join(self.workdir, name + ".log")
        for attempt in range(5):
            port = free_port()
            cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "yes", "--appendfsync", "everysec", "--dir", base, "--daemonize", "no"]
            p = self.spawn(name, cmd, log)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and p.poll() is None:
                try:
                    if redis_command(port, "PING", timeout=1) == "PONG":
                        s = server(name, p, cmd, base, log=log)
                        s.port = port
                        return s
                except (OSError, RuntimeError):
                    pass
                time.sleep(0.05)
            self.stop(name, p)
            self.say(f"{name} did not start on port {port} (attempt {attempt + 1})")
        raise RuntimeError("could not start redis-server; its log:\n" + open(log, errors="replace").read()[-2000:])

    def _await_beanstalk(self, name, p, port, log, deadline):
        """Waits until PORT answers list-tube-used with USING (delayq-server
        answers INTERNAL_ERROR until its store answered once)."""
        last = ""
        while time.monotonic() < deadline:
            if p.poll() is not None:
                return False, last
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(b"list-tube-used\r\n")
                    reply = s.recv(256)
                    if reply.startswith(b"USING "):
                        return True, ""
                    last = reply.decode(errors="replace").strip()
            except OSError as e:
                last = str(e)
            time.sleep(0.02)
        raise RuntimeError(f"{name}: no USING reply to list-tube-used within 30 s (last: {last})")

    def start_beanstalkd(self, name, args, binary="beanstalkd"):
        """BINARY -l 127.0.0.1 -p PORT ARGS ('@DIR@' in ARGS is a fresh dir):
        beanstalkd, or what takes its flags (delayq-bench-floor)."""
        base = os.path.join(self.workdir, name)
        os.makedirs(base, exist_ok=True)
        args = [a.replace("@DIR@", base) for a in args]
        log = os.path.join(self.workdir, name + ".log")
        for attempt in range(5):
            port = free_port()
            cmd = [binary, "-l", "127.0.0.1", "-p", str(port)] + args
            p = self.spawn(name, cmd, log)
            ok, why = self._await_beanstalk(name, p, port, log, time.monotonic() + 30)
            if ok:
                return server(name, p, cmd, base, beanstalk_port=port, log=log)
            self.stop(name, p)
            self.say(f"{name} did not start on port {port} (attempt {attempt + 1}): {why}")
        raise RuntimeError(f"could not start {name}; its log:\n" + open(log, errors="replace").read()[-2000:])

    def start_delayq(self, name, binary, store, beanstalk=True, extra=()):
        """BINARY --listen 127.0.0.1:0 [--beanstalk-listen 127.0.0.1:0]
        --store STORE ('@DIR@' in STORE is a fresh dir); the ports come from
        the lines it prints once it listens."""
        base = os.path.join(self.workdir, name)
        os.makedirs(base, exist_ok=True)
        store = store.replace("@DIR@", base)
        log = os.path.join(self.workdir, name + ".log")
        cmd = [binary, "--listen", "127.0.0.1:0", "--store", store]
        if beanstalk:
            cmd += ["--beanstalk-listen", "127.0.0.1:0"]
        cmd += list(extra)
        p = self.spawn(name, cmd, log)
        http_port = bs_port = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited ({p.returncode}) at start; its log:\n" + open(log, errors="replace").read()[-2000:])
            with open(log, errors="replace") as f:
                for line in f:
                    if line.startswith("delayq-server listening on 127.0.0.1:"):
                        http_port = int(line.rsplit(":", 1)[1])
                    elif line.startswith("delayq-server beanstalk listening on 127.0.0.1:"):
                        bs_port = int(line.rsplit(":", 1)[1])
            if http_port and (bs_port or not beanstalk):
                break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"{name} printed no 'listening' line within 30 s")
        if beanstalk:
            ok, why = self._await_beanstalk(name, p, bs_port, log, deadline)
            if not ok:
                raise RuntimeError(f"{name} exited at start: {why}")
        else:
            _await_healthz(name, p, http_port, deadline)
        return server(name, p, cmd, base, beanstalk_port=bs_port, http_port=http_port, log=log)


def _await_healthz(name, p, port, deadline):
    import http.client

    last = ""
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"{name} exited at start")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            r = c.getresponse()
            body = r.read()
            c.close()
            if r.status == 200:
                return
            last = f"{r.status} {body[:100]!r}"
        except OSError as e:
            last = str(e)
        time.sleep(0.05)
    raise RuntimeError(f"{name}: /healthz did not answer 200 within 30 s (last: {last})")


def redis_command(port, *args, timeout=10.0):
    """One command to the redis-server on PORT, in RESP; the reply decoded
    (bulk strings as str, integers as int). Enough for CONFIG, INFO and DEL."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(out)
        f = s.makefile("rb")
        return _resp(f)


def _resp(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError("redis: " + rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:n]
        return data.decode(errors="replace")
    if kind == b"*":
        return [_resp(f) for _ in range(int(rest))]
    raise RuntimeError(f"redis: unexpected reply {line[:80]!r}")


def redis_info(port, section):
    """INFO SECTION as a dict of strings."""
    out = {}
    for row in redis_command(port, "INFO", section).splitlines():
        key, sep, value = row.partition(":")
        if sep:
            out[key] = value
    return out

"""bench/peers/beanstalk_client.py - the one beanstalkd client of the peer
benchmark (scripts/bench-peers.sh), Python 3 standard library only.

The same code talks to beanstalkd and to delayq-server's --beanstalk-listen,
so a difference between the two is the servers', not the clients'. Three
shapes of client:

- conn: one blocking connection, one command and its reply at a time (what
  most client libraries do: pheanstalk, greenstalk, node-beanstalk);
- pipelined_puts(): one connection keeping up to N puts in flight;
- cycles_on_connections(): N connections in one thread (a selector), each
  doing put, reserve-with-timeout, delete in turn, one command in flight
  per connection. One thread rather than N threads or processes: the
  client's own cost stays one core at most, the same for both servers, and
  no GIL hand-off sits between a reply and the next command.

Every reply is checked: a reply other than the one expected raises
protocol_error naming the command and what came back, so a server that
misbehaves fails the run instead of being timed.
"""

import selectors
import socket


class protocol_error(Exception):
    """A reply that is not the one the command expects."""


class timed_out(Exception):
    """reserve-with-timeout answered TIMED_OUT where a job was expected."""


def _connect(host, port, timeout):
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class conn:
    """One blocking connection. Not thread-safe: one thread per conn."""

    def __init__(self, host, port, timeout=30.0):
        self.sock = _connect(host, port, timeout)
        self.buf = bytearray()

    def close(self):
        try:
            self.sock.sendall(b"quit\r\n")
        except OSError:
            pass
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def settimeout(self, seconds):
        self.sock.settimeout(seconds)

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return line
            chunk = self.sock.recv(65536)
            if not chunk:
                raise protocol_error("the server closed the connection")
            self.buf += chunk

    def _body(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise protocol_error("the server closed the connection inside a body")
            self.buf += chunk
        body = bytes(self.buf[:n])
        if self.buf[n : n + 2] != b"\r\n":
            raise protocol_error("a body not followed by CRLF")
        del self.buf[: n + 2]
        return body

    def command(self, line):
        """Sends one command line (without CRLF); returns the reply line."""
        self.sock.sendall(line + b"\r\n")
        return self._line()

    def _expect(self, line, prefix):
        reply = self.command(line)
        if not reply.startswith(prefix):
            raise protocol_error(f"{line[:60]!r}: expected {prefix!r}, got {reply[:80]!r}")
        return reply

    def use(self, tube):
        self._expect(b"use " + tube.encode(), b"USING ")

    def watch_only(self, tube):
        """Watches TUBE alone (watch it, ignore default)."""
        self._expect(b"watch " + tube.encode(), b"WATCHING ")
        if tube != "default":
            self._expect(b"ignore default", b"WATCHING ")

    def put(self, body, pri=0, delay=0, ttr=60):
        """Returns the new job's id."""
        self.sock.sendall(b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))
        reply = self._line()
        if not reply.startswith(b"INSERTED "):
            raise protocol_error(f"put: expected INSERTED, got {reply[:80]!r}")
        return int(reply[9:])

    def reserve(self, timeout=None):
        """(id, body); None on TIMED_OUT. timeout None: plain `reserve`."""
        if timeout is None:
            self.sock.sendall(b"reserve\r\n")
        else:
            self.sock.sendall(b"reserve-with-timeout %d\r\n" % timeout)
        reply = self._line()
        if reply.startswith(b"RESERVED "):
            parts = reply.split(b" ")
            if len(parts) != 3:
                raise protocol_error(f"reserve: malformed {reply[:80]!r}")
            return int(parts[1]), self._body(int(parts[2]))
        if reply == b"TIMED_OUT":
            return None
        raise protocol_error(f"reserve: expected RESERVED or TIMED_OUT, got {reply[:80]!r}")

    def delete(self, job):
        reply = self.command(b"delete %d" % job)
        if reply != b"DELETED":
            raise protocol_error(f"delete {job}: expected DELETED, got {reply[:80]!r}")

    def release(self, job, pri, delay):
        reply = self.command(b"release %d %d %d" % (job, pri, delay))
        if reply != b"RELEASED":
            raise protocol_error(f"release {job}: expected RELEASED, got {reply[:80]!r}")

    def stats_tube(self, tube):
        """stats-tube's YAML as a dict of strings (None for NOT_FOUND)."""
        reply = self.command(b"stats-tube " + tube.encode())
        if reply == b"NOT_FOUND":
            return None
        if not reply.startswith(b"OK "):
            raise protocol_error(f"stats-tube: expected OK, got {reply[:80]!r}")
        text = self._body(int(reply[3:])).decode()
        out = {}
        for row in text.splitlines():
            key, sep, value = row.partition(":")
            if sep and not row.startswith("---"):
                out[key.strip()] = value.strip().strip('"')
        return out


def pipelined_puts(host, port, tube, count, in_flight, body, ttr=60, timeout=60.0):
    """COUNT puts of BODY (delay 0) on one new connection, at most IN_FLIGHT
    unanswered at any time; returns the seconds from the first byte sent to
    the last INSERTED read. Every reply must be INSERTED."""
    import time

    s = _connect(host, port, timeout)
    try:
        one = b"put 0 0 %d %d\r\n%s\r\n" % (ttr, len(body), body)
        s.sendall(b"use " + tube.encode() + b"\r\n")
        buf = bytearray()
        while b"\r\n" not in buf:
            buf += s.recv(4096)
        if not buf.startswith(b"USING "):
            raise protocol_error(f"use: got {bytes(buf[:80])!r}")
        buf.clear()
        # Sends in slices of up to 100 puts (one system call each) while the
        # window has room; reads whatever has come back. Replies are whole
        # lines: only complete ones are counted and checked.
        batch = 100
        sent = answered = 0
        start = time.perf_counter()
        while answered < count:
            room = min(in_flight - (sent - answered), count - sent)
            if room > 0:
                n = min(room, batch)
                s.sendall(one * n)
                sent += n
                if sent - answered < in_flight and sent < count:
                    continue
            chunk = s.recv(262144)
            if not chunk:
                raise protocol_error("the server closed the connection during the puts")
            buf += chunk
            end = buf.rfind(b"\r\n")
            if end < 0:
                continue
            lines = buf.count(b"\r\n", 0, end + 2)
            good = buf.count(b"INSERTED ", 0, end + 2)
            if good != lines:
                bad = next(l for l in bytes(buf[: end]).split(b"\r\n") if not l.startswith(b"INSERTED "))
                raise protocol_error(f"pipelined put: expected INSERTED, got {bad[:80]!r}")
            answered += lines
            del buf[: end + 2]
        return time.perf_counter() - start
    finally:
        s.close()


def cycles_on_connections(host, port, tube, connections, cycles, body, reserve_timeout=5, timeout=60.0):
    """CYCLES put+reserve+delete cycles in all, over CONNECTIONS new
    connections on TUBE (each puts a job, reserves one with
    reserve-with-timeout RESERVE_TIMEOUT, deletes what it got, and starts
    over), driven by one thread. Returns (seconds, timed_out): the seconds
    from the first put to the last DELETED, and how many reserves answered
    TIMED_OUT (each is retried; a job is always there for it, so any is a
    job the server had acknowledged but not yet made ready)."""
    import time

    put = b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)
    reserve = b"reserve-with-timeout %d\r\n" % reserve_timeout
    sel = selectors.DefaultSelector()
    states = []
    try:
        for _ in range(connections):
            c = conn(host, port, timeout)
            c.use(tube)
            c.watch_only(tube)
            c.sock.setblocking(False)
            # [conn, buffer, step, job]: step 0 awaits INSERTED, 1 RESERVED, 2 DELETED.
            st = [c, bytearray(), 0, 0]
            states.append(st)
            sel.register(c.sock, selectors.EVENT_READ, st)
        started = done = timed = 0
        start = time.perf_counter()
        for st in states:
            if started < cycles:
                st[0].sock.sendall(put)
                started += 1
            else:
                st[2] = -1
        active = sum(1 for st in states if st[2] >= 0)
        while active:
            events = sel.select(timeout)
            if not events:
                raise protocol_error(f"no reply within {timeout} s ({done} of {cycles} cycles done)")
            for key, _ in events:
                st = key.data
                c, buf = st[0], st[1]
                chunk = c.sock.recv(65536)
                if not chunk:
                    raise protocol_error("the server closed a connection during the cycles")
                buf += chunk
                while True:
                    i = buf.find(b"\r\n")
                    if i < 0:
                        break
                    line = bytes(buf[:i])
                    step = st[2]
                    if step == 0:
                        if not line.startswith(b"INSERTED "):
                            raise protocol_error(f"put: expected INSERTED, got {line[:80]!r}")
                        del buf[: i + 2]
                        st[2] = 1
                        c.sock.sendall(reserve)
                    elif step == 1:
                        if line == b"TIMED_OUT":
                            del buf[: i + 2]
                            timed += 1
                            c.sock.sendall(reserve)
                            continue
                        if not line.startswith(b"RESERVED "):
                            raise protocol_error(f"reserve: expected RESERVED, got {line[:80]!r}")
                        parts = line.split(b" ")
                        n = int(parts[2])
                        if len(buf) < i + 2 + n + 2:
                            break  # the body is not all here yet
                        del buf[: i + 2 + n + 2]
                        st[3] = int(parts[1])
                        st[2] = 2
                        c.sock.sendall(b"delete %d\r\n" % st[3])
                    elif step == 2:
                        if line != b"DELETED":
                            raise protocol_error(f"delete {st[3]}: expected DELETED, got {line[:80]!r}")
                        del buf[: i + 2]
                        done += 1
                        if started < cycles:
                            started += 1
                            st[2] = 0
                            c.sock.sendall(put)
                        else:
                            st[2] = -1
                            active -= 1
                    else:
                        raise protocol_error(f"an unexpected reply {line[:80]!r}")
        return time.perf_counter() - start, timed
    finally:
        for st in states:
            sel.unregister(st[0].sock)
            st[0].sock.setblocking(True)
            st[0].close()
        sel.close()

"""A small TCP proxy for the fault harness (toxiproxy's idea; Debian has none).

    python3 proxy.py --listen HOST:PORT --to HOST:PORT --control PATH

Forwards every connection accepted on --listen to --to. Commands arrive on
the unix socket --control as JSON lines, each answered with one JSON line:

    {"cmd": "set", "src": "10.201.0.1", "mode": "delay", "ms": 200, "jitter_ms": 100}
    {"cmd": "set", "src": ..., "mode": "stall"}   hold every byte until cleared
    {"cmd": "set", "src": ..., "mode": "drop"}    throw every byte away (a link
                                                  that lost everything); cleared,
                                                  the connections are reset,
                                                  their streams being broken
    {"cmd": "set", "src": ..., "mode": "lossy", "ms": 50, "jitter_ms": 400,
                                 "reset_every_s": 3}
                                                  delayed bytes and, now and
                                                  then, a connection reset
    {"cmd": "reset", "src": ...}                  reset the connections open now
    {"cmd": "clear", "src": ...}                  back to plain forwarding
    {"cmd": "stats"}

A mode applies to the connections from that source address, both ways, those
open and those to come. Bytes are never reordered or altered: a TCP stream
either arrives late, whole, or the connection ends (what a real lossy link
does to TCP). A reset closes both sides with SO_LINGER 0 (an RST).
"""

import argparse
import asyncio
import json
import os
import random
import socket
import struct
import time


class Rule:
    def __init__(self, mode="plain", ms=0, jitter_ms=0, reset_every_s=0):
        self.mode, self.ms, self.jitter_ms, self.reset_every_s = mode, ms, jitter_ms, reset_every_s


class Proxy:
    def __init__(self, to_host, to_port):
        self.to = (to_host, to_port)
        self.rules = {}
        self.conns = set()
        self.counts = {"accepted": 0, "resets": 0, "dropped_bytes": 0, "forwarded_bytes": 0}

    def rule(self, src):
        return self.rules.get(src, Rule())

    async def handle(self, reader, writer):
        src = writer.get_extra_info("peername")[0]
        self.counts["accepted"] += 1
        try:
            ur, uw = await asyncio.open_connection(*self.to)
        except OSError:
            abort(writer)
            return
        conn = Conn(self, src, reader, writer, ur, uw)
        self.conns.add(conn)
        try:
            await conn.run()
        finally:
            self.conns.discard(conn)

    def reset(self, src):
        n = 0
        for c in list(self.conns):
            if c.src == src:
                c.reset()
                n += 1
        self.counts["resets"] += n
        return n

    async def lossy_resets(self):
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for src, r in list(self.rules.items()):
                if r.mode == "lossy" and r.reset_every_s > 0:
                    last = getattr(r, "last_reset", None)
                    if last is None:
                        r.last_reset = now
                    elif now - last >= r.reset_every_s:
                        r.last_reset = now
                        self.reset(src)


def abort(writer):
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


class Conn:
    def __init__(self, proxy, src, cr, cw, ur, uw):
        self.proxy, self.src = proxy, src
        self.cr, self.cw, self.ur, self.uw = cr, cw, ur, uw
        self.done = False

    def reset(self):
        if self.done:
            return
        self.done = True
        abort(self.cw)
        abort(self.uw)

    async def pump(self, r, w):
        # Bytes go out in the order they came, each chunk at its release time.
        release = 0.0
        try:
            while not self.done:
                data = await r.read(65536)
                if not data:
                    break
                rule = self.proxy.rule(self.src)
                while rule.mode == "stall" and not self.done:
                    await asyncio.sleep(0.05)
                    rule = self.proxy.rule(self.src)
                if rule.mode == "drop":
                    self.proxy.counts["dropped_bytes"] += len(data)
                    self.broken = True
                    continue
                if getattr(self, "broken", False):
                    # Bytes were lost on this connection: its stream is
                    # broken for good, as TCP would end it.
                    self.reset()
                    break
                if rule.mode in ("delay", "lossy") and (rule.ms or rule.jitter_ms):
                    at = time.monotonic() + (rule.ms + random.uniform(0, rule.jitter_ms)) / 1000.0
                    release = max(release, at)
                    wait = release - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                if self.done:
                    break
                w.write(data)
                self.proxy.counts["forwarded_bytes"] += len(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not self.done:
                try:
                    w.write_eof()
                except (OSError, RuntimeError):
                    pass

    async def run(self):
        await asyncio.gather(self.pump(self.cr, self.uw), self.pump(self.ur, self.cw))
        for w in (self.cw, self.uw):
            try:
                w.close()
            except OSError:
                pass


async def control(proxy, reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            c = json.loads(line)
            cmd = c.get("cmd")
            if cmd == "set":
                proxy.rules[c["src"]] = Rule(c["mode"], c.get("ms", 0), c.get("jitter_ms", 0),
                                             c.get("reset_every_s", 0))
                out = {"ok": True}
            elif cmd == "clear":
                old = proxy.rules.pop(c["src"], None)
                n = 0
                if old is not None and old.mode == "drop":
                    n = proxy.reset(c["src"])
                for conn in list(proxy.conns):
                    if conn.src == c["src"] and getattr(conn, "broken", False):
                        conn.reset()
                out = {"ok": True, "reset": n}
            elif cmd == "reset":
                out = {"ok": True, "reset": proxy.reset(c["src"])}
            elif cmd == "stats":
                out = dict(proxy.counts, open=len(proxy.conns))
            else:
                out = {"ok": False, "error": "unknown command"}
        except (ValueError, KeyError) as e:
            out = {"ok": False, "error": str(e)}
        writer.write((json.dumps(out) + "\n").encode())
        await writer.drain()
    writer.close()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--control", required=True)
    a = ap.parse_args()
    lh, lp = a.listen.rsplit(":", 1)
    th, tp = a.to.rsplit(":", 1)
    proxy = Proxy(th, int(tp))
    server = await asyncio.start_server(proxy.handle, lh, int(lp))
    if os.path.exists(a.control):
        os.unlink(a.control)
    ctl = await asyncio.start_unix_server(lambda r, w: control(proxy, r, w), a.control)
    asyncio.get_running_loop().create_task(proxy.lossy_resets())
    print("proxy listening on %s" % a.listen, flush=True)
    async with server, ctl:
        await asyncio.gather(server.serve_forever(), ctl.serve_forever())


if __name__ == "__main__":
    asyncio.run(main())


def send(control_path, **cmd):
    """Sends one command to a proxy's control socket and returns its answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(control_path)
    try:
        s.sendall((json.dumps(cmd) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        return json.loads(buf or b"{}")
    finally:
        s.close()

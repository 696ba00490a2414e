"""One client for scripts/request-costs.sh: `N` requests of one kind, one at
a time on one connection, against a delayq-server on 127.0.0.1.

    python3 request_costs.py put|cycle|add PORT N

put: beanstalk `put` of a 100-byte body (ready at once), in tube "t".
cycle: beanstalk `reserve-with-timeout 5` + `delete` of jobs this client
       puts first, before it says "ready" (outside the caller's window).
add: HTTP POST /v1/tasks, due in a day (none fires in the window, however
     slow the server runs), 100-byte payload, keep-alive.

Prints "ready" once connected (and, for cycle, once its jobs are put), waits
for a line on stdin, runs the N requests, and prints "done SECONDS". A
request that fails raises, and the client exits non-zero.
"""
import http.client
import json
import sys
import time

import beanstalk_client as bc


def main():
    kind, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    body = b"x" * 100
    if kind in ("put", "cycle"):
        c = bc.conn("127.0.0.1", port)
        c.use("t")
        c.watch_only("t")
        if kind == "cycle":
            for _ in range(n):
                c.put(body)
        def cycle():
            job = c.reserve(5)
            if job is None:
                raise RuntimeError("reserve-with-timeout 5: TIMED_OUT with jobs put")
            c.delete(job[0])

        step = (lambda: c.put(body)) if kind == "put" else cycle
    elif kind == "add":
        h = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        doc = json.dumps({"type": "t", "delay_ms": 86_400_000, "payload": body.decode()})

        def step():
            h.request("POST", "/v1/tasks", doc, {"Content-Type": "application/json"})
            r = h.getresponse()
            r.read()
            if r.status != 201:
                raise RuntimeError(f"POST /v1/tasks: {r.status}")
    else:
        raise SystemExit(f"unknown kind {kind}")
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    print(f"done {time.perf_counter() - t0:.4f}", flush=True)


if __name__ == "__main__":
    main()

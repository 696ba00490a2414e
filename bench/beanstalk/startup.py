#!/usr/bin/env python3
# bench/beanstalk/startup.py DELAYQ-SERVER - how soon a freshly started
# delayq-server (memory:) answers a beanstalk client: the time from spawning
# it to the first reply to list-tube-used, 7 runs (issue 26: client test
# suites start a server and connect at once).
import socket, subprocess, sys, time
times = []
for i in range(7):
    port = 47500 + i
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.argv[1], "--listen", "127.0.0.1:0", "--store", "memory:",
                          "--beanstalk-listen", f"127.0.0.1:{port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.sendall(b"list-tube-used\r\n")
            if s.recv(64).startswith(b"USING default"):
                break
        except OSError:
            time.sleep(0.001)
    times.append((time.perf_counter() - t0) * 1000)
    p.kill(); p.wait()
times.sort()
print("ms to first reply, sorted:", " ".join(f"{t:.1f}" for t in times), " median:", f"{times[len(times)//2]:.1f}")

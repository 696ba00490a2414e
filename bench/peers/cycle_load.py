#!/usr/bin/env python3
"""bench/peers/cycle_load.py PORT SECONDS [CONNECTIONS] - load for a profiler.

put/reserve/delete cycles against a beanstalk server on 127.0.0.1:PORT, as
table 1 of the peer benchmark runs them (beanstalk_client.py, 100-byte
bodies, a fresh tube per 8,000 cycles), over CONNECTIONS connections
(default 1), for SECONDS; prints the cycles a second. For `perf record -g
-p PID` or `perf stat -p PID` of the server while it runs
(docs/benchmarks.md quotes what they showed). Not run by CI."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import beanstalk_client as bc  # noqa: E402


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    connections = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    end = time.time() + seconds
    total, start = 0, time.time()
    while time.time() < end:
        bc.cycles_on_connections("127.0.0.1", port, "load%d" % total, connections, 8000, b"x" * 100)
        total += 8000
    print("cycles/s %.0f" % (total / (time.time() - start)))


if __name__ == "__main__":
    main()

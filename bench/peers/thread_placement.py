"""Puts one at a time on a lone connection, against the same on a connection
that came while another was open (so delayq-server, with two I/O threads,
put it on thread 1, away from the store's pipeline on thread 0).

    python3 bench/peers/thread_placement.py PORT [PUTS] [ROUNDS]

PORT: a delayq-server's beanstalk port (start it yourself, for example
`delayq-server --store redis://127.0.0.1:6379/0 --beanstalk-listen
127.0.0.1:PORT`). Per round, "alone" then "second", PUTS (default 5000)
puts of 100 bytes each, after a 0.2 s pause. Prints each run and the
medians. docs/benchmarks.md, "Which thread a lone connection lands on".
"""
import statistics
import sys
import time

import beanstalk_client as bc


def main():
    port = int(sys.argv[1])
    puts = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    rates = {"alone": [], "second": []}
    for _ in range(rounds):
        for case in ("alone", "second"):
            held = None
            if case == "second":
                held = bc.conn("127.0.0.1", port)  # open while the measured one connects
                held.use("held")
            c = bc.conn("127.0.0.1", port)
            c.use("t")
            if held is not None:
                held.close()
            time.sleep(0.2)
            t0 = time.perf_counter()
            for _ in range(puts):
                c.put(b"x" * 100)
            rate = puts / (time.perf_counter() - t0)
            c.close()
            time.sleep(0.2)
            rates[case].append(rate)
            print(case, round(rate), flush=True)
    a, b = statistics.median(rates["alone"]), statistics.median(rates["second"])
    print(f"median alone {a:.0f}/s, on the other thread {b:.0f}/s, ratio {b / a:.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Unit tests of the fault harness's checker (tests/faults/checker.py) on
small made-up histories: the rules that decide "early", so that a change to
them that would call a correct delivery early, or let an early one pass, is
seen here rather than in a three-minute fault run.

    python3 tests/faults/checker_test.py     (ctest: "faults: checker ...")
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

META = {"lease_ms": 2000, "tick_ms": 1}


def add(key, tid, due, t0, t1):
    return {"ev": "call", "op": "add", "inst": "s1", "t0": t0, "t1": t1, "status": 201,
            "id": tid, "task": {"key": key, "type": "fpull", "due": due, "rel": None,
                                "id": tid, "conflict": "reject"}}


def reschedule(tid, due, t0, t1, inst="s1", status=204):
    return {"ev": "call", "op": "reschedule", "inst": inst, "t0": t0, "t1": t1,
            "status": status, "id": tid, "due": due, "rel": None}


def deliver(key, tid, t):
    return {"ev": "deliver", "via": "pull", "t": t, "key": key, "id": tid, "attempt": 1,
            "inst": "s1", "lease": "l"}


def early_count(evs):
    rows, _ = checker.analyse([{"ev": "phase", "t": 0.0, "name": "run"}] + evs, META)
    return sum(r["early"] for r in rows)


class early_rule(unittest.TestCase):
    def test_delivery_at_its_due_time_is_not_early(self):
        self.assertEqual(early_count([add("k", "a", 10.0, 1.0, 1.1), deliver("k", "a", 10.0)]), 0)

    def test_delivery_before_its_due_time_is_early(self):
        self.assertEqual(early_count([add("k", "a", 10.0, 1.0, 1.1), deliver("k", "a", 9.9)]), 1)

    def test_a_later_reschedule_replaces_the_due_time(self):
        # The first moved it to 12, the second (begun after the first
        # answered) to 14: a delivery at 12 is early.
        evs = [add("k", "a", 10.0, 1.0, 1.1), reschedule("a", 12.0, 2.0, 2.1),
               reschedule("a", 14.0, 3.0, 3.1), deliver("k", "a", 12.0)]
        self.assertEqual(early_count(evs), 1)

    def test_overlapping_reschedules_may_be_taken_in_either_order(self):
        # The one that answered last began first: the server may have taken
        # it first, leaving the other's due time in force (a CI run's k4912).
        evs = [add("k", "a", 10.0, 1.0, 1.1),
               reschedule("a", 14.048, 3.024, 3.035, inst="s1"),
               reschedule("a", 14.074, 3.018, 3.039, inst="s3"),
               deliver("k", "a", 14.049)]
        self.assertEqual(early_count(evs), 0)

    def test_overlapping_reschedules_still_bound_an_early_delivery(self):
        evs = [add("k", "a", 10.0, 1.0, 1.1),
               reschedule("a", 14.048, 3.024, 3.035, inst="s1"),
               reschedule("a", 14.074, 3.018, 3.039, inst="s3"),
               deliver("k", "a", 14.0)]
        self.assertEqual(early_count(evs), 1)

    def test_a_reschedule_in_flight_may_have_taken_effect(self):
        # Answered after the delivery: its earlier due time may be in force.
        evs = [add("k", "a", 10.0, 1.0, 1.1), reschedule("a", 5.0, 4.0, 6.0),
               deliver("k", "a", 5.5)]
        self.assertEqual(early_count(evs), 0)


def fault(name, target, t_on, t_off):
    return [{"ev": "fault", "t": t_on, "name": name, "kind": "instance", "target": target,
             "on": True},
            {"ev": "fault_done", "t": t_off, "name": name, "target": target, "on": False}]


def over_count(evs):
    rows, _ = checker.analyse([{"ev": "phase", "t": 0.0, "name": "run"}] + evs, META)
    return sum(r["over_bound"] for r in rows)


class link_bound(unittest.TestCase):
    # 2 leases + 1 tick = 4.001 s; a slowed link adds LINK_TRIPS round trips
    # of up to 0.6 s (2.4 s) for the instance behind it only.
    def test_a_task_run_behind_a_slowed_link_gets_its_round_trips(self):
        evs = [add("k", "a", 10.0, 1.0, 1.1)] + fault("link-slow", "s1", 9.0, 20.0) + \
              [deliver("k", "a", 16.0)]
        self.assertEqual(over_count(evs), 0)

    def test_no_more_than_its_round_trips(self):
        evs = [add("k", "a", 10.0, 1.0, 1.1)] + fault("link-slow", "s1", 9.0, 20.0) + \
              [deliver("k", "a", 16.5)]
        self.assertEqual(over_count(evs), 1)

    def test_a_slowed_link_elsewhere_changes_nothing(self):
        evs = [add("k", "a", 10.0, 1.0, 1.1)] + fault("link-slow", "s2", 9.0, 20.0) + \
              [deliver("k", "a", 14.5)]
        self.assertEqual(over_count(evs), 1)

    def test_the_allowance_follows_the_driver_modes(self):
        import driver
        for cls in (driver.LinkSlow, driver.LinkLossy):
            worst = 2 * (cls.mode["ms"] + cls.mode["jitter_ms"]) / 1000.0
            self.assertAlmostEqual(checker.LINK_RTT_S[cls.name], worst)


if __name__ == "__main__":
    unittest.main()

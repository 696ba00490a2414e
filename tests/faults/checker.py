"""The fault harness's checker: reads a history (history.jsonl + meta.json)
and prints, per fault, what happened to every task (docs/faults.md says what
each figure means). Exit status 1 when something that must hold did not:
lost, resurrected, unexpected or early above 0, a lateness over its bound, a
beanstalk probe refused while the hostile client ran, or no fencing refusal
where the store must have refused stale writes is not required (it counts
what happened).

    python3 checker.py RUN_DIR
"""

import json
import math
import os
import sys
from collections import defaultdict

DEFINITE_FAILURES = {"store_unavailable", "store_error", "busy", "queue_full", "draining",
                     "owner_unreachable", "not_owner", "bad_request", "duplicate_id", "conflict",
                     "type_full", "unreachable", "invalid_id", "invalid_delay"}
EPS = 0.0015  # due times travel as whole milliseconds
REDIS_RECONNECT_S = 5.0  # the Redis store's longest reconnect backoff
# A slowed Redis link (driver.py's LinkSlow and LinkLossy modes: the proxy
# holds every chunk ms + up to jitter_ms, each way) makes each round trip of
# the instance behind it up to twice that. What that instance must do for a
# task costs at least LINK_TRIPS of them: for a takeover, the lease round
# that takes the shards, the flush of its writes before the read (the batch
# in flight and the next) and one read of the shards taken; for a task
# another instance saved into its shards, the notice, the flush and the
# find. So a task run by an instance whose link was slowed meanwhile is held
# to the bound plus LINK_TRIPS of its worst round trips (docs/faults.md,
# "The bounds"). delayq reads taken-over shards one by one, each after a
# flush of its own, so it can need more: that is counted over the bound.
LINK_TRIPS = 4
LINK_RTT_S = {"link-slow": 2 * (100 + 200) / 1000.0, "link-lossy": 2 * (20 + 300) / 1000.0}


def link_allowance(name):
    """What a slowed link adds to the bound of the tasks its instance runs."""
    return LINK_TRIPS * LINK_RTT_S.get(name, 0.0)


def load(run_dir):
    evs = []
    with open(os.path.join(run_dir, "history.jsonl")) as f:
        for line in f:
            evs.append(json.loads(line))
    with open(os.path.join(run_dir, "meta.json")) as f:
        meta = json.load(f)
    return evs, meta


class Task:
    __slots__ = ("key", "type", "id", "state", "early_ref", "late_ref", "t0", "t1", "conflict",
                 "deliveries", "gone_at", "gone_why", "resched")

    def __init__(self, key):
        self.key = key
        self.deliveries = []
        self.gone_at = None   # cancelled/finished from (t0 of that call), replaced from (its t1)
        self.gone_why = ""
        self.resched = []     # (t0, t1, early_ref, late_ref, acked)


def outcome(ev, i=None):
    """acked / unknown / failed, for an add (or task i of a batch)."""
    st = ev["status"]
    err = ev.get("err", "")
    if ev["op"] == "batch":
        ids = ev.get("ids")
        if st == 201 and ids:
            return "acked"
        if ids and i is not None and i < len(ids) and ids[i] is not None:
            return "acked"
        if ids:
            for part in ev.get("failed") or []:
                if i in part.get("tasks", []):
                    return "unknown" if part.get("error") in ("outcome_unknown", "internal_error") \
                        or part.get("status", 0) == 0 else "failed"
            return "unknown"
    if st == 201:
        return "acked"
    if st == 0:
        return "failed" if err == "unreachable" else "unknown"
    if err in DEFINITE_FAILURES or 400 <= st < 500:
        return "failed"
    return "unknown"


def build(evs):
    tasks = {}
    by_id_versions = defaultdict(list)  # id -> [(t1, key)] acked versions
    calls = [e for e in evs if e["ev"] == "call"]
    for e in calls:
        op = e["op"]
        if op in ("add", "bs_put", "batch"):
            metas = e["tasks"] if op == "batch" else [e["task"]]
            for i, m in enumerate(metas):
                t = tasks.get(m["key"]) or Task(m["key"])
                tasks[m["key"]] = t
                t.type, t.id, t.conflict = m["type"], m.get("id"), m.get("conflict")
                if op == "bs_put":
                    t.id = e.get("id")
                t.t0, t.t1 = e["t0"], e["t1"]
                t.state = outcome(e, i if op == "batch" else None)
                if op == "batch" and e.get("ids") and i < len(e["ids"]) and e["ids"][i]:
                    t.id = e["ids"][i]
                if op == "add" and e.get("id"):
                    t.id = e["id"]
                if m.get("due") is not None:
                    t.early_ref, t.late_ref = m["due"], max(m["due"], e["t1"])
                else:
                    t.early_ref, t.late_ref = e["t0"] + m["rel"], e["t1"] + m["rel"]
                keep = t.conflict == "keep" and t.state == "acked"
                if keep:
                    t.state = "maybe"  # kept the first version, or stored this one
                if (t.state == "acked" or keep) and t.id:
                    by_id_versions[t.id].append((e["t0"], e["t1"], t.key, keep))
    # A replace (or a new add of an id after the old task ran) supersedes the
    # versions before it, from its acknowledgment on: it may take effect at
    # any moment of its call, so the old version may still be delivered
    # (and finished) before it answered. (Counted from its start, a replace
    # that waited 4 s on a paused owner made a delivery of the old version
    # 2.5 s into it a "resurrection" in a CI run here: k1845, whose finish
    # the replace's answer followed.)
    for tid, vs in by_id_versions.items():
        vs.sort()
        for j, (b0, b1, k2, _) in enumerate(vs):
            if tasks[k2].conflict != "replace":
                continue
            for (a0, a1, k, _) in vs[:j]:
                t = tasks[k]
                if t.gone_at is None or b1 < t.gone_at:
                    t.gone_at, t.gone_why = b1, "replaced"

    # Cancels, reschedules and finishes. The version an id names at a moment
    # is the last one acknowledged before it; when that was an add with
    # "keep" (which kept the version before it, or stored itself), both.
    def versions_at(tid, when, until=None):
        cur = []
        for a0, a1, k, keep in by_id_versions.get(tid, []):
            if a1 <= when:
                # A keep leaves whatever version was there: every version
                # since the last plain add may be the one stored.
                cur = cur + [k] if keep else [k]
        # An add whose call overlapped this one: the server may have taken
        # them in either order.
        if until is not None:
            cur += [k for a0, a1, k, keep in by_id_versions.get(tid, []) if a0 < until and a1 > when]
        return cur
    for e in calls:
        op = e["op"]
        if op == "cancel":
            ks = versions_at(e["id"], e["t0"], e["t1"])
            for k in ks:
                t = tasks[k]
                if e["status"] == 204 and len(ks) == 1:
                    if t.gone_at is None or e["t0"] < t.gone_at:
                        t.gone_at, t.gone_why = e["t0"], "cancelled"
                elif e["status"] == 204 or e["status"] == 0 or e.get("err") == "outcome_unknown":
                    # Which version went is not known, or whether it went.
                    if t.state == "acked":
                        t.state = "maybe"
        elif op == "reschedule":
            if e.get("due") is not None:
                er, lr = e["due"], max(e["due"], e["t1"])
            else:
                er, lr = e["t0"] + e["rel"], e["t1"] + e["rel"]
            acked = e["status"] == 204
            unknown = e["status"] == 0 or e.get("err") == "outcome_unknown"
            if acked or unknown:
                ks = versions_at(e["id"], e["t0"], e["t1"])
                for k in ks:
                    # Sure only when it named one version; else in flight.
                    tasks[k].resched.append((e["t0"], e["t1"], er, lr, acked and len(ks) == 1))
        elif op in ("finish", "bs_delete"):
            t = tasks.get(e.get("key"))
            if t is not None and e["status"] == 204:
                if t.gone_at is None or e["t0"] < t.gone_at:
                    t.gone_at, t.gone_why = e["t0"], "finished"
    for e in evs:
        if e["ev"] == "deliver":
            t = tasks.get(e["key"])
            if t is None:
                t = Task(e["key"])
                t.state = "never_added"
                t.type = t.id = t.conflict = None
                t.early_ref = t.late_ref = t.t0 = t.t1 = 0
                tasks[e["key"]] = t
            t.deliveries.append(e)
    for t in tasks.values():
        t.deliveries.sort(key=lambda d: d["t"])
    return tasks


def due_in_force(t, when):
    """(early_ref, late_ref) of the version of the task in force at `when`.

    Of the reschedules acknowledged by then, the one in force is the one the
    server took last: any of them that no other one began after it had
    answered. Two whose calls overlapped may have been taken in either order
    (a CI run here had one sent through s3 and, 6 ms later, one through s1
    that answered first; the task fired at s1's due time, 25 ms before s3's,
    which counting by answer order called early). One not acknowledged, or
    not answered by then, may or may not have taken effect: either."""
    done = [(r0, r1, rer, rlr) for r0, r1, rer, rlr, acked in t.resched if acked and r1 <= when]
    if done:
        last = [d for d in done if not any(o[0] > d[1] for o in done)]
        er, lr = min(d[2] for d in last), max(d[3] for d in last)
    else:
        er, lr = t.early_ref, t.late_ref
    for r0, r1, rer, rlr, acked in t.resched:
        if r0 <= when and not (acked and r1 <= when):
            er, lr = min(er, rer), max(lr, rlr)  # in flight: either
    return er, lr


def last_due(evs):
    last = 0
    for e in evs:
        if e["ev"] != "call":
            continue
        if e["op"] in ("add", "batch", "bs_put"):
            for m in (e["tasks"] if e["op"] == "batch" else [e["task"]]):
                d = m["due"] if m.get("due") is not None else e["t1"] + m["rel"]
                last = max(last, d)
        elif e["op"] == "reschedule":
            last = max(last, e["due"] if e.get("due") is not None else e["t1"] + e["rel"])
    return last


def missing_now(evs, now):
    """Keys acknowledged, neither cancelled nor replaced, not yet delivered."""
    tasks = build(list(evs))
    return [k for k, t in tasks.items()
            if t.state == "acked" and t.gone_at is None and not t.deliveries]


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(math.ceil(p / 100.0 * len(xs))) - 1))]


def analyse(evs, meta):
    lease = meta["lease_ms"] / 1000.0
    tick = meta["tick_ms"] / 1000.0
    bound = 2 * lease + tick
    tasks = build(evs)
    # Phases and fault windows.
    phases = sorted([(e["t"], e["name"]) for e in evs if e["ev"] == "phase"])
    windows = []  # (t_on, t_off_done, kind, name, target)
    open_ = {}
    for e in sorted([e for e in evs if e["ev"] in ("fault", "fault_done")], key=lambda e: e["t"]):
        k = (e["name"], e["target"])
        if e["ev"] == "fault" and e["on"]:
            open_[k] = (e["t"], e["kind"])
        elif e["ev"] == "fault_done" and not e["on"] and k in open_:
            t_on, kind = open_.pop(k)
            windows.append((t_on, e["t"], kind, e["name"], e["target"]))
    end = meta.get("ended", 1e18)
    for k, (t_on, kind) in open_.items():
        windows.append((t_on, end, kind, k[0], k[1]))

    def phase_of(t):
        name = phases[0][1] if phases else "run"
        for start, n in phases:
            if t >= start:
                name = n
        return name

    rows = defaultdict(lambda: defaultdict(float))
    lates = defaultdict(list)
    bounds = defaultdict(lambda: bound)
    over = defaultdict(list)
    problems = []
    stale_push = defaultdict(int)
    max_fence = {}
    for e in sorted([e for e in evs if e["ev"] == "deliver" and e["via"] == "push"],
                    key=lambda e: e["t"]):
        s, f = e.get("shard", -1), e.get("fence", 0)
        if s >= 0:
            if f < max_fence.get(s, 0):
                stale_push[phase_of(e["t"])] += 1
            max_fence[s] = max(max_fence.get(s, 0), f)
    for t in tasks.values():
        if t.state == "never_added":
            ph = phase_of(t.deliveries[0]["t"])
            rows[ph]["unexpected"] += 1
            problems.append("%s: delivered but never added" % t.key)
            continue
        er0, lr0 = due_in_force(t, t.t1)
        ph = phase_of(lr0)
        r = rows[ph]
        if t.state == "acked":
            r["acked"] += 1
        ds = t.deliveries
        if t.state == "failed" and ds:
            r["unexpected"] += 1
            problems.append("%s: delivered, but its add failed for sure" % t.key)
        # Resurrected: delivered after a cancel, replace or finish was acknowledged.
        res = [d for d in ds if t.gone_at is not None and d["t"] > t.gone_at]
        if res:
            r["resurrected"] += len(res)
            problems.append("%s: delivered at %.3f after it was %s at %.3f" %
                            (t.key, res[0]["t"], t.gone_why, t.gone_at))
        live = [d for d in ds if d not in res]
        # Early: any delivery before the due time then in force.
        for d in live:
            er, _ = due_in_force(t, d["t"])
            if d["t"] + EPS < er:
                r["early"] += 1
                problems.append("%s: delivered %.3f s early (via %s, instance %s)" %
                                (t.key, er - d["t"], d["via"], d.get("inst")))
                break
        # Lost.
        if t.state == "acked" and t.gone_at is None and not live:
            r["lost"] += 1
            problems.append("%s (%s, id %s): acknowledged, never delivered" % (t.key, t.type, t.id))
        # Duplicates: completions beyond the first (failures on purpose are
        # retries, not duplicates).
        completions = [d for d in live if d.get("answered", 200) == 200 and
                       not (d["via"] == "pull" and _failed_on_purpose(d))]
        if len(completions) > 1:
            r["duplicates"] += len(completions) - 1
            r["dup_tasks"] += 1
        # Late: the first delivery against the due time in force, or the start
        # of an instance fault / the end of a Redis fault it waited through.
        # Lateness is held to the bound for tasks whose add was acknowledged
        # (an add whose outcome is unknown may have landed whenever its bytes
        # got through), and for pushed and pulled tasks: a beanstalk worker
        # runs one command at a time, and its delete waits for the store, so
        # a slow store delays the worker's next reserve too (reported, not
        # held).
        held_to_bound = t.state in ("acked", "maybe") and t.type != "fbs"
        if live and t.state in ("acked", "maybe", "unknown"):
            first = live[0]
            _, lr = due_in_force(t, first["t"])
            ref = lr
            limit = bound
            for (w_on, w_off, kind, name, target) in windows:
                if kind in ("instance", "clock") and lr < w_on <= first["t"]:
                    ref = max(ref, w_on)
                if kind == "redis" and lr < w_off + REDIS_RECONNECT_S and first["t"] > w_on:
                    # Waited through a Redis outage: counted from Redis being
                    # back, plus the store's reconnect backoff (at most 5 s:
                    # each connection tries again 100 ms, 200 ms ... 5 s
                    # after its last failure; docs/persistence.md).
                    ref = max(ref, w_off)
                    limit = max(limit, bound + REDIS_RECONNECT_S)
                if (name in LINK_RTT_S and target == first.get("inst") and w_on <= first["t"]
                        and w_off >= lr):
                    limit = max(limit, bound + link_allowance(name))
            late = max(0.0, first["t"] - ref)
            lates[ph].append(late)
            bounds[ph] = max(bounds[ph], limit)
            if late > limit and held_to_bound:
                over[ph].append((late, t.key, first.get("inst"), first["via"], ref))
    # Calls: 5xx and refused service per instance.
    calls = sorted([e for e in evs if e["ev"] == "call"], key=lambda e: e["t0"])
    for e in calls:
        bad = e["status"] == 0 or e["status"] >= 500
        if bad and e["op"] not in ("bs_probe",):
            rows[phase_of(e["t0"])]["5xx"] += 1
    spans = defaultdict(lambda: defaultdict(float))  # phase -> inst -> longest
    cur = {}
    for e in calls:
        if e["op"].startswith("bs_"):
            continue
        i = e["inst"]
        bad = e["status"] == 0 or (e["status"] >= 500 and e.get("err") not in
                                   ("owner_unreachable", "outcome_unknown", "not_durable_yet"))
        if bad:
            cur.setdefault(i, e["t0"])
            ph = phase_of(cur[i])
            spans[ph][i] = max(spans[ph][i], e["t1"] - cur[i])
        else:
            cur.pop(i, None)
    probes = defaultdict(lambda: [0, 0])
    for e in calls:
        if e["op"] == "bs_probe":
            p = probes[phase_of(e["t0"])]
            p[0] += 1
            if e["status"] != 200:
                p[1] += 1
    quick = defaultdict(list)  # 5xx answer times per phase
    for e in calls:
        if e["status"] >= 500:
            quick[phase_of(e["t0"])].append(e["t1"] - e["t0"])
    out = []
    order = [p[1] for p in phases] or list(rows)
    seen = set()
    for ph in order + sorted(set(rows) - set(order)):
        if ph in seen:
            continue
        seen.add(ph)
        r = rows[ph]
        ls = lates[ph]
        out.append({
            "phase": ph, "acked": int(r["acked"]), "lost": int(r["lost"]),
            "duplicates": int(r["duplicates"]),
            "dup_fraction": (r["duplicates"] / r["acked"]) if r["acked"] else 0.0,
            "resurrected": int(r["resurrected"]), "unexpected": int(r["unexpected"]),
            "early": int(r["early"]),
            "late_p99": pct(ls, 99), "late_max": max(ls) if ls else 0.0, "bound": bounds[ph],
            "over_bound": len(over[ph]), "stale_pushes": stale_push[ph],
            "fence_refused": meta.get("fence_by_phase", {}).get(ph),
            "5xx": int(r["5xx"]),
            "refused_s": {i: round(v, 2) for i, v in sorted(spans[ph].items())},
            "error_answer_p50_ms": pct(quick[ph], 50) * 1000, "error_answer_max_ms":
                max(quick[ph]) * 1000 if quick[ph] else 0.0,
            "probes": probes[ph][0], "probes_failed": probes[ph][1],
        })
        for late, key, inst, via, ref in sorted(over[ph], reverse=True)[:5]:
            problems.append("%s: %s, %.3f s late (over %.3f s), via %s from %s" %
                            (ph, key, late, bound, via, inst))
    return out, problems


def _failed_on_purpose(d):
    import zlib
    return zlib.crc32(d["key"].encode()) % 20 == 0 and d.get("attempt", 0) == 1


def report(rows, meta, problems):
    lines = []
    hdr = ("| fault | acked | lost | dup | dup % | resurr. | unexp. | early | late p99 s | "
           "late max s | bound s | over | stale pushes | fence refused | 5xx/no answer | "
           "longest refusal s (s1 s2 s3) | error answer p50/max ms | bs probes failed |")
    lines.append(hdr)
    lines.append("|" + "---|" * hdr.count("|")[:-1] if False else
                 "|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")
    for r in rows:
        ref = r["refused_s"]
        lines.append("| %s | %d | %d | %d | %.2f | %d | %d | %d | %.3f | %.3f | %.3f | %d | %d | %s | %d | %s | %.0f / %.0f | %s |" % (
            r["phase"], r["acked"], r["lost"], r["duplicates"], 100 * r["dup_fraction"],
            r["resurrected"], r["unexpected"], r["early"], r["late_p99"], r["late_max"],
            r["bound"], r["over_bound"], r["stale_pushes"],
            "-" if r["fence_refused"] is None else r["fence_refused"], r["5xx"],
            " ".join("%s" % ref.get(i, 0) for i in ("s1", "s2", "s3")),
            r["error_answer_p50_ms"], r["error_answer_max_ms"],
            "%d of %d" % (r["probes_failed"], r["probes"]) if r["probes"] else "-"))
    return "\n".join(lines)


def verdict(rows):
    bad = []
    for r in rows:
        for k in ("lost", "resurrected", "unexpected", "early", "over_bound"):
            if r[k]:
                bad.append("%s: %s %d" % (r["phase"], k, r[k]))
        if r["probes"] and r["probes_failed"]:
            bad.append("%s: %d beanstalk probes not served" % (r["phase"], r["probes_failed"]))
    return bad


def main():
    run_dir = sys.argv[1]
    evs, meta = load(run_dir)
    rows, problems = analyse(evs, meta)
    print(report(rows, meta, problems))
    print()
    print("lease %d ms, tick %d ms: lateness bound 2 leases + 1 tick = %.3f s" %
          (meta["lease_ms"], meta["tick_ms"], rows[0]["bound"] if rows else 0))
    print("fence refusals counted at the store (all shards, whole run): %s" %
          meta.get("fence_refused_at_store"))
    with open(os.path.join(run_dir, "report.json"), "w") as f:
        json.dump({"rows": rows, "problems": problems, "meta": {k: v for k, v in meta.items()
                                                                if k != "metrics"}}, f, indent=1)
    bad = verdict(rows)
    if problems:
        print("\nfirst problems:")
        for p in problems[:40]:
            print("  " + p)
    if bad:
        print("\nFAILED: " + "; ".join(bad))
        return 1
    print("\nOK: nothing lost, resurrected, unexpected or early; every lateness within its bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())

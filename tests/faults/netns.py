"""The fault harness's network: one namespace per party, joined point to point.

Parties: s1, s2, s3 (delayq-server), redis, client (the workload, the push
receiver, the checker's reads). Every party lives in a network namespace the
harness makes, named PREFIX-PARTY with PREFIX = "dqf-<pid of the run>", and
each pair of parties is joined by a veth pair made directly between their two
namespaces (`ip -n A link add ... peer ... netns B`): no interface of the
harness is ever in the root namespace, not even for a moment, and no namespace
has a default route. A link taken down therefore makes a connect() fail at
once with "network unreachable"; no packet can leave the machine.

Addresses: each party has a host address 10.201.0.N/32 on its loopback
interface (N: s1=1, s2=2, s3=3, redis=4, client=5), and each link a /30
(10.201.(16*a+b).1 on a's side, .2 on b's side). A party reaches another's
host address by a /32 route over their link, with the host address as the
source, so every connection between two parties uses exactly one link and a
cut link cuts exactly that pair.
"""

import json
import os
import re
import subprocess

PARTIES = {"s1": 1, "s2": 2, "s3": 3, "redis": 4, "client": 5}
NAME_RE = re.compile(r"^dqf-(\d+)-([a-z0-9]+)$")


def host_addr(party):
    return "10.201.0.%d" % PARTIES[party]


def _link_net(a, b):
    x, y = sorted((PARTIES[a], PARTIES[b]))
    return "10.201.%d" % (16 * x + y)


def link_ifname(peer):
    """The name of the interface, in any party's namespace, that leads to `peer`."""
    return "to-" + peer


def sh(*args, check=True):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()))
    return r


class Network:
    def __init__(self, prefix):
        self.prefix = prefix

    def ns(self, party):
        return "%s-%s" % (self.prefix, party)

    def create(self):
        names = list(PARTIES)
        for p in names:
            sh("ip", "netns", "add", self.ns(p))
            n = self.ns(p)
            sh("ip", "-n", n, "link", "set", "lo", "up")
            sh("ip", "-n", n, "addr", "add", host_addr(p) + "/32", "dev", "lo")
            # No IPv6 on our links: nothing but the addresses above exists.
            sh("ip", "netns", "exec", n, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
            sh("ip", "netns", "exec", n, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1")
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                # Both ends are made inside the two namespaces at once.
                sh("ip", "-n", self.ns(a), "link", "add", link_ifname(b), "type", "veth",
                   "peer", "name", link_ifname(a), "netns", self.ns(b))
                net = _link_net(a, b)
                first, second = (a, b) if PARTIES[a] < PARTIES[b] else (b, a)
                for me, other, mine, theirs in ((first, second, ".1", ".2"),
                                                (second, first, ".2", ".1")):
                    n = self.ns(me)
                    sh("ip", "-n", n, "addr", "add", net + mine + "/30", "dev", link_ifname(other))
                    sh("ip", "-n", n, "link", "set", link_ifname(other), "up")
                    sh("ip", "-n", n, "route", "add", host_addr(other) + "/32", "via",
                       net + theirs, "dev", link_ifname(other), "src", host_addr(me))

    def check_isolated(self):
        """Raises unless every party's namespace exists, has no default route
        (v4 or v6), holds exactly lo and its links, and the root namespace holds
        no interface of ours."""
        problems = []
        for p in PARTIES:
            n = self.ns(p)
            for fam in ("-4", "-6"):
                r = sh("ip", "-n", n, fam, "route", "show", "default", check=False)
                if r.returncode != 0:
                    problems.append("%s: cannot read its routes: %s" % (n, r.stderr.strip()))
                elif r.stdout.strip():
                    problems.append("%s has a default route (%s): %s" % (n, fam, r.stdout.strip()))
            links = json.loads(sh("ip", "-n", n, "-j", "link", "show").stdout or "[]")
            got = sorted(l["ifname"] for l in links)
            want = sorted(["lo"] + [link_ifname(q) for q in PARTIES if q != p])
            if got != want:
                problems.append("%s holds interfaces %s, expected %s" % (n, got, want))
            for l in links:
                if l["ifname"] != "lo" and "link_netnsid" not in l:
                    problems.append("%s: %s has no peer in another namespace" % (n, l["ifname"]))
        root = json.loads(sh("ip", "-j", "link", "show").stdout or "[]")
        for l in root:
            if l["ifname"].startswith("to-"):
                problems.append("the root namespace holds %s" % l["ifname"])
        if problems:
            raise RuntimeError("refusing to run: the harness's network is not isolated:\n  " +
                               "\n  ".join(problems))

    def destroy(self):
        for p in PARTIES:
            destroy_namespace(self.ns(p))

    # Link faults: an interface taken down inside a namespace (both ends, so
    # neither side keeps a route over it).
    def set_link(self, a, b, up):
        state = "up" if up else "down"
        sh("ip", "-n", self.ns(a), "link", "set", link_ifname(b), state)
        sh("ip", "-n", self.ns(b), "link", "set", link_ifname(a), state)
        if up:
            # The /32 routes went with the link; put them back.
            net = _link_net(a, b)
            for me, other in ((a, b), (b, a)):
                theirs = ".2" if PARTIES[me] < PARTIES[other] else ".1"
                sh("ip", "-n", self.ns(me), "route", "replace", host_addr(other) + "/32", "via",
                   net + theirs, "dev", link_ifname(other), "src", host_addr(me))


def destroy_namespace(name):
    """Kills every process in namespace `name`, then removes it."""
    r = sh("ip", "netns", "pids", name, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass
    sh("ip", "netns", "del", name, check=False)


def remove_stale():
    """Removes the namespaces of earlier runs whose process is gone (a run
    killed with SIGKILL cannot clean up after itself). Returns their names."""
    removed = []
    r = sh("ip", "netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = NAME_RE.match(name)
        if not m:
            continue
        pid = int(m.group(1))
        alive = os.path.exists("/proc/%d" % pid)
        if alive:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    alive = b"faults.py" in f.read()
            except OSError:
                alive = False
        if not alive:
            destroy_namespace(name)
            removed.append(name)
    return removed

"""Membership change on real processes (docs/membership.md): a four-node Zab cluster born with
node 4 as an observer; the observer serves reads and writes; `synod member` promotes it, then
removes node 1, while a client keeps writing; no acknowledged write is lost; refusals say why.

Ports: cluster 4 of the ops range (conftest.py).
"""

import json
import threading
import time

from kazoo.client import KazooClient

from conftest import Synod, synod


def members(s, i):
    rc, out = synod("member", "list", "--admin", s.admin(i))
    line = out.strip().splitlines()[0]
    return json.loads(line.split(": ", 1)[1])


def wait_for(what, f, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = f()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for %s" % what)


def test_an_observer_is_promoted_and_a_voter_removed_under_writes(workdir):
    s = Synod(workdir, 4, "zab", n=4, extra="observers = [4]\n")
    s.start()
    admins = ",".join(s.admin(i) for i in range(1, 5))
    try:
        m = wait_for("the observer to follow",
                     lambda: (lambda m: m if m["role"] == "following" else None)(members(s, 4)))
        assert (m["voters"], m["learners"], m["version"]) == ([1, 2, 3], [4], 0), m

        # The observer serves clients: a write through it, read back through a voter.
        obs = KazooClient(hosts="127.0.0.1:%d" % s.client_port(4), timeout=10)
        obs.start(timeout=15)
        obs.create("/through-observer", b"o")
        voter = KazooClient(hosts="127.0.0.1:%d" % s.client_port(1), timeout=10)
        voter.start(timeout=15)
        voter.sync("/through-observer")
        assert voter.get("/through-observer")[0] == b"o"
        voter.create("/through-voter", b"v")
        obs.sync("/through-voter")
        assert obs.get("/through-voter")[0] == b"v"
        voter.stop()

        # A writer on nodes 2-4 while the configuration changes twice.
        acked = []
        stop = threading.Event()
        errors = []

        def write():
            c = KazooClient(hosts=",".join("127.0.0.1:%d" % s.client_port(i) for i in (2, 3, 4)),
                            timeout=10)
            c.start(timeout=15)
            c.ensure_path("/w")
            i = 0
            while not stop.is_set():
                try:
                    c.create("/w/n%06d" % i, b"x")
                    acked.append(i)
                except Exception as e:  # noqa: BLE001 - a failed write is retried, never counted
                    errors.append(repr(e))
                    time.sleep(0.05)
                i += 1
            c.stop()

        t = threading.Thread(target=write)
        t.start()
        time.sleep(1.0)

        # Refusals say why and change nothing.
        rc, out = synod("member", "promote", 2, "--admin", admins, check=False)
        assert rc != 0 and "not a learner" in out, out
        rc, out = synod("member", "promote", 4, "--expect-version", "0x77", "--admin", admins,
                        check=False)
        assert rc != 0 and "configuration changed" in out, out

        rc, out = synod("member", "promote", 4, "--admin", admins)
        done = json.loads(out.strip().splitlines()[-1])
        assert (done["voters"], done["learners"]) == ([1, 2, 3, 4], []), done
        assert done["version"] > 0
        wait_for("every node to know four voters",
                 lambda: all(members(s, i)["voters"] == [1, 2, 3, 4] for i in range(1, 5)))
        time.sleep(1.0)

        rc, out = synod("member", "remove", 1, "--admin", admins)
        done = json.loads(out.strip().splitlines()[-1])
        assert done["voters"] == [2, 3, 4], done
        wait_for("nodes 2-4 to know the removal",
                 lambda: all(members(s, i)["voters"] == [2, 3, 4] for i in (2, 3, 4)))
        # Node 1 is gone for good: the group goes on without it.
        s.procs[1].kill()
        s.procs[1].wait()
        before = len(acked)
        wait_for("writes after node 1 left", lambda: len(acked) > before + 20)
        stop.set()
        t.join(timeout=30)

        obs.sync("/w")
        present = set(int(c[1:]) for c in obs.get_children("/w"))
        lost = [i for i in acked if i not in present]
        assert not lost, "acknowledged writes lost: %s" % lost[:10]
        assert len(acked) > 50, (len(acked), errors[:5])
        obs.stop()
    finally:
        s.stop()

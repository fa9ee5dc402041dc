"""etcdctl 3.4 (Debian's etcd-client) runs one script against a real etcd 3.4 and against synod;
the transcripts must be the same, revisions included. What differs by nature is masked: lease
ids, cluster and member ids, terms, the seconds a lease has left.
"""

import difflib
import json
import re
import subprocess
import time

from conftest import ETCDCTL

LEASE_HEX = re.compile(r"\b[0-9a-f]{16}\b")


def normalize(text):
    out = []
    for line in text.splitlines():
        # clientv3's retry warnings are JSON log lines: not part of the answer.
        if line.startswith('{"level"'):
            continue
        line = LEASE_HEX.sub("<lease>", line)
        line = re.sub(r"remaining\(\d+s\)", "remaining(Ns)", line)
        line = re.sub(r'^"(ClusterID|MemberID|RaftTerm)" : \d+$', r'"\1" : N', line)
        # etcd's lessor keeps a lease's keys in a Go map: their order is random.
        line = re.sub(
            r"attached keys\(\[([^\]]*)\]\)",
            lambda m: "attached keys([%s])" % " ".join(sorted(m.group(1).split())),
            line,
        )
        out.append(line)
    return out


def transcript(t):
    """Run the script against target t; a list of lines."""
    lines = []

    def run(*args, stdin=None, timeout=20):
        code, out, err = t.etcdctl(*args, stdin=stdin, timeout=timeout)
        lines.extend(normalize("$ etcdctl " + " ".join(args) + ("  (exit %d)" % code if code else "")))
        lines.extend(normalize(out))
        lines.extend(l for l in normalize(err) if l.startswith("Error"))
        return out

    def background(*args):
        return subprocess.Popen(
            [ETCDCTL] + t.flags() + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def finish(p, title):
        time.sleep(1)
        p.terminate()
        out, err = p.communicate(timeout=10)
        lines.append("$ " + title)
        lines.extend(normalize(out))

    # Puts, gets with every option etcdctl has, and the revision fields they show.
    run("put", "k1", "v1")
    run("put", "k2", "v2")
    run("put", "k3", "v3")
    run("put", "k1", "v1b", "--prev-kv")
    run("get", "k1", "-w", "fields")
    run("get", "k", "--prefix", "-w", "fields")
    run("get", "k1", "k3")
    run("get", "k", "--prefix", "--limit", "2", "-w", "fields")
    run("get", "k", "--prefix", "--rev", "3")
    run("get", "k", "--prefix", "--sort-by=VALUE", "--order=DESCEND")
    run("get", "k", "--prefix", "--sort-by=CREATE", "--order=ASCEND", "--keys-only")
    run("get", "k", "--prefix", "--sort-by=MODIFY", "--order=DESCEND", "--limit", "1")
    run("get", "k", "--prefix", "--print-value-only")
    run("get", "k2", "--from-key")
    run("get", "k", "--prefix", "--consistency=s")
    run("get", "k1", "--rev", "1000")
    run("get", "", "--prefix")
    run("put", "", "empty-key")
    # Deletes: one key with its previous value, nothing, a prefix.
    run("del", "k2", "--prev-kv")
    run("del", "nothing")
    run("get", "k", "--prefix", "-w", "fields")
    # Txns from stdin (a file) and interactive: compares on every target, both branches.
    txn = 'mod("k1") = "5"\nversion("k3") = "1"\nvalue("k3") = "v3"\n\nput k4 v4\nput k5 v5\nget k1\n\nget k3\n\n'
    run("txn", stdin=txn)
    run("txn", stdin=txn)
    run("txn", "--interactive", stdin='create("k9") = "0"\n\nput k9 nine\n\ndel k9\n\n')
    run("txn", stdin='mod("k1") > "1"\n\ndel k --prefix\n\n\n')
    run("txn", stdin='\n\nput d v\nput d w\n\n\n')
    run("get", "", "--prefix", "-w", "fields")
    # Watches: history from a revision with previous values, and a live watch.
    p = background("watch", "--rev", "2", "--prefix", "k", "--prev-kv")
    finish(p, "etcdctl watch --rev 2 --prefix k --prev-kv")
    p = background("watch", "--prefix", "w/")
    time.sleep(1)
    run("put", "w/a", "1")
    run("txn", stdin='\n\nput w/b 2\nput w/c 3\n\n\n')
    run("del", "w/", "--prefix")
    finish(p, "etcdctl watch --prefix w/")
    # Leases.
    out = run("lease", "grant", "30")
    lease = out.split()[1]
    run("put", "--lease=" + lease, "lk1", "v")
    run("put", "--lease=" + lease, "lk2", "v")
    run("lease", "timetolive", lease, "--keys")
    run("lease", "keep-alive", "--once", lease)
    run("lease", "list")
    run("put", "--lease=0000000000000001", "lk3", "v")
    run("lease", "revoke", lease)
    run("get", "lk", "--prefix")
    run("lease", "timetolive", lease)
    run("lease", "revoke", lease)
    # A lock held while a command runs, then released (its session's lease revoked).
    run("lock", "mylock", "echo", "holding the lock")
    run("get", "mylock", "--prefix")
    # An election: campaign, lead until interrupted, resign.
    p = background("elect", "myelection", "p1")
    time.sleep(2)
    run("get", "myelection", "--prefix", "--keys-only")
    p.send_signal(2)
    out, _ = p.communicate(timeout=10)
    lines.append("$ etcdctl elect myelection p1")
    lines.extend(normalize(out))
    run("get", "myelection", "--prefix")
    # Compaction: old revisions are gone, the compaction point is still readable.
    run("compaction", "10")
    run("get", "k", "--prefix", "--rev", "9")
    run("get", "k", "--prefix", "--rev", "10")
    run("compaction", "5")
    run("get", "", "--prefix", "-w", "fields")
    return lines


def test_etcdctl_script_gives_etcds_transcript(real_etcd, synod_etcd):
    want = transcript(real_etcd)
    got = transcript(synod_etcd)
    if want != got:
        diff = "\n".join(difflib.unified_diff(want, got, "etcd 3.4", "synod", lineterm="", n=3))
        raise AssertionError("etcdctl differs between etcd and synod:\n" + diff)


def test_endpoint_status_health_and_member_list(target):
    code, out, err = target.etcdctl("endpoint", "health", endpoints=target.endpoints)
    assert code == 0, err
    assert (out + err).count("is healthy") == len(target.endpoints), out + err
    code, out, err = target.etcdctl("endpoint", "status", "-w", "json", endpoints=target.endpoints)
    assert code == 0, err
    status = json.loads(out)
    assert len(status) == len(target.endpoints)
    leaders = {s["Status"]["leader"] for s in status}
    assert len(leaders) == 1 and 0 not in leaders, status
    for s in status:
        assert s["Status"]["version"].startswith("3.4."), s
        assert s["Status"]["header"]["revision"] >= 1
    code, out, err = target.etcdctl("member", "list", "-w", "json")
    assert code == 0, err
    members = json.loads(out)["members"]
    assert len(members) == len(target.endpoints)
    urls = sorted(u for m in members for u in m["clientURLs"])
    assert urls == sorted(target.endpoints)


"""`synod import --zookeeper`: a ZooKeeper 3.8 data directory, killed with SIGKILL while a session
still held ephemerals, moves into three-node synod clusters (zab, paxos, mencius), and a client
sees the same tree: paths, data, Stats (versions, cversion, aversion, zxids, times, ephemeral
owners), ACLs; the next sequential number continues; the dead session's ephemerals expire."""

import os
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl, make_digest_acl

from conftest import SUPER_AUTH, ZK_JAR, BASE, Synod, ZooKeeper, synod, walk


def build_tree(zk):
    """Nested nodes, binary, empty and null data, sequentials (one deleted), digest and
    world ACLs, several versions, deletions, a multi."""
    zk.create("/app", b"root")
    zk.create("/app/nested/deep/leaf", b"leaf", makepath=True)
    zk.create("/app/bin", bytes(range(256)))
    zk.create("/app/empty", b"")
    zk.create("/app/null", None)
    for _ in range(3):
        zk.create("/app/seq/item-", b"s", sequence=True, makepath=True)
    zk.delete("/app/seq/item-0000000001")
    zk.create("/app/secret", b"for alice", acl=[make_digest_acl("alice", "pw", all=True)])
    zk.create("/app/ro", b"read only", acl=[make_acl("world", "anyone", read=True)])
    for i in range(3):
        zk.set("/app", b"v%d" % i)
    zk.set_acls("/app/bin", [make_acl("world", "anyone", all=True)])
    zk.create("/app/gone", b"")
    zk.create("/app/gone/child", b"")
    zk.delete("/app/gone", recursive=True)
    t = zk.transaction()
    t.create("/app/multi", b"m")
    t.set_data("/app/empty", b"")
    t.commit()
    for i in range(30):  # enough transactions for several snapshots (snapCount=10)
        zk.create("/app/many-%02d" % i, b"x" * i)
        if i % 3 == 0:
            zk.set("/app/many-%02d" % i, b"y")
    # A burst of pipelined writes while ZooKeeper snapshots in the background: fuzzy snapshots.
    zk.create("/app/burst", b"")
    ops = [zk.create_async("/app/burst/b%03d" % i, b"%d" % i) for i in range(200)]
    ops += [zk.set_async("/app/burst", b"%d" % i) for i in range(100)]
    ops += [zk.delete_async("/app/burst/b%03d" % i) for i in range(0, 200, 2)]
    for op in ops:
        op.get()


@pytest.fixture(scope="module")
def imported(workdir):
    if not os.path.exists(ZK_JAR):
        pytest.skip("Apache ZooKeeper is not installed (apt-get install zookeeper)")
    zk = ZooKeeper(workdir, BASE)
    admin = KazooClient(hosts=zk.hosts(), auth_data=SUPER_AUTH)
    admin.start()
    build_tree(admin)
    # A session closed before the kill: its ephemeral is gone.
    closed = KazooClient(hosts=zk.hosts())
    closed.start()
    closed.create("/app/closed-eph", b"", ephemeral=True)
    closed.stop()
    closed.close()
    # A session alive when ZooKeeper dies: its ephemerals stay until it expires.
    live = KazooClient(hosts=zk.hosts(), timeout=4.0)
    live.start()
    live.create("/app/eph", b"e", ephemeral=True)
    seq_eph = live.create("/app/seq/eph-", b"", ephemeral=True, sequence=True)
    live_session = live.client_id[0]
    expected = walk(admin)
    admin.stop()
    admin.close()
    zk.kill()
    live.stop()  # its close cannot reach the dead server
    live.close()
    files = sorted(os.listdir(os.path.join(zk.data, "version-2")))
    assert sum(f.startswith("snapshot.") for f in files) >= 2, files
    assert sum(f.startswith("log.") for f in files) >= 2, files
    out = os.path.join(workdir, "zk.synodbak")
    _, text = synod("import", "--zookeeper", zk.data, "--out", out)
    assert "backup written" in text, text
    return {"file": out, "expected": expected, "session": live_session, "seq_eph": seq_eph,
            "dir": zk.data, "workdir": workdir}


def state_of(path):
    """The state part of a backup file (its header holds the creation time)."""
    b = open(path, "rb").read()
    hlen = int.from_bytes(b[12:16], "big")
    at = 16 + hlen
    slen = int.from_bytes(b[at:at + 8], "big")
    return b[at + 8:at + 8 + slen]


def test_every_snapshot_replays_to_the_same_tree(imported):
    """Starting from each snapshot ZooKeeper wrote (fuzzy ones among them), the snapshot and the
    logs after it replay to exactly the same state."""
    v2 = os.path.join(imported["dir"], "version-2")
    snaps = [f for f in os.listdir(v2) if f.startswith("snapshot.")]
    logs = [f for f in os.listdir(v2) if f.startswith("log.")]
    want = state_of(imported["file"])
    for s in snaps:
        d = os.path.join(imported["workdir"], "only-" + s, "version-2")
        os.makedirs(d)
        for f in logs + [s]:
            os.link(os.path.join(v2, f), os.path.join(d, f))
        out = os.path.join(imported["workdir"], s + ".synodbak")
        synod("import", "--zookeeper", os.path.dirname(d), "--out", out)
        assert state_of(out) == want, s


@pytest.mark.parametrize("k,protocol", [(0, "zab"), (1, "paxos"), (2, "mencius")])
def test_a_zookeeper_tree_moves_into_synod(workdir, imported, k, protocol):
    c = Synod(workdir, k, protocol)
    for i in range(1, c.n + 1):
        synod("restore", "--from", imported["file"], "--config", c.config(i))
    c.start()
    try:
        zk = KazooClient(hosts=c.hosts(), auth_data=SUPER_AUTH)
        zk.start()
        try:
            got = walk(zk)
            expected = imported["expected"]
            assert sorted(got) == sorted(expected)
            for p in expected:
                assert got[p] == expected[p], p
            assert got["/app/eph"]["stat"][7] == imported["session"], "the ephemeral keeps its owner"
            assert got["/app/null"]["data"] is None
            assert got["/app/bin"]["data"] == bytes(range(256))
            # The next sequential name continues from the parent's creations.
            cversion, children = expected["/app/seq"]["stat"][5], expected["/app/seq"]["stat"][9]
            created = (cversion + children) // 2
            p = zk.create("/app/seq/item-", b"", sequence=True)
            assert p == "/app/seq/item-%010d" % created, p
            # New zxids are above every imported one.
            _, st = zk.get("/app/seq")
            assert st.pzxid > max(v["stat"][1] for v in expected.values())
            # ACLs hold: a client without alice's digest cannot read her node.
            anon = KazooClient(hosts=c.hosts())
            anon.start()
            with pytest.raises(NoAuthError):
                anon.get("/app/secret")
            anon.add_auth("digest", "alice:pw")
            assert anon.get("/app/secret")[0] == b"for alice"
            anon.stop()
            anon.close()
            # The session that was alive when ZooKeeper died expires, as after a restart.
            deadline = time.time() + 40
            while zk.exists("/app/eph") and time.time() < deadline:
                time.sleep(0.5)
            assert not zk.exists("/app/eph")
            assert not zk.exists(imported["seq_eph"])
        finally:
            zk.stop()
            zk.close()
    finally:
        c.stop()


def test_restore_refuses_a_used_data_directory(workdir, imported):
    c = Synod(workdir, 3, "zab")
    synod("restore", "--from", imported["file"], "--config", c.config(1))
    code, out = synod("restore", "--from", imported["file"], "--config", c.config(1), check=False)
    assert code != 0 and "is not empty" in out and "--force" in out, out
    synod("restore", "--from", imported["file"], "--config", c.config(1), "--force")


def test_a_corrupt_zookeeper_directory_is_refused_by_name_and_offset(workdir, imported):
    v2 = os.path.join(imported["dir"], "version-2")
    bad = os.path.join(workdir, "bad-zk", "version-2")
    os.makedirs(bad)
    snaps = sorted((f for f in os.listdir(v2) if f.startswith("snapshot.")),
                   key=lambda f: int(f.split(".")[1], 16))
    logs = [f for f in os.listdir(v2) if f.startswith("log.")]
    newest = snaps[-1]
    data = bytearray(open(os.path.join(v2, newest), "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(os.path.join(bad, newest), "wb").write(bytes(data))
    for f in logs:
        open(os.path.join(bad, f), "wb").write(open(os.path.join(v2, f), "rb").read())
    # The only snapshot is corrupt: refused, naming the file and the offset.
    code, out = synod("import", "--zookeeper", os.path.dirname(bad), "--out",
                      os.path.join(workdir, "bad.synodbak"), check=False)
    assert code != 0 and newest in out and "at byte" in out, out
    # A log record corrupted in the middle of the newest log is refused too.
    open(os.path.join(bad, newest), "wb").write(open(os.path.join(v2, newest), "rb").read())
    log = max(logs, key=lambda f: int(f.split(".")[1], 16))
    raw = bytearray(open(os.path.join(v2, log), "rb").read())
    raw[16 + 12 + 5] ^= 0x01  # inside the first record's transaction
    open(os.path.join(bad, log), "wb").write(bytes(raw))
    code, out = synod("import", "--zookeeper", os.path.dirname(bad), "--out",
                      os.path.join(workdir, "bad.synodbak"), check=False)
    assert code != 0 and log in out and "checksum" in out, out

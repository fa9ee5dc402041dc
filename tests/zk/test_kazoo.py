"""ZooKeeper client compatibility, through kazoo (and a raw client for what kazoo lacks).

Run against synod:      ZK_TARGET=synod     pytest tests/zk
Run against ZooKeeper:  ZK_TARGET=zookeeper pytest tests/zk
"""

import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.states import EventType
from kazoo.recipe.barrier import Barrier, DoubleBarrier
from kazoo.recipe.cache import TreeCache
from kazoo.recipe.counter import Counter
from kazoo.recipe.election import Election
from kazoo.recipe.lock import Lock, Semaphore
from kazoo.recipe.party import Party
from kazoo.recipe.queue import LockingQueue, Queue
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.security import make_digest_acl

from conftest import OPEN_ACL, RawZK, four_letter, jbuf, jstr

# Error codes (KeeperException.Code).
NONODE, BADARGUMENTS, NOWATCHER = -101, -8, -121


def wait_for(pred, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.fixture
def zk(cluster):
    c = KazooClient(hosts=cluster.hosts(), timeout=10)
    c.start(timeout=30)
    yield c
    c.stop()
    c.close()


@pytest.fixture
def base(zk):
    """A fresh parent node per test."""
    p = "/t-" + uuid.uuid4().hex[:10]
    zk.create(p)
    yield p


def client(cluster, only=None, timeout=10):
    c = KazooClient(hosts=cluster.hosts(only), timeout=timeout)
    c.start(timeout=30)
    return c


# ---------------------------------------------------------------- basic operations


def test_create_get_set_delete_and_stats(zk, base):
    p = zk.create(base + "/a", b"one")
    assert p == base + "/a"
    data, st = zk.get(p)
    assert data == b"one"
    assert st.version == 0 and st.czxid == st.mzxid == st.pzxid and st.dataLength == 3
    assert st.ctime == st.mtime and st.numChildren == 0 and st.ephemeralOwner == 0
    st2 = zk.set(p, b"three")
    assert st2.version == 1 and st2.mzxid > st.mzxid and st2.czxid == st.czxid
    assert st2.dataLength == 5
    with pytest.raises(BadVersionError):
        zk.set(p, b"x", version=0)
    with pytest.raises(NodeExistsError):
        zk.create(p)
    with pytest.raises(NoNodeError):
        zk.create(base + "/missing/child")
    zk.create(p + "/c")
    parent = zk.exists(p)
    assert parent.numChildren == 1 and parent.cversion == 1 and parent.pzxid > st2.mzxid
    with pytest.raises(NotEmptyError):
        zk.delete(p)
    with pytest.raises(BadVersionError):
        zk.delete(p + "/c", version=5)
    zk.delete(p + "/c", version=0)
    assert zk.exists(p).cversion == 2
    zk.delete(p)
    assert zk.exists(p) is None
    with pytest.raises(NoNodeError):
        zk.get(p)


def test_create2_children2_and_root(zk, base):
    path, st = zk.create(base + "/x", b"d", include_data=True)
    assert path == base + "/x" and st.version == 0 and st.dataLength == 1
    zk.create(base + "/y")
    kids, st = zk.get_children(base, include_data=True)
    assert sorted(kids) == ["x", "y"] and st.numChildren == 2
    assert "zookeeper" in zk.get_children("/")


def test_sequential_nodes(zk, base):
    a = zk.create(base + "/n-", sequence=True)
    b = zk.create(base + "/n-", sequence=True)
    assert a == base + "/n-0000000000"
    assert b == base + "/n-0000000001"
    zk.delete(a)
    c = zk.create(base + "/n-", sequence=True)
    assert c == base + "/n-0000000002", "the suffix counts creations, not deletes"
    assert zk.exists(base).cversion == 4, "the visible cversion counts both"
    e = zk.create(base + "/e-", ephemeral=True, sequence=True)
    assert e.startswith(base + "/e-")


def test_ephemerals(zk, cluster, base):
    other = client(cluster)
    p = other.create(base + "/eph", b"", ephemeral=True)
    # The other session may have written through another server: sync before reading it here.
    zk.sync(base)
    st = zk.exists(p)
    assert st.ephemeralOwner == other.client_id[0]
    with pytest.raises(Exception):
        other.create(p + "/child")
    other.stop()
    other.close()
    assert wait_for(lambda: zk.exists(p) is None, 5), "closing the session removes its ephemerals"


def test_session_expiry_removes_ephemerals(zk, cluster, base):
    # A client process that dies without closing its session.
    code = (
        "import sys,time; sys.path.insert(0, %r)\n"
        "from kazoo.client import KazooClient\n"
        "c = KazooClient(hosts=%r, timeout=4); c.start(timeout=30)\n"
        "c.create(%r, b'', ephemeral=True); print('ready', flush=True); time.sleep(600)\n"
    ) % (sys.path[0], cluster.hosts(), base + "/dying")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    proc.kill()
    proc.wait()
    zk.sync(base)
    assert zk.exists(base + "/dying") is not None
    assert wait_for(lambda: zk.exists(base + "/dying") is None, 30), "the session expired"


def test_sync_then_read(zk, cluster, base):
    other = client(cluster)
    zk.create(base + "/s", b"v1")
    zk.set(base + "/s", b"v2")
    other.sync(base + "/s")
    assert other.get(base + "/s")[0] == b"v2"
    other.stop()
    other.close()


def test_multi_all_or_nothing(zk, base):
    t = zk.transaction()
    t.create(base + "/m1", b"1")
    t.create(base + "/m1/m2", b"2")
    t.check(base, 0)
    t.set_data(base, b"x")
    res = t.commit()
    assert res[0] == base + "/m1" and res[1] == base + "/m1/m2"
    assert res[2] is True and res[3].version == 1
    t = zk.transaction()
    t.create(base + "/m3")
    t.delete(base + "/m1")  # not empty: fails
    t.create(base + "/m4")
    res = t.commit()
    assert isinstance(res[0], RolledBackError)
    assert isinstance(res[1], NotEmptyError)
    assert zk.exists(base + "/m3") is None and zk.exists(base + "/m4") is None
    t = zk.transaction()
    t.check(base, 0)  # version is 1 now
    t.create(base + "/m5")
    res = t.commit()
    assert isinstance(res[0], BadVersionError)
    assert zk.exists(base + "/m5") is None


def test_acls_and_digest_auth(cluster, zk, base):
    owner = client(cluster)
    owner.add_auth("digest", "alice:secret")
    acl = make_digest_acl("alice", "secret", all=True)
    p = owner.create(base + "/private", b"s", acl=[acl])
    got, st = owner.get_acls(p)
    assert got[0].id.scheme == "digest" and got[0].id.id.startswith("alice:")
    assert owner.get(p)[0] == b"s"
    zk.sync(base)  # owner may have written through another server
    with pytest.raises(NoAuthError):
        zk.get(p)
    with pytest.raises(NoAuthError):
        zk.set(p, b"x")
    # The "auth" scheme stands for the creator's identities.
    from kazoo.security import ACL, Id
    q = owner.create(base + "/mine", b"", acl=[ACL(31, Id("auth", ""))])
    assert owner.get_acls(q)[0][0].id.id == got[0].id.id
    owner.set_acls(p, [make_digest_acl("alice", "secret", read=True)])
    assert owner.get_acls(p)[1].aversion == 1
    with pytest.raises(NoAuthError):
        owner.set(p, b"y")
    owner.stop()
    owner.close()


# ---------------------------------------------------------------- watches


def test_one_shot_watches(zk, base):
    events = []
    p = base + "/w"
    zk.exists(p, watch=events.append)
    zk.create(p, b"1")
    assert wait_for(lambda: len(events) == 1)
    assert events[0].type == EventType.CREATED
    zk.get(p, watch=events.append)
    zk.set(p, b"2")
    zk.set(p, b"3")  # one-shot: no second event
    assert wait_for(lambda: len(events) == 2)
    assert events[1].type == EventType.CHANGED
    zk.get_children(base, watch=events.append)
    zk.create(base + "/w2")
    assert wait_for(lambda: len(events) == 3)
    assert events[2].type == EventType.CHILD and events[2].path == base
    zk.get(p, watch=events.append)
    zk.delete(p)
    assert wait_for(lambda: len(events) == 4)
    assert events[3].type == EventType.DELETED
    time.sleep(0.3)
    assert len(events) == 4


def test_data_and_children_watch_recipes(zk, base):
    seen, kids = [], []
    zk.create(base + "/d", b"a")
    DataWatch(zk, base + "/d", lambda data, stat: seen.append(data))
    ChildrenWatch(zk, base, lambda c: kids.append(sorted(c)))
    zk.set(base + "/d", b"b")
    zk.create(base + "/e")
    assert wait_for(lambda: seen[-1:] == [b"b"])
    assert wait_for(lambda: kids and kids[-1] == ["d", "e"])


def test_recipes_rewatch_after_losing_their_server(cluster, base):
    # kazoo re-registers through its recipes after a reconnect (it sends no setWatches).
    zk = client(cluster)
    seen = []
    DataWatch(zk, base, lambda data, stat: seen.append(data))
    connected = zk._connection._socket.getpeername()[1] - cluster.base
    others = [i for i in range(1, cluster.n + 1) if i != connected]
    writer = client(cluster, only=others)
    cluster.kill(connected)
    try:
        assert wait_for(lambda: zk.connected and zk._connection._socket is not None and
                        zk._connection._socket.getpeername()[1] - cluster.base != connected, 30)
        writer.set(base, b"changed")
        assert wait_for(lambda: seen and seen[-1] == b"changed", 15)
    finally:
        cluster.start(connected)
        cluster.wait_ready()
        writer.stop()
        writer.close()
        zk.stop()
        zk.close()


def attach_when_caught_up(port, session, passwd, last_zxid):
    """Re-attach a session at `port`, retrying while that server trails `last_zxid` (it closes the
    connection then, as ZooKeeper does; on a multi-leader cluster replicas trail each other briefly)."""
    for _ in range(50):
        try:
            return RawZK(port, session=session, passwd=passwd, last_zxid=last_zxid)
        except ConnectionError:
            time.sleep(0.1)
    raise AssertionError("the server at port %d never caught up with zxid %#x" % (port, last_zxid))


def test_set_watches_on_another_server_with_the_same_session(cluster, zk, base):
    # The Java client's way: re-attach the session elsewhere and send setWatches (xid -8) with
    # the last zxid seen; a change made meanwhile fires at once, others stay registered.
    zk.create(base + "/a", b"")
    zk.create(base + "/b", b"")
    first = RawZK(cluster.client_port(1))
    assert first.call(4, jstr(base + "/a") + b"\1")[0] == 0
    session, passwd, seen = first.session, first.passwd, first.zxid
    first.close()
    zk.set(base + "/a", b"changed while away")
    # A server that has not applied `seen` yet refuses the session; clients move on and come
    # back, as this one does (a multi-leader cluster's replicas trail each other briefly).
    second = attach_when_caught_up(cluster.client_port(2), session, passwd, seen)
    try:
        assert second.session == session, "the session re-attached"
        # The change went through another server: sync before asking this one about it.
        assert second.call(9, jstr(base))[0] == 0
        body = struct.pack("!q", seen) + struct.pack("!i", 2) + jstr(base + "/a") + jstr(base + "/b")
        body += struct.pack("!i", 1) + jstr(base + "/new") + struct.pack("!i", 1) + jstr(base)
        assert second.call(101, body, xid=-8)[0] == 0
        assert (3, base + "/a") in second.events, "the missed change fired before the reply"
        zk.set(base + "/b", b"x")
        zk.create(base + "/new")
        got = second.wait_events(4)
        assert (3, base + "/b") in got and (1, base + "/new") in got and (4, base) in got
    finally:
        second.close()
    bad = attach_when_caught_up(cluster.client_port(3), session, b"\1" * 16, seen)
    assert bad.session == 0 and bad.timeout == 0, "a wrong password is an invalid session"
    bad.close()


def test_pipelined_writes_get_growing_zxids(cluster, zk, base):
    # A session's writes sent without waiting may be ordered together (one batch, one proposal):
    # each still gets its own zxid, growing in the session's order, which is the zxid in its
    # node's stat; and every server takes the session back with the last of them once it has
    # applied it (a server behind a client's last zxid must refuse it).
    raw = RawZK(cluster.client_port(1))
    n = 64
    try:
        for i in range(n):
            body = jstr(base + "/n%03d" % i) + jbuf(b"") + OPEN_ACL + struct.pack("!i", 0)
            raw.send_frame(struct.pack("!ii", i + 1, 1) + body)
        zxids = []
        for i in range(n):
            rxid, zxid, err = struct.unpack_from("!iqi", raw.recv_frame(), 0)
            assert (rxid, err) == (i + 1, 0)
            zxids.append(zxid)
        assert zxids == sorted(zxids) and len(set(zxids)) == n, zxids
        zk.sync(base)
        assert [zk.exists(base + "/n%03d" % i).czxid for i in range(n)] == zxids
        session, passwd = raw.session, raw.passwd
    finally:
        raw.close()
    for i in range(1, cluster.n + 1):
        moved = []

        def attach():
            try:
                moved.append(RawZK(cluster.client_port(i), session=session, passwd=passwd, last_zxid=zxids[-1]))
                return True
            except (ConnectionError, OSError, struct.error):
                return False

        assert wait_for(attach), "server %d never took the session back" % i
        assert moved[0].session == session
        moved[0].close()


def test_persistent_and_recursive_watches(cluster, zk, base):
    raw = RawZK(cluster.client_port(1))
    try:
        # addWatch(base, PERSISTENT_RECURSIVE) and addWatch(base + "/p", PERSISTENT). The reply's
        # body is an ErrorResponse (4 zero bytes): the Java client reads it, and an empty body
        # made Curator's CuratorCache reconnect forever.
        assert raw.call(106, jstr(base) + struct.pack("!i", 1)) == (0, b"\0\0\0\0")
        zk.create(base + "/p", b"")
        assert raw.call(106, jstr(base + "/p") + struct.pack("!i", 0))[0] == 0
        zk.set(base + "/p", b"1")
        zk.set(base + "/p", b"2")
        zk.create(base + "/p/q", b"")
        got = raw.wait_events(5)
        assert (1, base + "/p") in got  # created (recursive)
        assert got.count((3, base + "/p")) == 2  # changed twice: persistent, one event each
        assert (4, base + "/p") in got  # children changed (persistent, not recursive)
        assert (1, base + "/p/q") in got
        # checkWatches / removeWatches
        assert raw.call(17, jstr(base + "/p") + struct.pack("!i", 3))[0] == 0
        assert raw.call(18, jstr(base + "/p") + struct.pack("!i", 3))[0] == 0
        assert raw.call(18, jstr(base + "/p") + struct.pack("!i", 3))[0] == NOWATCHER
    finally:
        raw.close()


def test_raw_requests_kazoo_lacks(cluster, zk, base):
    raw = RawZK(cluster.client_port(2))
    try:
        zk.create(base + "/a/b/c", b"", makepath=True)
        # kazoo wrote through another server: sync (op 9) before reading here.
        assert raw.call(9, jstr(base))[0] == 0
        # getAllChildrenNumber
        err, body = raw.call(104, jstr(base))
        assert err == 0 and struct.unpack("!i", body)[0] == 3
        # createContainer (op 19, create2 response) and getEphemerals
        err, body = raw.call(19, jstr(base + "/box") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 4))
        assert err == 0
        # The raw session wrote through another server: sync before reading it here.
        zk.sync(base)
        st = zk.exists(base + "/box")
        assert st.ephemeralOwner == 0, "containers show no owner"
        err, _ = raw.call(1, jstr(base + "/eph") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 1))
        assert err == 0
        err, body = raw.call(103, jstr(base))
        (n,) = struct.unpack_from("!i", body, 0)
        assert err == 0 and n == 1 and base + "/eph" in body.decode(errors="ignore")
        # createTTL (op 21)
        err, _ = raw.call(21, jstr(base + "/ttl") + jbuf(b"") + OPEN_ACL + struct.pack("!iq", 5, 500))
        assert err == 0
        # Invalid paths: the parent is looked up first (NONODE), then the full path is checked.
        err, _ = raw.call(1, jstr(base + "//bad") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 0))
        assert err == NONODE
        err, _ = raw.call(1, jstr(base + "/.") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 0))
        assert err == BADARGUMENTS
        err, _ = raw.call(1, jstr("bad") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 0))
        assert err == BADARGUMENTS
        # exists on a missing node
        assert raw.call(3, jstr(base + "/none") + b"\0")[0] == NONODE
    finally:
        raw.close()


def test_containers_and_ttl_nodes_are_reaped(cluster, zk, base):
    raw = RawZK(cluster.client_port(1))
    try:
        err, _ = raw.call(19, jstr(base + "/box") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 4))
        assert err == 0
        zk.create(base + "/box/item")
        zk.delete(base + "/box/item")
        err, _ = raw.call(21, jstr(base + "/ttl") + jbuf(b"") + OPEN_ACL + struct.pack("!iq", 5, 300))
        assert err == 0
    finally:
        raw.close()
    assert wait_for(lambda: zk.exists(base + "/box") is None, 30), "an emptied container goes"
    assert wait_for(lambda: zk.exists(base + "/ttl") is None, 30), "an expired TTL node goes"


# ---------------------------------------------------------------- recipes


def test_lock_and_semaphore(cluster, zk, base):
    order = []
    other = client(cluster)
    lock_a = Lock(zk, base + "/lock", "a")
    lock_b = Lock(other, base + "/lock", "b")
    with lock_a:
        t = threading.Thread(target=lambda: (lock_b.acquire(timeout=20), order.append("b"), lock_b.release()))
        t.start()
        time.sleep(0.3)
        order.append("a")
    t.join(20)
    assert order == ["a", "b"]
    sem = Semaphore(zk, base + "/sem", max_leases=2)
    sem2 = Semaphore(other, base + "/sem", max_leases=2)
    assert sem.acquire(timeout=10) and sem2.acquire(timeout=10)
    sem.release()
    sem2.release()
    other.stop()
    other.close()


def test_election_counter_queue_party_barrier(cluster, zk, base):
    won = []
    e = Election(zk, base + "/election", "me")
    t = threading.Thread(target=lambda: e.run(won.append, "leader"))
    t.start()
    assert wait_for(lambda: won == ["leader"])
    t.join(10)
    c = Counter(zk, base + "/counter")
    c += 5
    c -= 2
    assert c.value == 3
    q = Queue(zk, base + "/queue")
    q.put(b"one")
    q.put(b"two")
    assert q.get() == b"one" and q.get() == b"two"
    lq = LockingQueue(zk, base + "/lqueue")
    lq.put(b"job")
    assert lq.get(timeout=5) == b"job" and lq.consume()
    party = Party(zk, base + "/party", "p1")
    party.join()
    assert list(party) == ["p1"]
    party.leave()
    b = Barrier(zk, base + "/barrier")
    b.create()
    threading.Timer(0.3, b.remove).start()
    assert b.wait(timeout=10)
    db = DoubleBarrier(zk, base + "/db", 1)
    db.enter()
    db.leave()


def test_tree_cache(zk, base):
    zk.create(base + "/tc/a", b"1", makepath=True)
    cache = TreeCache(zk, base + "/tc")
    cache.start()
    try:
        assert wait_for(lambda: cache.get_data(base + "/tc/a") is not None)
        zk.set(base + "/tc/a", b"2")
        zk.create(base + "/tc/b", b"3")
        assert wait_for(lambda: cache.get_data(base + "/tc/a").data == b"2")
        assert wait_for(lambda: cache.get_data(base + "/tc/b") is not None)
    finally:
        cache.close()


# ---------------------------------------------------------------- admin and limits


def test_four_letter_words(cluster):
    port = cluster.client_port(1)
    assert four_letter(port, "ruok") == "imok"
    srvr = four_letter(port, "srvr")
    assert "Zxid:" in srvr and "Mode:" in srvr
    assert "zk_server_state" in four_letter(port, "mntr")
    assert four_letter(port, "isro") == "rw"
    assert "clientPort" in four_letter(port, "conf")


def test_oversized_request_closes_only_that_connection(cluster, zk, base):
    raw = RawZK(cluster.client_port(1))
    with pytest.raises(Exception):
        raw.send_frame(struct.pack("!ii", 1, 5) + jstr(base) + jbuf(b"x" * (2 << 20)) + struct.pack("!i", -1))
        raw.recv_frame()
    raw.close()
    zk.set(base, b"still fine")
    assert zk.get(base)[0] == b"still fine"


def test_garbage_frames_do_not_hurt_others(cluster, zk, base):
    import os
    import socket
    for size in (0, 3, 16, 100):
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", cluster.client_port(2)), timeout=2)
            try:
                s.sendall(struct.pack("!i", size) + os.urandom(size))
                s.settimeout(1)
                try:
                    s.recv(100)
                except OSError:
                    pass
            finally:
                s.close()
    zk.set(base, b"ok")
    assert zk.get(base)[0] == b"ok"


def test_fuzzed_requests_do_not_hurt_the_server_or_other_sessions(cluster, zk, base):
    """Mutated valid requests on live sessions: errors or closed connections only."""
    import random
    import socket
    rng = random.Random(20261122)
    valid = [
        (1, jstr(base + "/f") + jbuf(b"data") + OPEN_ACL + struct.pack("!i", 0)),
        (4, jstr(base) + b"\1"),
        (8, jstr(base) + b"\1"),
        (5, jstr(base) + jbuf(b"v") + struct.pack("!i", -1)),
        (14, struct.pack("!iBi", 1, 0, -1) + jstr(base + "/m") + jbuf(b"") + OPEN_ACL
         + struct.pack("!i", 0) + struct.pack("!iBi", -1, 1, -1)),
        (101, struct.pack("!q", 0) + struct.pack("!i", 1) + jstr(base) + struct.pack("!ii", 0, 0)),
        (106, jstr(base) + struct.pack("!i", 1)),
        (103, jstr("/")),
        (7, jstr(base + "/none") + OPEN_ACL + struct.pack("!i", -1)),
    ]
    raw = None
    for i in range(300):
        if raw is None:
            raw = RawZK(cluster.client_port(1 + i % cluster.n))
        op, body = rng.choice(valid)
        body = bytearray(body)
        kind = rng.randrange(4)
        if kind == 0 and body:
            for _ in range(rng.randrange(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        elif kind == 1:
            body = body[: rng.randrange(len(body) + 1)]
        elif kind == 2:
            body += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
        else:
            op = rng.choice([op, rng.randrange(-20, 130)])
        try:
            raw.s.settimeout(2)
            raw.call(op, bytes(body))
        except (OSError, ConnectionError, struct.error):
            raw.close()
            raw = None
    if raw is not None:
        raw.close()
    for i, p in cluster.procs.items():
        assert p.poll() is None, "server %d died" % i
    zk.set(base, b"unharmed")
    assert zk.get(base)[0] == b"unharmed"


def test_multi_read_and_who_am_i(cluster, zk, base):
    zk.create(base + "/r", b"data")
    raw = RawZK(cluster.client_port(3))
    try:
        # multiRead (22): getData(/r), getChildren(base), getData(missing) -> per-op results
        body = struct.pack("!iBi", 4, 0, -1) + jstr(base + "/r") + b"\0"
        body += struct.pack("!iBi", 8, 0, -1) + jstr(base) + b"\0"
        body += struct.pack("!iBi", 4, 0, -1) + jstr(base + "/missing") + b"\0"
        body += struct.pack("!iBi", -1, 1, -1)
        err, out = raw.call(22, body)
        assert err == 0
        ty, done, e = struct.unpack_from("!iBi", out, 0)
        assert (ty, done, e) == (4, 0, 0)
        (n,) = struct.unpack_from("!i", out, 9)
        assert out[13:13 + n] == b"data"
        off = 13 + n + 68
        ty, done, e = struct.unpack_from("!iBi", out, off)
        assert (ty, done, e) == (8, 0, 0)
        (count,) = struct.unpack_from("!i", out, off + 9)
        assert count == 1
        assert b"r" in out[off + 13:off + 20]
        assert struct.pack("!iBi", -1, 0, NONODE) in out
        # whoAmI (107): the connection's identities (ip for a plain client)
        err, out = raw.call(107)
        assert err == 0
        (count,) = struct.unpack_from("!i", out, 0)
        assert count >= 1 and b"ip" in out
    finally:
        raw.close()


def test_close_session_is_answered_and_top_level_check_is_refused(cluster, zk, base):
    raw = RawZK(cluster.client_port(1))
    err, _ = raw.call(1, jstr(base + "/mine") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 1))
    assert err == 0
    try:
        err, _ = raw.call(-11)
        assert err == 0
    except (ConnectionError, OSError):
        pass  # ZooKeeper may close before its reply reaches us
    raw.close()
    assert wait_for(lambda: zk.exists(base + "/mine") is None, 5)
    raw = RawZK(cluster.client_port(2))
    # check (13) is valid only inside multi: the connection closes (ZooKeeper may send
    # UNIMPLEMENTED first).
    try:
        err, _ = raw.call(13, jstr(base) + struct.pack("!i", -1))
        assert err == -6
    except (ConnectionError, OSError):
        pass
    with pytest.raises((ConnectionError, OSError)):
        raw.s.settimeout(2)
        raw.call(11)
    raw.close()
    # (ZooKeeper 3.8.0's ensemble then stops serving this server for good, ZOOKEEPER-2623;
    # later tests use the servers that serve: conftest.serving_servers.)


def test_multi_reports_container_creates_as_create2(cluster, zk, base):
    raw = RawZK(cluster.client_port(1))
    try:
        body = struct.pack("!iBi", 19, 0, -1) + jstr(base + "/c") + jbuf(b"") + OPEN_ACL + struct.pack("!i", 4)
        body += struct.pack("!iBi", -1, 1, -1)
        err, out = raw.call(14, body)
        assert err == 0
        ty, done, e = struct.unpack_from("!iBi", out, 0)
        assert (ty, done, e) == (15, 0, 0)
    finally:
        raw.close()

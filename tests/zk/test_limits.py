"""Limits against abusive clients on the client port. maxClientCnxns (`max_client_cnxns`) is
ZooKeeper's too and runs against both targets; the per-session watch limit and the read rate
are synod's own (ZooKeeper has neither), so those tests run against synod only."""

import struct
import time
import urllib.request

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import QuotaExceededError

from conftest import TARGET, RawZK, SingleServer, jbuf, jstr

synod_only = pytest.mark.skipif(TARGET == "zookeeper", reason="a synod limit: ZooKeeper has no such setting")

MAX_CNXNS = 5


@pytest.fixture(scope="module")
def server():
    s = SingleServer(
        10,
        synod_toml="[zookeeper]\nmax_client_cnxns = %d\nmax_watches_per_session = 3\n"
        "max_read_bytes_per_second = 100000\nmax_outstanding = 4\n"
        # A request of max_buffer must be readable within the session timeout at that rate.
        "max_buffer = 60000\n" % MAX_CNXNS,
        zk_cfg="maxClientCnxns=%d\n" % MAX_CNXNS,
    )
    try:
        yield s.start()
    finally:
        s.stop()


def metric(server, name):
    """A synod counter from the admin port's /metrics (0 if absent)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % (server.base + 2), timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def connect(server):
    try:
        return RawZK(server.port)
    except (ConnectionError, OSError, struct.error):
        return None


def test_connections_per_address(server):
    """ZooKeeper's maxClientCnxns: a connection past the limit from one address is closed as
    soon as it is accepted; once one closes, a new one is served again."""
    held = []
    try:
        deadline = time.time() + 10
        while len(held) < MAX_CNXNS and time.time() < deadline:
            c = connect(server)
            if c is not None:
                held.append(c)
        assert len(held) == MAX_CNXNS
        assert connect(server) is None
        held.pop().close()
        deadline = time.time() + 10
        again = None
        while again is None and time.time() < deadline:
            again = connect(server)
            if again is None:
                time.sleep(0.2)
        assert again is not None
        held.append(again)
        # synod names the limit and the address in its log, and counts it. (Debian's ZooKeeper
        # jar logs nothing here: no SLF4J binding on its class path.)
        if TARGET != "zookeeper":
            deadline = time.time() + 5
            while "max is %d" % MAX_CNXNS not in server.log() and time.time() < deadline:
                time.sleep(0.2)
            assert "too many connections from 127.0.0.1: max is %d (zookeeper.max_client_cnxns)" % MAX_CNXNS in server.log()
            assert metric(server, 'synod_zk_limited_total{limit="max_client_cnxns"}') >= 1
    finally:
        for c in held:
            c.close()


def test_conf_names_the_limit(server):
    """ZooKeeper's `conf` four-letter word shows maxClientCnxns."""
    from conftest import four_letter
    deadline = time.time() + 10
    out = ""
    # (The connections of the test before may still hold every slot for a moment.)
    while "maxClientCnxns" not in out and time.time() < deadline:
        out = four_letter(server.port, "conf")
        time.sleep(0.1)
    assert "maxClientCnxns=%d" % MAX_CNXNS in out


def wait_for_a_slot(server):
    """The connections of an earlier test may take a moment to be released."""
    deadline = time.time() + 10
    while time.time() < deadline:
        c = connect(server)
        if c is not None:
            return c
        time.sleep(0.2)
    raise AssertionError("no connection slot")


@synod_only
def test_watches_per_session(server):
    """A request that would take a session past max_watches_per_session fails with
    QUOTAEXCEEDED and registers nothing; the session and its connection go on."""
    wait_for_a_slot(server).close()
    kc = KazooClient(hosts=server.hosts(), timeout=10)
    kc.start(timeout=15)
    try:
        for i in range(3):
            kc.exists("/watched-%d" % i, watch=lambda e: None)
        before = metric(server, 'synod_zk_limited_total{limit="max_watches_per_session"}')
        with pytest.raises(QuotaExceededError):
            kc.exists("/watched-3", watch=lambda e: None)
        with pytest.raises(QuotaExceededError):
            kc.get_children("/", watch=lambda e: None)
        # Requests without a watch still work, and a fired watch frees its place.
        assert kc.exists("/watched-3") is None
        kc.create("/watched-0")
        deadline = time.time() + 5
        while time.time() < deadline:
            try:
                kc.exists("/watched-3", watch=lambda e: None)
                break
            except QuotaExceededError:
                time.sleep(0.1)
        else:
            raise AssertionError("the fired watch did not free its place")
        assert metric(server, 'synod_zk_limited_total{limit="max_watches_per_session"}') >= before + 2
        assert "max_watches_per_session" in server.log()
    finally:
        kc.stop()
        kc.close()


@synod_only
def test_read_rate_per_connection(server):
    """A connection sending faster than max_read_bytes_per_second is read more slowly, not
    closed: 400 kB at 100 kB/s (one second of burst) takes about 3 s, and all is answered."""
    raw = wait_for_a_slot(server)
    try:
        err, _ = raw.call(1, jstr("/rate") + jbuf(b"") + struct.pack("!i", 1) + struct.pack("!i", 31)
                          + jstr("world") + jstr("anyone") + struct.pack("!i", 0))
        assert err == 0
        before = metric(server, 'synod_zk_limited_total{limit="max_read_bytes_per_second"}')
        payload = b"x" * 50_000
        start = time.time()
        for _ in range(8):
            err, _ = raw.call(5, jstr("/rate") + jbuf(payload) + struct.pack("!i", -1))
            assert err == 0
        took = time.time() - start
        assert took >= 2.0, took
        assert metric(server, 'synod_zk_limited_total{limit="max_read_bytes_per_second"}') > before
        assert "max_read_bytes_per_second" in server.log()
    finally:
        raw.close()


@synod_only
def test_outstanding_requests_per_connection(server):
    """Pipelined writes past max_outstanding pause reading the connection (counted), and every
    request is still answered, in order."""
    raw = wait_for_a_slot(server)
    try:
        err, _ = raw.call(1, jstr("/pipelined") + jbuf(b"") + struct.pack("!i", 1) + struct.pack("!i", 31)
                          + jstr("world") + jstr("anyone") + struct.pack("!i", 0))
        assert err in (0, -110)
        before = metric(server, 'synod_zk_limited_total{limit="max_outstanding"}')
        n = 50
        frames = b""
        for i in range(n):
            body = struct.pack("!ii", 1000 + i, 5) + jstr("/pipelined") + jbuf(b"%d" % i) + struct.pack("!i", -1)
            frames += struct.pack("!i", len(body)) + body
        raw.s.sendall(frames)
        xids = []
        while len(xids) < n:
            frame = raw.recv_frame()
            xid, _, err = struct.unpack_from("!iqi", frame, 0)
            assert err == 0
            xids.append(xid)
        assert xids == list(range(1000, 1000 + n))
        assert metric(server, 'synod_zk_limited_total{limit="max_outstanding"}') > before
    finally:
        raw.close()

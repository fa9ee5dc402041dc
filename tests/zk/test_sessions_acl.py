"""Sessions that move between servers, and the super user, cross-checked against ZooKeeper."""

import os
import struct
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from conftest import OPEN_ACL, RawZK, jbuf, jstr

CREATE = 1
GET_DATA = 4


def create_body(path, data=b""):
    return jstr(path) + jbuf(data) + OPEN_ACL + struct.pack("!i", 0)


def test_old_connection_of_a_moved_session_is_closed_by_its_next_write(cluster):
    base = "/moved-%d" % os.getpid()
    first, second = cluster.serving_servers()[:2]
    old = RawZK(cluster.client_port(first))
    try:
        err, _ = old.call(CREATE, create_body(base))
        assert err == 0
        # The same session re-attaches at another server (as a client does when it moves); the old
        # connection at the first server is still open.
        deadline = time.time() + 20
        while True:
            try:
                new = RawZK(cluster.client_port(second), session=old.session, passwd=old.passwd,
                            last_zxid=old.zxid)
                if new.session == old.session:
                    break
                new.close()
            except (ConnectionError, OSError):
                pass
            assert time.time() < deadline, "server %d never took the session" % second
            time.sleep(0.2)
        try:
            err, _ = new.call(CREATE, create_body(base + "/from-new"))
            assert err == 0
            # A write through the old connection: the session has moved. ZooKeeper treats that
            # as a connection-level error (ZOOKEEPER-710): the connection closes, unanswered.
            with pytest.raises((ConnectionError, OSError)):
                old.call(CREATE, create_body(base + "/from-old"))
            err, _ = new.call(GET_DATA, jstr(base + "/from-old") + b"\0")
            assert err == -101  # the write did not happen
        finally:
            new.close()
    finally:
        old.close()


def test_super_user_bypasses_every_acl(cluster):
    path = "/super-%d" % os.getpid()
    alice = KazooClient(hosts=cluster.hosts(), timeout=10, auth_data=[("digest", "alice:secret")])
    alice.start(timeout=30)
    other = KazooClient(hosts=cluster.hosts(), timeout=10, auth_data=[("digest", "mallory:guess")])
    other.start(timeout=30)
    root = KazooClient(hosts=cluster.hosts(), timeout=10, auth_data=[("digest", "super:test")])
    root.start(timeout=30)
    try:
        alice.create(path, b"private", acl=[make_digest_acl("alice", "secret", all=True)])
        other.sync(path)
        with pytest.raises(NoAuthError):
            other.get(path)
        root.sync(path)
        assert root.get(path)[0] == b"private"
        root.set(path, b"by super")
        alice.sync(path)  # reads are local: see the other session's write
        assert alice.get(path)[0] == b"by super"
        root.delete(path)
        alice.sync(path)
        assert alice.exists(path) is None
    finally:
        for c in (alice, other, root):
            c.stop()
            c.close()

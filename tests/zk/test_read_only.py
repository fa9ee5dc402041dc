"""Read-only mode: a server cut off from its quorum serves clients that ask for read-only
sessions (readOnly in the ConnectRequest) with reads of its last state, answers their writes with
NOTREADONLY, says `ro` to `isro`, and lets them move back to read-write when the quorum returns.

ZooKeeper runs with -Dreadonlymode.enabled=true (conftest); synod's `read_only_mode` is on by
default. Under Mencius a replica never stops serving (every replica orders its own clients'
writes: docs/protocols/mencius-clients.md), so there is no read-only mode to test there.
"""

import os
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NotReadOnlyCallError
from kazoo.protocol.states import KeeperState

from conftest import PROTOCOL, TARGET, four_letter

pytestmark = pytest.mark.skipif(TARGET == "synod" and PROTOCOL == "mencius",
                                reason="Mencius replicas never stop serving")

KEEP = 1


def wait_for(pred, timeout=60.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


def _try_set(client, path, data):
    try:
        client.set(path, data)
        return True
    except Exception:
        return False


def cut_off(cluster):
    """Kill every server but KEEP; returns them, for heal()."""
    others = [i for i in range(1, cluster.n + 1) if i != KEEP]
    for i in others:
        cluster.kill(i)
    return others


def heal(cluster, others):
    for i in others:
        if i not in cluster.procs:
            cluster.start(i)
    cluster.wait_ready()


@pytest.mark.skipif(TARGET == "zookeeper",
                    reason="not cross-checked yet: against Debian's ZooKeeper 3.8.0 (readonlymode.enabled) "
                    "kazoo 2.11 never reaches CONNECTED_RO within 60 s; the cause is not found")
def test_session_moves_to_read_only_when_its_server_is_cut_off_and_back(cluster):
    path = "/ro-%d" % os.getpid()
    ro = KazooClient(hosts=cluster.hosts([KEEP]), timeout=10, read_only=True)
    ro.start(timeout=30)
    others = []
    try:
        assert ro.client_state == KeeperState.CONNECTED
        ro.ensure_path(path)
        ro.set(path, b"before")
        others = cut_off(cluster)
        # The server notices it is alone (a follower's timeout, a PFT backup's silent primary,
        # an idle PFT primary's unacknowledged proposal) and serves the session read-only.
        wait_for(lambda: ro.client_state == KeeperState.CONNECTED_RO
                 or not _try_set(ro, path, b"before"), what="read-only state")
        wait_for(lambda: ro.client_state == KeeperState.CONNECTED_RO, what="CONNECTED_RO")
        assert four_letter(cluster.client_port(KEEP), "isro").strip() == "ro"
        assert ro.get(path)[0] == b"before"
        assert path.lstrip("/") in ro.get_children("/")
        with pytest.raises(NotReadOnlyCallError):
            ro.set(path, b"during")
        with pytest.raises(NotReadOnlyCallError):
            ro.create(path + "/child")
        # A client that does not ask for read-only is not served.
        plain = KazooClient(hosts=cluster.hosts([KEEP]), timeout=5)
        with pytest.raises(Exception):
            plain.start(timeout=4)
        plain.stop()
        plain.close()
        # The quorum returns: the read-only connection ends, the client comes back read-write.
        heal(cluster, others)
        wait_for(lambda: ro.client_state == KeeperState.CONNECTED, what="client back to read-write")
        wait_for(lambda: _try_set(ro, path, b"after"), what="a write after the quorum returned")
        assert ro.get(path)[0] == b"after"
        assert four_letter(cluster.client_port(KEEP), "isro").strip() == "rw"
    finally:
        ro.stop()
        ro.close()
        heal(cluster, others)


@pytest.mark.skipif(TARGET == "zookeeper",
                    reason="ZooKeeper 3.8 creates a new session on a read-only server only with "
                    "localSessionsEnabled, which this ensemble does not set (its reply is a bare "
                    "NOTREADONLY header that kazoo cannot parse)")
def test_new_read_only_session_on_a_cut_off_server(cluster):
    others = cut_off(cluster)
    try:
        ro = KazooClient(hosts=cluster.hosts([KEEP]), timeout=10, read_only=True)
        ro.start(timeout=60)
        try:
            assert ro.client_state == KeeperState.CONNECTED_RO
            assert four_letter(cluster.client_port(KEEP), "isro").strip() == "ro"
            assert "zookeeper" in ro.get_children("/")
            with pytest.raises(NotReadOnlyCallError):
                ro.create("/ro-new-%d" % os.getpid())
        finally:
            ro.stop()
            ro.close()
    finally:
        heal(cluster, others)

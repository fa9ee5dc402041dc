"""A client of the old ZooKeeper keeps its session across the move: after `synod import` and
`synod restore`, a kazoo client whose server was killed reconnects to synod with the session id
and password ZooKeeper gave it, and its ephemeral node stays."""

import os
import time

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from conftest import BASE, ZK_JAR, Synod, ZooKeeper, synod


def test_a_zookeeper_session_reconnects_to_synod(workdir):
    if not os.path.exists(ZK_JAR):
        pytest.skip("Apache ZooKeeper is not installed (apt-get install zookeeper)")
    zk = ZooKeeper(workdir, BASE)
    states = []
    live = KazooClient(hosts=zk.hosts(), timeout=10.0)
    live.add_listener(states.append)
    live.start()
    live.create("/kept", b"mine", ephemeral=True)
    session = live.client_id[0]
    zk.kill()
    c = Synod(workdir, 3, "zab")
    try:
        out = os.path.join(workdir, "zk.synodbak")
        synod("import", "--zookeeper", zk.data, "--out", out)
        for i in range(1, c.n + 1):
            synod("restore", "--from", out, "--config", c.config(i))
        c.start()
        live.set_hosts(c.hosts())
        deadline = time.time() + 30
        while live.state != KazooState.CONNECTED and time.time() < deadline:
            time.sleep(0.2)
        assert live.state == KazooState.CONNECTED, states
        assert KazooState.LOST not in states, states
        assert live.client_id[0] == session
        # Longer than the session timeout: the session lives on, so does its ephemeral.
        time.sleep(12)
        data, stat = live.get("/kept")
        assert data == b"mine" and stat.ephemeralOwner == session
    finally:
        live.stop()
        live.close()
        c.stop()

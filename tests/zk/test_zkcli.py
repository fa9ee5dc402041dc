"""zkCli.sh from Debian's zookeeper package against the cluster."""

import os
import subprocess
import uuid

import pytest

ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"


def zkcli(cluster, *args):
    if not os.path.exists(ZKCLI):
        pytest.skip("zkCli.sh is not installed (apt-get install zookeeper)")
    out = subprocess.run(
        [ZKCLI, "-server", "127.0.0.1:%d" % cluster.client_port(1), *args],
        capture_output=True, text=True, timeout=60,
    )
    return out.stdout + out.stderr


def test_zkcli_create_list_get_set_delete(cluster):
    p = "/cli-" + uuid.uuid4().hex[:8]
    assert "Created " + p in zkcli(cluster, "create", p, "hello")
    assert p[1:] in zkcli(cluster, "ls", "/")
    assert "hello" in zkcli(cluster, "get", p)
    zkcli(cluster, "set", p, "world")
    out = zkcli(cluster, "get", "-s", p)
    assert "world" in out and "dataVersion = 1" in out
    assert "numChildren = 0" in zkcli(cluster, "stat", p)
    zkcli(cluster, "delete", p)
    assert "does not exist" in zkcli(cluster, "get", p)

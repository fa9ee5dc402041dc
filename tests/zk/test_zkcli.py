"""zkCli.sh from Debian's zookeeper package against the cluster."""

import uuid

from conftest import zkcli


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

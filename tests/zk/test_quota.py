"""Quotas (ZooKeeper 3.8): the limits and stats nodes under /zookeeper/quota, the usage the
server keeps in the stats node, and hard limits enforced with zookeeper.enforceQuota.

The shared `cluster` does not enforce quotas (ZooKeeper's default). The enforcement tests start
their own three-server cluster at ZK_BASE_PORT + 40, with -Dzookeeper.enforceQuota=true for
ZooKeeper (through JAVA_TOOL_OPTIONS) and `enforce_quota = true` in synod's [zookeeper] section.
"""

import os
import subprocess
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    QuotaExceededError,
    RolledBackError,
    RuntimeInconsistency,
)

import conftest
from conftest import TARGET, four_letter, zkcli

QUOTA = "/zookeeper/quota"


def client(cluster):
    zk = KazooClient(hosts=cluster.hosts(), timeout=10)
    zk.start(timeout=30)
    return zk


def fresh():
    return "/quota-" + uuid.uuid4().hex[:8]


def limits(p):
    return QUOTA + p + "/zookeeper_limits"


def stats(p):
    return QUOTA + p + "/zookeeper_stats"


def setquota(zk, p, limit):
    """What zkCli's setquota writes: the quota path, the limits, then count=0,bytes=0 stats."""
    zk.ensure_path(QUOTA + p)
    zk.create(limits(p), limit.encode())
    zk.create(stats(p), b"count=0,bytes=0")


def usage(zk, p):
    zk.sync(stats(p))
    return zk.get(stats(p))[0].decode()


def test_zkcli_setquota_listquota_delquota(cluster):
    zk = client(cluster)
    try:
        p = fresh()
        zk.create(p, b"abc")
        zk.create(p + "/a", b"12345")
        zk.create(p + "/a/b", b"")
        zkcli(cluster, "setquota", "-n", "5", p)
        assert zk.get(limits(p))[0] == b"count=5,bytes=-1=;byteHardLimit=-1;countHardLimit=-1"
        zkcli(cluster, "setquota", "-B", "100", p)
        data, st = zk.get(limits(p))
        assert data == b"count=5,bytes=-1=;byteHardLimit=100;countHardLimit=-1"
        assert st.version == 1
        # The server computed the usage of the existing subtree (zkCli wrote count=0,bytes=0):
        # the quota's own node counts, bytes are data lengths.
        assert usage(zk, p) == "count=3,bytes=8"
        out = zkcli(cluster, "listquota", p)
        assert "Output quota for %s count=5,bytes=-1=;byteHardLimit=100;countHardLimit=-1" % p in out
        assert "Output stat for %s count=3,bytes=8" % p in out
        assert "has a parent" in zkcli(cluster, "setquota", "-n", "2", p + "/a")
        zkcli(cluster, "delquota", "-n", p)
        assert zk.get(limits(p))[0] == b"count=-1,bytes=-1=;byteHardLimit=100;countHardLimit=-1"
        zkcli(cluster, "delquota", p)
        assert not zk.exists(QUOTA + p)
        zk.create(p + "/c", b"x")
        assert "quota for %s does not exist" % p in zkcli(cluster, "listquota", p)
    finally:
        zk.stop()


def test_writes_update_the_stats_node_in_place(cluster):
    zk = client(cluster)
    try:
        p = fresh()
        zk.create(p, b"abc")
        zk.create(p + "/a", b"12345")
        zk.create(p + "/a/b", b"")
        setquota(zk, p, "count=5,bytes=-1")
        assert usage(zk, p) == "count=3,bytes=8"
        _, st0 = zk.get(stats(p))
        events = []
        zk.get(stats(p), watch=events.append)
        zk.create(p + "/c", b"xy")
        assert usage(zk, p) == "count=4,bytes=10"
        zk.set(p + "/a", b"1")
        assert usage(zk, p) == "count=4,bytes=6"
        zk.delete(p + "/a/b")
        assert usage(zk, p) == "count=3,bytes=6"
        t = zk.transaction()
        t.create(p + "/m1", b"1234")
        t.create(p + "/m2")
        t.set_data(p + "/c", b"")
        t.delete(p + "/m2")
        assert not [r for r in t.commit() if isinstance(r, Exception)]
        assert usage(zk, p) == "count=4,bytes=8"
        # Past the soft count limit: nothing refused, only counted.
        for i in range(3):
            zk.create("%s/s%d" % (p, i))
        assert usage(zk, p) == "count=7,bytes=8"
        # Ephemerals count while they live.
        other = client(cluster)
        other.create(p + "/e", b"eph", ephemeral=True)
        assert usage(zk, p) == "count=8,bytes=11"
        other.stop()
        other.close()
        deadline = time.time() + 10
        while usage(zk, p) != "count=7,bytes=8" and time.time() < deadline:
            time.sleep(0.1)
        assert usage(zk, p) == "count=7,bytes=8"
        # The stats node's Stat stays as created; only its dataLength follows the data.
        data, st = zk.get(stats(p))
        assert (st.version, st.mzxid, st.mtime, st.czxid) == (st0.version, st0.mzxid, st0.mtime, st0.czxid)
        assert st.dataLength == len(data) == 15
        time.sleep(0.3)
        assert events == [], "updating the usage fires no watch"
        # Outside the quota: nothing.
        zk.create(p + "x", b"zzz")
        assert usage(zk, p) == "count=7,bytes=8"
    finally:
        zk.stop()


def test_stats_before_limits_overwritten_stats_and_nested_quotas(cluster):
    zk = client(cluster)
    try:
        p = fresh()
        zk.create(p, b"")
        zk.ensure_path(QUOTA + p)
        # The stats node is filled in when it is created; the create's reply shows what the
        # client sent.
        st = zk.create(stats(p), b"", include_data=True)[1]
        assert st.dataLength == 0
        assert usage(zk, p) == "count=1,bytes=0"
        zk.create(p + "/early", b"no")
        assert usage(zk, p) == "count=1,bytes=0", "no limits node, no quota"
        zk.create(limits(p), b"count=1,bytes=-1")
        zk.create(p + "/x", b"hello")
        assert usage(zk, p) == "count=2,bytes=5"
        # A client may overwrite the stats; the server adds to them and re-encodes.
        zk.set(stats(p), b"count=7,bytes=1,zz=3")
        zk.set(p + "/x", b"hello")
        assert usage(zk, p) == "count=7,bytes=1=;zz=3"
        zk.set(stats(p), b"count=2,bytes=7")
        # Only the deepest quota is charged (zkCli refuses nested quotas; the server has them).
        zk.create(p + "/x/n", b"1")
        setquota(zk, p + "/x", "count=10,bytes=-1")
        assert usage(zk, p + "/x") == "count=2,bytes=6"
        assert usage(zk, p) == "count=3,bytes=8"
        zk.create(p + "/x/m", b"abc")
        zk.create(p + "/y", b"abcd")
        assert usage(zk, p + "/x") == "count=3,bytes=9"
        assert usage(zk, p) == "count=4,bytes=12"
        # Deleting the inner limits ends that quota: its subtree is charged to the outer one.
        zk.delete(limits(p + "/x"))
        zk.delete(p + "/x/m")
        assert usage(zk, p + "/x") == "count=3,bytes=9"
        assert usage(zk, p) == "count=3,bytes=9"
    finally:
        zk.stop()


def test_hard_limits_are_not_enforced_by_default(cluster):
    zk = client(cluster)
    try:
        p = fresh()
        zk.create(p, b"")
        setquota(zk, p, "count=-1,bytes=-1=;byteHardLimit=2;countHardLimit=2")
        zk.create(p + "/a", b"12")
        zk.create(p + "/b", b"345")
        zk.set(p + "/a", b"123456")
        assert usage(zk, p) == "count=3,bytes=9"
    finally:
        zk.stop()


def test_mntr_shows_quota_gauges_per_namespace(cluster):
    zk = client(cluster)
    try:
        ns = "quotans" + uuid.uuid4().hex[:6]
        zk.create("/%s/a" % ns, b"12", makepath=True)
        zk.create("/%s/b" % ns, b"", makepath=True)
        setquota(zk, "/%s/a" % ns, "count=5,bytes=-1=;byteHardLimit=100;countHardLimit=-1")
        setquota(zk, "/%s/b" % ns, "count=-1,bytes=7=;countHardLimit=3")
        zk.sync("/")
        want = {
            "zk_%s_quota_count_limit_per_namespace" % ns: "8",
            "zk_%s_quota_bytes_limit_per_namespace" % ns: "107",
            "zk_%s_quota_count_usage_per_namespace" % ns: "2",
            "zk_%s_quota_bytes_usage_per_namespace" % ns: "2",
        }
        for i in cluster.serving_servers():
            deadline = time.time() + 10
            while True:
                got = dict(
                    line.split("\t", 1)
                    for line in four_letter(cluster.client_port(i), "mntr").splitlines()
                    if ns + "_quota_" in line
                )
                if got == want or time.time() > deadline:
                    break
                time.sleep(0.2)
            assert got == want, i
    finally:
        zk.stop()


class EnforcingSynod(conftest.SynodCluster):
    def config(self, i):
        path = super().config(i)
        with open(path) as f:
            text = f.read()
        if "\n[zookeeper]\n" in text:
            text = text.replace("\n[zookeeper]\n", "\n[zookeeper]\nenforce_quota = true\n", 1)
        else:
            text += "[zookeeper]\nenforce_quota = true\n"
        with open(path, "w") as f:
            f.write(text)
        return path

    def log_text(self):
        out = ""
        for i in range(1, self.n + 1):
            try:
                with open(os.path.join(self.dir, "node%d.log" % i), errors="replace") as f:
                    out += f.read()
            except OSError:
                pass
        return out


class EnforcingZooKeeper(conftest.ZooKeeperCluster):
    def start(self, i):
        # The shared ZooKeeperCluster's command line, with the property from the environment.
        old = os.environ.get("JAVA_TOOL_OPTIONS")
        os.environ["JAVA_TOOL_OPTIONS"] = "-Dzookeeper.enforceQuota=true"
        try:
            super().start(i)
        finally:
            if old is None:
                del os.environ["JAVA_TOOL_OPTIONS"]
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = old




@pytest.fixture(scope="module")
def enforcing():
    base = int(os.environ.get("ZK_BASE_PORT", "16180" if TARGET == "zookeeper" else "15180")) + 40
    if TARGET == "zookeeper":
        if not os.path.exists(conftest.ZK_JAR):
            pytest.skip("Apache ZooKeeper is not installed (apt-get install zookeeper)")
        c = EnforcingZooKeeper(3, base)
    else:
        c = EnforcingSynod(3, base)
    for i in range(1, c.n + 1):
        c.start(i)
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


def test_enforced_hard_limits(enforcing):
    zk = client(enforcing)
    try:
        p = fresh()
        zk.create(p, b"ab")
        setquota(zk, p, "count=-1,bytes=-1=;byteHardLimit=10;countHardLimit=3")
        assert usage(zk, p) == "count=1,bytes=2"
        zk.create(p + "/a", b"1234")
        zk.create(p + "/b")
        with pytest.raises(QuotaExceededError):
            zk.create(p + "/c")
        with pytest.raises(QuotaExceededError):
            zk.create(p + "/c-", sequence=True, ephemeral=True)
        # Earlier checks come first for create; for setData the quota comes before the version.
        with pytest.raises(NodeExistsError):
            zk.create(p + "/a")
        zk.set(p + "/b", b"1234")
        with pytest.raises(QuotaExceededError):
            zk.set(p + "/b", b"12345")
        with pytest.raises(QuotaExceededError):
            zk.set(p + "/b", b"12345", version=42)
        with pytest.raises(BadVersionError):
            zk.set(p + "/b", b"4321", version=42)
        assert usage(zk, p) == "count=3,bytes=10"
        # Inside a multi: the failing op reports QUOTAEXCEEDED and nothing is applied.
        zk.delete(p + "/b")
        t = zk.transaction()
        t.create(p + "/m1", b"")
        t.set_data(p + "/a", b"123456789")
        t.create(p + "/m2", b"")
        res = t.commit()
        assert [type(r) for r in res] == [RolledBackError, QuotaExceededError, RuntimeInconsistency]
        assert zk.exists(p + "/m1") is None and zk.get(p + "/a")[0] == b"1234"
        assert usage(zk, p) == "count=2,bytes=6"
        # Deletes are never refused; then there is room again.
        zk.delete(p + "/a")
        zk.create(p + "/c", b"12345678")
        assert usage(zk, p) == "count=2,bytes=10"
    finally:
        zk.stop()


def test_enforced_soft_limits_only_log(enforcing):
    zk = client(enforcing)
    try:
        p = fresh()
        zk.create(p, b"")
        setquota(zk, p, "count=1,bytes=0")
        zk.create(p + "/a", b"xyz")
        assert usage(zk, p) == "count=2,bytes=3"
        if TARGET == "zookeeper":
            # Debian's zookeeper.jar has no SLF4J binding on this class path: ZooKeeper logs
            # nothing here, so only synod's warnings can be checked.
            return
        deadline = time.time() + 10
        want = "Quota exceeded: %s [current count=2, softCountLimit=1]" % p
        while want not in enforcing.log_text() and time.time() < deadline:
            time.sleep(0.2)
        assert want in enforcing.log_text()
        assert "Quota exceeded: %s [current bytes=3, softByteLimit=0]" % p in enforcing.log_text()
    finally:
        zk.stop()

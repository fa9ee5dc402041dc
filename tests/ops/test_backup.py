"""`synod backup` from a running cluster under writes, then `synod restore` into new clusters
of every protocol family: every write acknowledged before the backup began is there, and the
restored tree is the backup's."""

import os
import threading
import time

import pytest
from kazoo.client import KazooClient

from conftest import SUPER_AUTH, Synod, synod, walk


@pytest.fixture(scope="module")
def taken(workdir):
    src = Synod(workdir, 0, "zab")
    src.start()
    try:
        zk = KazooClient(hosts=src.hosts(), auth_data=SUPER_AUTH)
        zk.start()
        zk.create("/w", b"")
        acked = []
        stop = threading.Event()

        def writer(offset):
            c = KazooClient(hosts=src.hosts())
            c.start()
            i = 0
            while not stop.is_set():
                p = "/w/n-%d-%06d" % (offset, i)
                c.create(p, b"%d" % i)
                acked.append(p)  # acknowledged
                i += 1
            c.stop()
            c.close()

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        time.sleep(2)
        before = list(acked)  # every write acknowledged before the backup began
        out = os.path.join(workdir, "synod.synodbak")
        _, text = synod("backup", "--admin", ",".join(src.admin(i) for i in (2, 3, 1)), "--out", out)
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join()
        assert "written to" in text, text
        zk.stop()
        zk.close()
        return {"file": out, "before": before, "after": list(acked), "text": text}
    finally:
        src.stop()


@pytest.mark.parametrize("k,protocol", [(1, "zab"), (2, "paxos"), (3, "mencius")])
def test_a_backup_under_writes_restores_into_every_family(workdir, taken, k, protocol):
    assert len(taken["before"]) > 50, "writes were going on"
    c = Synod(workdir, k, protocol)
    for i in range(1, c.n + 1):
        synod("restore", "--from", taken["file"], "--config", c.config(i))
    c.start()
    try:
        zk = KazooClient(hosts=c.hosts(), auth_data=SUPER_AUTH)
        zk.start()
        try:
            have = set("/w/" + n for n in zk.get_children("/w"))
            missing = [p for p in taken["before"] if p not in have]
            assert not missing, "acknowledged before the backup, missing after restore: %s" % missing[:5]
            assert have <= set(taken["after"]), "nothing that was never written"
            # Every replica serves the same tree, and the cluster takes writes.
            trees = []
            for i in range(1, c.n + 1):
                r = KazooClient(hosts="127.0.0.1:%d" % c.client_port(i), auth_data=SUPER_AUTH)
                r.start()
                r.create("/w/via-%d" % i, b"")  # every replica takes writes (Mencius: its own instances)
                r.sync("/")
                r.stop()
                r.close()
            for i in range(1, c.n + 1):
                r = KazooClient(hosts="127.0.0.1:%d" % c.client_port(i), auth_data=SUPER_AUTH)
                r.start()
                r.sync("/")
                trees.append(walk(r, "/w"))
                r.stop()
                r.close()
            assert trees[0] == trees[1] == trees[2]
            assert all("/w/via-%d" % i in trees[0] for i in range(1, c.n + 1))
            zk.create("/w/after-restore", b"ok")
            assert zk.get("/w/after-restore")[0] == b"ok"
        finally:
            zk.stop()
            zk.close()
    finally:
        c.stop()


def test_a_corrupt_backup_is_refused(workdir, taken):
    data = bytearray(open(taken["file"], "rb").read())
    for at, expect in [(len(data) // 2, "checksum mismatch"), (0, "not a synod backup")]:
        bad = bytearray(data)
        bad[at] ^= 0x01
        path = os.path.join(workdir, "corrupt.synodbak")
        open(path, "wb").write(bytes(bad))
        code, out = synod("restore", "--from", path, "--check", check=False)
        assert code != 0 and expect in out, out
    path = os.path.join(workdir, "short.synodbak")
    open(path, "wb").write(bytes(data[: len(data) - 100]))
    code, out = synod("restore", "--from", path, "--check", check=False)
    assert code != 0 and "truncated" in out, out
    code, out = synod("restore", "--from", taken["file"], "--check")
    assert "source synod:zab" in out, out


def test_a_backup_over_https_needs_a_client_certificate_of_the_cluster(workdir, taken):
    certs = os.path.join(workdir, "certs")
    synod("certs", "dev", "--dir", certs, "--cluster-id", "ops-zab")
    c = Synod(workdir, 3, "zab", tls=certs)
    for i in range(1, c.n + 1):
        synod("restore", "--from", taken["file"], "--config", c.config(i))
    c.start()
    try:
        out = os.path.join(workdir, "tls.synodbak")
        # Plain HTTP to an HTTPS port, then HTTPS with a certificate of another CA: refused.
        code, text = synod("backup", "--admin", c.admin(1), "--out", out, check=False)
        assert code != 0 and not os.path.exists(out), text
        other = os.path.join(workdir, "other-certs")
        synod("certs", "dev", "--dir", other, "--cluster-id", "ops-zab")
        code, text = synod("backup", "--admin", c.admin(1), "--out", out, "--ca", os.path.join(certs, "ca.crt"),
                           "--cert", os.path.join(other, "client-root.crt"),
                           "--key", os.path.join(other, "client-root.key"), check=False)
        assert code != 0 and not os.path.exists(out), text
        _, text = synod("backup", "--admin", c.admin(2), "--out", out, "--ca", os.path.join(certs, "ca.crt"),
                        "--cert", os.path.join(certs, "client-root.crt"),
                        "--key", os.path.join(certs, "client-root.key"))
        assert "written to" in text, text
        _, text = synod("restore", "--from", out, "--check")
        assert "source synod:zab (cluster 'ops-zab', node 2)" in text, text
    finally:
        c.stop()

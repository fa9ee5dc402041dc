"""etcd compatibility: the same client runs against synod (`synod dev --kv`, three nodes, TLS,
etcd's API on every node) and against a real etcd 3.4 (Debian's etcd-server, one member, plain
text), so a test checks etcd's behaviour, not ours.

Ports: synod's dev cluster from 25000 (ZooKeeper 25001-25003, TLS 25101-25103, peers
25701-25703, admin 32001-32003, KV 24480-24482, etcd 24379-24381); etcd on 24390 (client) and
24391 (peer). All below Linux's ephemeral range (32768-60999), and apart from tests/ops's
(30400-31599): a replica left running would answer another suite's requests.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYNOD = os.environ.get("SYNOD_BIN", os.path.join(ROOT, "target", "release", "synod"))
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
SYNOD_ETCD_PORT = 24379
ETCD_PORT = 24390


class Target:
    """One server under test: its name, endpoints and the etcdctl flags that reach it."""

    def __init__(self, name, endpoints, cacert=None):
        self.name = name
        self.endpoints = endpoints
        self.cacert = cacert

    def flags(self, endpoints=None):
        f = ["--endpoints", ",".join(endpoints or self.endpoints[:1])]
        if self.cacert:
            f += ["--cacert", self.cacert]
        return f

    def etcdctl(self, *args, stdin=None, timeout=20, endpoints=None, env=None):
        """Run etcdctl; (exit code, stdout, stderr)."""
        e = dict(os.environ, ETCDCTL_API="3")
        e.update(env or {})
        r = subprocess.run(
            [ETCDCTL] + self.flags(endpoints) + [str(a) for a in args],
            input=stdin, capture_output=True, text=True, timeout=timeout, env=e,
        )
        return r.returncode, r.stdout, r.stderr

    def healthy(self):
        try:
            code, out, err = self.etcdctl("endpoint", "health", endpoints=self.endpoints, timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return code == 0


def wait_healthy(t, proc, log, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited:\n%s" % (t.name, open(log).read()[-3000:]))
        if t.healthy():
            return
        time.sleep(0.3)
    raise RuntimeError("%s not healthy in %ds:\n%s" % (t.name, timeout, open(log).read()[-3000:]))


def stop(proc):
    """Stop a server started in a session of its own, and everything in its process group
    (`synod dev`'s replicas too, if it could not stop them)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture(scope="module")
def synod_etcd():
    work = tempfile.mkdtemp(prefix="synod-etcd-")
    log = os.path.join(work, "dev.log")
    proc = subprocess.Popen(
        [SYNOD, "dev", "--kv", "--data", os.path.join(work, "data"), "--base-port", "25000",
         "--kv-port", "24480", "--etcd-port", str(SYNOD_ETCD_PORT)],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    t = Target(
        "synod",
        ["https://127.0.0.1:%d" % (SYNOD_ETCD_PORT + i) for i in range(3)],
        cacert=os.path.join(work, "data", "certs", "ca.crt"),
    )
    try:
        wait_healthy(t, proc, log)
        yield t
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def real_etcd():
    if not os.path.exists(ETCD):
        pytest.fail("etcd 3.4 is needed for the reference run: sudo apt-get install etcd-server etcd-client")
    work = tempfile.mkdtemp(prefix="etcd-ref-")
    log = os.path.join(work, "etcd.log")
    client = "http://127.0.0.1:%d" % ETCD_PORT
    peer = "http://127.0.0.1:%d" % (ETCD_PORT + 1)
    proc = subprocess.Popen(
        [ETCD, "--name", "ref", "--data-dir", os.path.join(work, "data"),
         "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", "ref=" + peer, "--initial-cluster-state", "new"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    t = Target("etcd", [client])
    try:
        wait_healthy(t, proc, log)
        yield t
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module", params=["etcd", "synod"])
def target(request):
    """Each test runs against the real etcd first, then synod."""
    return request.getfixturevalue("real_etcd" if request.param == "etcd" else "synod_etcd")

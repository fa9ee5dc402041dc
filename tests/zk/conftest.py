"""A three-server cluster for the ZooKeeper compatibility suite.

ZK_TARGET=synod (default) starts `synod server` processes; ZK_TARGET=zookeeper starts an Apache
ZooKeeper 3.8 ensemble from Debian's zookeeper package. The same tests run against both, which
shows that they test ZooKeeper's behaviour and not synod's. ZK_PROTOCOL names synod's replication
protocol (default zab; scripts/test.sh also runs the suite with paxos and mencius).
"""

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

import pytest

TARGET = os.environ.get("ZK_TARGET", "synod")
PROTOCOL = os.environ.get("ZK_PROTOCOL", "zab")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYNOD = os.environ.get("SYNOD_BIN", os.path.join(ROOT, "target", "release", "synod"))
ZK_JAR = "/usr/share/java/zookeeper.jar"
# The super user of both targets: digest of "super:test" (ZooKeeper's superDigest).
SUPER_DIGEST = "super:D/InIHSb7yEEbrWz8b9l71RjZJU="


def four_letter(port, word, timeout=2.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            s.settimeout(timeout)
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class Cluster:
    def __init__(self, n, base):
        self.n = n
        self.base = base
        self.dir = tempfile.mkdtemp(prefix="zk-%s-" % TARGET)
        self.procs = {}

    def client_port(self, i):
        return self.base + i

    def hosts(self, only=None):
        ids = only or range(1, self.n + 1)
        return ",".join("127.0.0.1:%d" % self.client_port(i) for i in ids)

    def mode(self, i):
        out = four_letter(self.client_port(i), "srvr")
        for line in out.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_ready(self, ids=None, timeout=60):
        ids = list(ids or range(1, self.n + 1))
        deadline = time.time() + timeout
        while time.time() < deadline:
            modes = [self.mode(i) for i in ids]
            if all(m in ("leader", "follower", "standalone") for m in modes):
                return
            time.sleep(0.2)
        raise RuntimeError("cluster not ready: %s" % [self.mode(i) for i in ids])

    def serving_servers(self):
        """The servers that serve now (a test that needs particular servers picks among them:
        ZooKeeper 3.8.0 leaves a server unable to serve after some hostile requests)."""
        return [i for i in range(1, self.n + 1) if self.mode(i) in ("leader", "follower", "standalone")]

    def leader(self):
        for i in self.procs:
            if self.mode(i) == "leader":
                return i
        return None

    def kill(self, i):
        p = self.procs.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop(self):
        for i in list(self.procs):
            self.kill(i)
        shutil.rmtree(self.dir, ignore_errors=True)


class SynodCluster(Cluster):
    def config(self, i):
        peers = "".join('%d = "127.0.0.1:%d"\n' % (j, self.base + 700 + j) for j in range(1, self.n + 1))
        path = os.path.join(self.dir, "node%d.toml" % i)
        with open(path, "w") as f:
            f.write(
                'cluster_id = "zk-compat"\nnode_id = %d\ninsecure = true\nprotocol = "%s"\nclient_addr = "127.0.0.1:%d"\n'
                'admin_addr = "127.0.0.1:%d"\ndata_dir = "%s"\nlog_level = "warn"\n'
                "[zab]\ntick_ms = 10\nheartbeat_ms = 50\nfollower_timeout_ms = 500\n"
                "leader_timeout_ms = 500\ndiscovery_timeout_ms = 1000\n"
                "[zookeeper]\nsuper_digest = \"%s\"\nmax_client_cnxns = 0\n"
                "[peers]\n%s"
                % (i, PROTOCOL, self.client_port(i), self.base + 7000 + i, os.path.join(self.dir, "data%d" % i),
                   SUPER_DIGEST, peers)
            )
        return path

    def start(self, i):
        log = open(os.path.join(self.dir, "node%d.log" % i), "ab")
        self.procs[i] = subprocess.Popen(
            [SYNOD, "server", "--config", self.config(i)], stdout=log, stderr=subprocess.STDOUT
        )


class ZooKeeperCluster(Cluster):
    def start(self, i):
        d = os.path.join(self.dir, "zk%d" % i)
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        with open(os.path.join(d, "data", "myid"), "w") as f:
            f.write("%d\n" % i)
        servers = "".join(
            "server.%d=127.0.0.1:%d:%d\n" % (j, self.base + 700 + j, self.base + 800 + j)
            for j in range(1, self.n + 1)
        )
        with open(os.path.join(d, "zoo.cfg"), "w") as f:
            f.write(
                "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\n"
                "clientPortAddress=127.0.0.1\nforceSync=yes\nmaxClientCnxns=0\n4lw.commands.whitelist=*\n"
                "admin.enableServer=false\nextendedTypesEnabled=true\n%s"
                % (os.path.join(d, "data"), self.client_port(i), servers)
            )
        with open(os.path.join(d, "log4j.properties"), "w") as f:
            f.write("log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                    "log4j.appender.F.File=%s/zk.log\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n" % d)
        log = open(os.path.join(d, "stdout.log"), "ab")
        self.procs[i] = subprocess.Popen(
            [
                "java", "-Xmx256m", "-Dzookeeper.extendedTypesEnabled=true",
                "-Dznode.container.checkIntervalMs=500", "-Dznode.container.maxPerMinute=100000",
                "-Dreadonlymode.enabled=true",
                "-Dzookeeper.DigestAuthenticationProvider.superDigest=" + SUPER_DIGEST,
                "-Dlog4j.configuration=file:%s/log4j.properties" % d,
                "-cp", "%s:%s" % (d, ZK_JAR),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain", os.path.join(d, "zoo.cfg"),
            ],
            stdout=log, stderr=subprocess.STDOUT,
        )


@pytest.fixture(scope="session")
def cluster():
    if TARGET == "zookeeper":
        if not os.path.exists(ZK_JAR):
            pytest.skip("Apache ZooKeeper is not installed (apt-get install zookeeper)")
        c = ZooKeeperCluster(3, int(os.environ.get("ZK_BASE_PORT", "16180")))
    else:
        if not os.path.exists(SYNOD):
            pytest.fail("%s not found: build it with cargo build --release" % SYNOD)
        c = SynodCluster(3, int(os.environ.get("ZK_BASE_PORT", "15180")))
    for i in range(1, c.n + 1):
        c.start(i)
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


class RawZK:
    """A minimal client on a raw socket: for requests kazoo lacks and for hostile input."""

    def __init__(self, port, timeout_ms=10000, session=0, passwd=b"\0" * 16, last_zxid=0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.xid = 0
        self.zxid = last_zxid
        self.events = []
        req = struct.pack("!iqiq", 0, last_zxid, timeout_ms, session) + struct.pack("!i", len(passwd)) + passwd + b"\0"
        self.send_frame(req)
        resp = self.recv_frame()
        _, self.timeout, self.session = struct.unpack_from("!iiq", resp, 0)
        (plen,) = struct.unpack_from("!i", resp, 16)
        self.passwd = resp[20:20 + plen]

    def send_frame(self, body):
        self.s.sendall(struct.pack("!i", len(body)) + body)

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def recv_frame(self):
        (n,) = struct.unpack("!i", self.recv_exact(4))
        return self.recv_exact(n)

    def call(self, op, body=b"", xid=None):
        """Send a request; return (err, body). Watch events that arrive meanwhile are kept."""
        if xid is None:
            self.xid += 1
            xid = self.xid
        self.send_frame(struct.pack("!ii", xid, op) + body)
        while True:
            frame = self.recv_frame()
            rxid, zxid, err = struct.unpack_from("!iqi", frame, 0)
            if rxid == -1:
                ty, state = struct.unpack_from("!ii", frame, 16)
                (plen,) = struct.unpack_from("!i", frame, 24)
                self.events.append((ty, frame[28:28 + plen].decode()))
                continue
            if zxid > 0:
                self.zxid = max(self.zxid, zxid)
            if rxid == xid:
                return err, frame[16:]

    def wait_events(self, count, timeout=5):
        self.s.settimeout(timeout)
        deadline = time.time() + timeout
        while len(self.events) < count and time.time() < deadline:
            frame = self.recv_frame()
            xid = struct.unpack_from("!i", frame, 0)[0]
            if xid == -1:
                ty, state = struct.unpack_from("!ii", frame, 16)
                (plen,) = struct.unpack_from("!i", frame, 24)
                self.events.append((ty, frame[28:28 + plen].decode()))
        return self.events

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def jstr(s):
    b = s.encode()
    return struct.pack("!i", len(b)) + b


def jbuf(b):
    return struct.pack("!i", len(b)) + b


OPEN_ACL = struct.pack("!i", 1) + struct.pack("!i", 31) + jstr("world") + jstr("anyone")


ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"


def zkcli(cluster, *args):
    """Run Debian's zkCli.sh against server 1 of the cluster; its output."""
    if not os.path.exists(ZKCLI):
        pytest.skip("zkCli.sh is not installed (apt-get install zookeeper)")
    out = subprocess.run(
        [ZKCLI, "-server", "127.0.0.1:%d" % cluster.client_port(1), *args],
        capture_output=True, text=True, timeout=60,
    )
    return out.stdout + out.stderr


class SingleServer:
    """One server of either target (a standalone ZooKeeper, or a one-node synod) with settings
    of its own: SASL users, client limits, TLS. For tests that need a server configured apart
    from the shared cluster. `port_offset` picks its ports: ZK_BASE_PORT + 50 + offset and the
    next few."""

    def __init__(self, port_offset, synod_toml="", zk_cfg="", zk_jvm=(), files=None, zk_classpath=()):
        self.base = int(os.environ.get("ZK_BASE_PORT", "15180")) + 50 + port_offset
        self.port = self.base
        self.dir = tempfile.mkdtemp(prefix="zk1-%s-" % TARGET)
        self.files = {}
        for name, text in (files or {}).items():
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write(text)
            self.files[name] = path
        self.synod_toml = synod_toml.format(**self.files)
        self.zk_cfg = zk_cfg.format(**self.files)
        self.zk_jvm = [a.format(**self.files) for a in zk_jvm]
        self.zk_classpath = list(zk_classpath)
        self.proc = None

    def hosts(self):
        return "127.0.0.1:%d" % self.port

    def start(self):
        log = open(os.path.join(self.dir, "server.log"), "ab")
        if TARGET == "zookeeper":
            if not os.path.exists(ZK_JAR):
                pytest.skip("Apache ZooKeeper is not installed (apt-get install zookeeper)")
            data = os.path.join(self.dir, "data")
            os.makedirs(data, exist_ok=True)
            cfg = os.path.join(self.dir, "zoo.cfg")
            with open(cfg, "w") as f:
                f.write("tickTime=2000\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
                        "4lw.commands.whitelist=*\nadmin.enableServer=false\n%s\n" % (data, self.port, self.zk_cfg))
            with open(os.path.join(self.dir, "log4j.properties"), "w") as f:
                f.write("log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                        "log4j.appender.F.File=%s/zk.log\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
                        % self.dir)
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-Dlog4j.configuration=file:%s/log4j.properties" % self.dir,
                 *self.zk_jvm, "-cp", ":".join([self.dir, ZK_JAR, *self.zk_classpath]),
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg],
                stdout=log, stderr=subprocess.STDOUT)
        else:
            if not os.path.exists(SYNOD):
                pytest.fail("%s not found: build it with cargo build --release" % SYNOD)
            path = os.path.join(self.dir, "node.toml")
            with open(path, "w") as f:
                f.write(
                    'cluster_id = "zk-single"\nnode_id = 1\nprotocol = "%s"\n%sclient_addr = "127.0.0.1:%d"\n'
                    'admin_addr = "127.0.0.1:%d"\ndata_dir = "%s"\nlog_level = "info"\n%s\n'
                    '[peers]\n1 = "127.0.0.1:%d"\n'
                    % (PROTOCOL, "" if "[tls]" in self.synod_toml else "insecure = true\n", self.port, self.base + 2,
                       os.path.join(self.dir, "data"), self.synod_toml, self.base + 1))
            self.proc = subprocess.Popen([SYNOD, "server", "--config", path], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: see %s" % os.path.join(self.dir, "server.log"))
            out = four_letter(self.port, "srvr")
            if any("Mode: %s" % m in out for m in ("standalone", "leader", "follower")):
                return self
            time.sleep(0.2)
        raise RuntimeError("server not ready: see %s" % self.dir)

    def log(self):
        out = []
        for name in ("server.log", "zk.log"):
            p = os.path.join(self.dir, name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out.append(f.read())
        return "".join(out)

    def stop(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

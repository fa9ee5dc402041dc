"""Operations tests: `synod import` of an Apache ZooKeeper data directory, and `synod backup` /
`synod restore` between synod clusters. Real processes: a standalone ZooKeeper 3.8 from Debian's
package, and three-node synod clusters seeded by `synod restore`.

Ports: 31400-31499 and 30400-30499 (ZooKeeper on 31400; synod cluster k on 31410 + 20k, its
peers on 30410 + 20k): below Linux's ephemeral range (32768-60999), where a client's outgoing
connection could hold a listener's port.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYNOD = os.environ.get("SYNOD_BIN", os.path.join(ROOT, "target", "release", "synod"))
ZK_JAR = "/usr/share/java/zookeeper.jar"
# The super user of both: digest of "super:test".
SUPER_DIGEST = "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
SUPER_AUTH = [("digest", "super:test")]
BASE = int(os.environ.get("OPS_BASE_PORT", "31400"))


def four_letter(port, word, timeout=2.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            s.settimeout(timeout)
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
            return out.decode(errors="replace")
    except OSError:
        return ""


def mode(port):
    for line in four_letter(port, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def wait_modes(ports, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(mode(p) in ("leader", "follower", "standalone") for p in ports):
            return
        time.sleep(0.2)
    raise RuntimeError("not serving: %s" % [mode(p) for p in ports])


def synod(*args, check=True):
    """Run a synod command; its output (stdout + stderr) and exit code."""
    r = subprocess.run([SYNOD] + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    if check and r.returncode != 0:
        raise AssertionError("synod %s failed (%d):\n%s" % (" ".join(map(str, args)), r.returncode, out))
    return r.returncode, out


class ZooKeeper:
    """A standalone Apache ZooKeeper with a small snapCount, so that its data directory holds
    several snapshots and logs, the snapshots fuzzy."""

    def __init__(self, workdir, port):
        self.dir = os.path.join(workdir, "zookeeper")
        self.data = os.path.join(self.dir, "data")
        self.port = port
        os.makedirs(self.data, exist_ok=True)
        with open(os.path.join(self.dir, "zoo.cfg"), "w") as f:
            f.write(
                "tickTime=1000\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
                "snapCount=10\nforceSync=yes\nmaxClientCnxns=0\n4lw.commands.whitelist=*\n"
                "admin.enableServer=false\nextendedTypesEnabled=true\n" % (self.data, port)
            )
        with open(os.path.join(self.dir, "log4j.properties"), "w") as f:
            f.write("log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                    "log4j.appender.F.File=%s/zk.log\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
                    % self.dir)
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.extendedTypesEnabled=true",
             "-Dzookeeper.DigestAuthenticationProvider.superDigest=" + SUPER_DIGEST,
             "-Dlog4j.configuration=file:%s/log4j.properties" % self.dir,
             "-cp", "%s:%s" % (self.dir, ZK_JAR),
             "org.apache.zookeeper.server.ZooKeeperServerMain", os.path.join(self.dir, "zoo.cfg")],
            stdout=open(os.path.join(self.dir, "stdout.log"), "ab"), stderr=subprocess.STDOUT)
        wait_modes([port])

    def hosts(self):
        return "127.0.0.1:%d" % self.port

    def kill(self):
        """SIGKILL: no clean shutdown, sessions stay in the log."""
        if self.proc:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None


class Synod:
    """Three synod servers (not started): cluster k of the test run."""

    def __init__(self, workdir, k, protocol, n=3, tls=None, extra=""):
        """`tls`: a directory made by `synod certs dev` (else the cluster runs insecure);
        `extra`: more top-level configuration keys (TOML lines)."""
        self.n = n
        self.extra = extra
        self.tls = tls
        self.protocol = protocol
        self.base = BASE + 10 + 20 * k
        self.peer_base = BASE - 1000 + 10 + 20 * k
        self.dir = os.path.join(workdir, "synod%d-%s" % (k, protocol))
        os.makedirs(self.dir, exist_ok=True)
        self.procs = {}

    def client_port(self, i):
        return self.base + i

    def admin(self, i):
        return "127.0.0.1:%d" % (self.base + 10 + i)

    def hosts(self):
        return ",".join("127.0.0.1:%d" % self.client_port(i) for i in range(1, self.n + 1))

    def data_dir(self, i):
        return os.path.join(self.dir, "data%d" % i)

    def config(self, i):
        peers = "".join('%d = "127.0.0.1:%d"\n' % (j, self.peer_base + j) for j in range(1, self.n + 1))
        path = os.path.join(self.dir, "node%d.toml" % i)
        with open(path, "w") as f:
            f.write(
                'cluster_id = "ops-%s"\nnode_id = %d\nprotocol = "%s"\n'
                'client_addr = "127.0.0.1:%d"\nadmin_addr = "%s"\ndata_dir = "%s"\nlog_level = "info"\n%s%s'
                "[zab]\ntick_ms = 10\nheartbeat_ms = 50\nfollower_timeout_ms = 500\n"
                "leader_timeout_ms = 500\ndiscovery_timeout_ms = 1000\n"
                '[zookeeper]\nsuper_digest = "%s"\n[peers]\n%s'
                % (self.protocol, i, self.protocol, self.client_port(i), self.admin(i), self.data_dir(i),
                   self.extra, self.security(i), SUPER_DIGEST, peers))
        return path

    def security(self, i):
        if not self.tls:
            return "insecure = true\n"
        return ('[tls]\nca_file = "%s/ca.crt"\ncert_file = "%s/node-%d.crt"\nkey_file = "%s/node-%d.key"\n'
                % (self.tls, self.tls, i, self.tls, i))

    def start(self):
        for i in range(1, self.n + 1):
            log = open(os.path.join(self.dir, "node%d.log" % i), "ab")
            self.procs[i] = subprocess.Popen([SYNOD, "server", "--config", self.config(i)],
                                             stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_modes([self.client_port(i) for i in range(1, self.n + 1)], timeout=120)
        except RuntimeError as e:
            tails = "".join("\n--- node %d:\n%s" % (i, self.log(i)[-3000:]) for i in range(1, self.n + 1))
            self.stop()
            raise RuntimeError("%s%s" % (e, tails))

    def stop(self):
        for p in self.procs.values():
            p.send_signal(signal.SIGKILL)
            p.wait()
        self.procs = {}

    def log(self, i):
        with open(os.path.join(self.dir, "node%d.log" % i), errors="replace") as f:
            return f.read()


@pytest.fixture(scope="module")
def workdir():
    if not os.path.exists(SYNOD):
        pytest.fail("%s not found: build it with cargo build --release" % SYNOD)
    d = tempfile.mkdtemp(prefix="synod-ops-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def walk(client, path="/", skip=("/zookeeper",)):
    """Every node under `path`: data, Stat and ACL, by path."""
    out = {}
    stack = [path]
    while stack:
        p = stack.pop()
        if p in skip:
            continue
        data, stat = client.get(p)
        acls, _ = client.get_acls(p)
        out[p] = {
            "data": data,
            "stat": tuple(stat),
            "acl": sorted((a.perms, a.id.scheme, a.id.id) for a in acls),
        }
        for c in client.get_children(p):
            stack.append(("/" if p == "/" else p + "/") + c)
    return out

"""The web console (docs/console.md) in a real headless browser: Debian's Chromium driven by
selenium through chromedriver, against a real three-node cluster of the release binary
(`SYNOD_BIN`, default target/release/synod), plain HTTP (insecure = true) so the browser needs
no client certificate; the console is then read-only.

Each replica is its own `synod server` process in a session of its own (not `synod dev`, which
stops every replica when one exits), so the test can kill the leader alone; every process group
is killed at the end.

Ports, all in 35181-35213 (CONSOLE_BASE_PORT = 35180), apart from the other suites' (tests/etcd
24379-32003, scripts/test.sh's KV run 27000-34003, tests/ops 30400-31599): replica i's ZooKeeper
client port 35180 + i, admin 35190 + i, peers 35200 + i, SconeKV 35210 + i.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYNOD = os.environ.get("SYNOD_BIN", os.path.join(ROOT, "target", "release", "synod"))
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver")
BASE = int(os.environ.get("CONSOLE_BASE_PORT", "35180"))
OUT = os.path.join(ROOT, "target", "console")


def http_json(port, path, timeout=2.0):
    """(status, JSON body) of GET http://127.0.0.1:port/path; (None, None) if nobody answers."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return None, None


class Cluster:
    """Three synod servers with SconeKV's store (three buckets), insecure."""

    def __init__(self, workdir, n=3):
        self.dir = workdir
        self.n = n
        self.procs = {}

    def client_port(self, i):
        return BASE + i

    def admin_port(self, i):
        return BASE + 10 + i

    def hosts(self):
        return ",".join("127.0.0.1:%d" % self.client_port(i) for i in self.alive())

    def alive(self):
        return [i for i, p in sorted(self.procs.items()) if p.poll() is None]

    def config(self, i):
        peers = "".join('%d = "127.0.0.1:%d"\n' % (j, BASE + 20 + j) for j in range(1, self.n + 1))
        kv = "".join('%d = "127.0.0.1:%d"\n' % (j, BASE + 30 + j) for j in range(1, self.n + 1))
        path = os.path.join(self.dir, "node%d.toml" % i)
        with open(path, "w") as f:
            f.write(
                'cluster_id = "console-test"\nnode_id = %d\nprotocol = "zab"\ninsecure = true\n'
                'client_addr = "127.0.0.1:%d"\nadmin_addr = "127.0.0.1:%d"\ndata_dir = "%s"\n'
                'log_level = "info"\n'
                "[zab]\ntick_ms = 10\nheartbeat_ms = 50\nfollower_timeout_ms = 500\n"
                "leader_timeout_ms = 500\ndiscovery_timeout_ms = 1000\n"
                '[kv]\nbuckets = 3\nlisten = "127.0.0.1:%d"\n[kv.addrs]\n%s[peers]\n%s'
                % (i, self.client_port(i), self.admin_port(i), os.path.join(self.dir, "data%d" % i),
                   BASE + 30 + i, kv, peers))
        return path

    def start(self):
        for i in range(1, self.n + 1):
            log = open(os.path.join(self.dir, "node%d.log" % i), "ab")
            self.procs[i] = subprocess.Popen([SYNOD, "server", "--config", self.config(i)],
                                             stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        self.wait_leader()

    def leader(self, i):
        """The leader of group 0 as replica i sees it, or None."""
        code, st = http_json(self.admin_port(i), "/v1/status")
        if code != 200:
            return None
        g = [g for g in st["groups"] if g["id"] == 0]
        return g[0]["leader"] if g else None

    def wait_leader(self, timeout=60, other_than=None):
        """The leader every live replica names and serves (/health 200), once they agree."""
        deadline = time.time() + timeout
        seen = None
        while time.time() < deadline:
            for i, p in self.procs.items():
                if p.poll() is not None and i != other_than:
                    raise RuntimeError("replica %d exited:\n%s" % (i, self.log(i)[-3000:]))
            live = self.alive()
            seen = {i: self.leader(i) for i in live}
            healthy = all(http_json(self.admin_port(i), "/health")[0] == 200 for i in live)
            leaders = set(seen.values())
            if healthy and len(leaders) == 1 and None not in leaders and other_than not in leaders:
                return leaders.pop()
            time.sleep(0.2)
        raise RuntimeError("no agreed leader in %ds: %s\n%s" % (
            timeout, seen, "".join("--- node %d:\n%s" % (i, self.log(i)[-2000:]) for i in self.procs)))

    def kill(self, i):
        p = self.procs[i]
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def stop(self):
        for i in list(self.procs):
            self.kill(i)

    def log(self, i):
        with open(os.path.join(self.dir, "node%d.log" % i), errors="replace") as f:
            return f.read()


@pytest.fixture(scope="module")
def cluster():
    if not os.path.exists(SYNOD):
        pytest.fail("%s not found: build it with cargo build --release -p synod" % SYNOD)
    work = tempfile.mkdtemp(prefix="synod-console-")
    c = Cluster(work)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.path.exists(path):
            pytest.fail("%s not found: sudo apt-get install chromium chromium-driver" % path)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is needed: target/pyenv/bin/pip install selenium")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1800", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(CHROMEDRIVER, log_output=os.path.join(tempfile.gettempdir(), "synod-chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=opts)
    try:
        yield driver
    finally:
        driver.quit()

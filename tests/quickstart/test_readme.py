"""README's quick start, line by line, as a newcomer runs it: the server block in one terminal,
the client blocks in another, on the default ports and with the secure defaults (TLS).

The blocks are the ```sh fences after `<!-- quickstart:server -->` and `<!-- quickstart:client
-->` in README.md, so the test follows the text a reader sees. Two substitutions only, both
saying what the line does in CI: `bash scripts/run.sh ARGS` becomes `$SYNOD_BIN dev --nodes 3
ARGS` (what run.sh execs after `cargo build --release`: CI builds its binary once, in another
profile), and `synod` resolves to $SYNOD_BIN (README puts target/release first on PATH; a
directory after it holds a `synod` that is $SYNOD_BIN). The client configuration goes to a
temporary file (SYNOD_CLIENT_CONFIG) instead of ~/.config.

Ports: the defaults (ZooKeeper 2181-2183, TLS 2281-2283, admin 9181-9183, KV 2479-2481, etcd
2379/22379/32379): the suites run one after another, and none other uses these.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYNOD = os.environ.get("SYNOD_BIN", os.path.join(ROOT, "target", "release", "synod"))
PYENV = os.path.join(ROOT, "target", "pyenv", "bin")


def blocks(kind):
    """The shell lines of README's quickstart blocks of this kind, in order."""
    text = open(os.path.join(ROOT, "README.md")).read()
    out = []
    for m in re.finditer(r"<!-- quickstart:(\w+) -->\s*```sh\n(.*?)```", text, re.S):
        if m.group(1) == kind:
            out.extend(l for l in m.group(2).splitlines() if l.strip() and not l.startswith("#"))
    return out


def test_readme_has_the_blocks():
    """A README edit that drops the markers must fail here, not silently test nothing."""
    assert len(blocks("server")) == 1, blocks("server")
    assert len(blocks("client")) >= 6, blocks("client")


def test_the_quick_start_works_as_written():
    (server,) = blocks("server")
    assert server.startswith("bash scripts/run.sh"), server
    work = tempfile.mkdtemp(prefix="synod-quickstart-")
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    os.symlink(SYNOD, os.path.join(bindir, "synod"))
    env = dict(os.environ)
    env["SYNOD_CLIENT_CONFIG"] = os.path.join(work, "client.toml")
    # python3 with kazoo (the suite's venv), then synod, then the system's tools.
    path = [p for p in (PYENV if os.path.isdir(PYENV) else None, bindir) if p]
    env["PATH"] = ":".join(path + [env.get("PATH", "/usr/bin:/bin")])
    args = server.split()[2:]
    log = open(os.path.join(work, "dev.out"), "w+")
    dev = subprocess.Popen(
        [SYNOD, "dev", "--nodes", "3"] + args,
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        first_screen = wait_for(log, "Ctrl-C stops the cluster.", dev, 90)
        check_first_screen(first_screen)
        wait_serving(env, 60)
        script = "set -euxo pipefail\ncd %s\n" % ROOT + "\n".join(blocks("client")) + "\n"
        r = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=180,
        )
        print(r.stdout)
        print(r.stderr)
        assert r.returncode == 0, "a quick-start line failed (the last + line above):\n" + r.stderr[-3000:]
        assert "hello" in r.stdout
    finally:
        try:
            os.killpg(dev.pid, signal.SIGINT)
            dev.wait(timeout=30)
        except Exception:
            os.killpg(dev.pid, signal.SIGKILL)
        log.seek(0)
        print(log.read()[-2000:])
    # synod dev removes the client configuration it wrote when it stops.
    assert not os.path.exists(env["SYNOD_CLIENT_CONFIG"])
    shutil.rmtree(work, ignore_errors=True)


def wait_for(log, marker, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        log.seek(0)
        text = log.read()
        if marker in text:
            return text.splitlines()
        assert proc.poll() is None, "synod dev exited:\n" + text
        time.sleep(0.2)
    raise AssertionError("synod dev did not print %r in %ds" % (marker, timeout))


def check_first_screen(lines):
    """What a newcomer needs is on the first screen (50 lines): each client's line, with
    certificate paths that exist."""
    screen = "\n".join(lines[:50])
    for what in ("synod cli", "zkCli.sh", "kazoo", "etcdctl", "synod kv", "curl --cacert"):
        assert what in screen, "%r is not on synod dev's first screen:\n%s" % (what, screen)
    paths = re.findall(r"(/\S+?\.(?:crt|key))", screen)
    assert paths, screen
    for p in paths:
        assert os.path.exists(p), p


def wait_serving(env, timeout):
    """Until a ZooKeeper request and a KV request succeed (the groups have leaders)."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        zk = subprocess.run([SYNOD, "cli", "stat", "/"], env=env, capture_output=True, text=True, timeout=30)
        kv = subprocess.run([SYNOD, "kv", "view"], env=env, capture_output=True, text=True, timeout=30)
        if zk.returncode == 0 and kv.returncode == 0:
            return
        last = zk.stderr + kv.stderr
        time.sleep(0.5)
    raise AssertionError("the cluster did not serve in %ds: %s" % (timeout, last))

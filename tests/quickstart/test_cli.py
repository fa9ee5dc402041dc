"""`synod cli` as an operator scripts it: TLS flags, credentials, exit codes, and the interactive
shell on a terminal (tab completion of znode paths).

Its own secure dev cluster from base port 22000 (ZooKeeper 22001-22003, TLS 22101-22103, peers
22701-22703, admin 29001-29003), below Linux's ephemeral range and apart from the other suites'.
"""

import os
import pty
import select
import signal
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYNOD = os.environ.get("SYNOD_BIN", os.path.join(ROOT, "target", "release", "synod"))


@pytest.fixture(scope="module")
def cluster():
    work = tempfile.mkdtemp(prefix="synod-cli-")
    env = dict(os.environ, SYNOD_CLIENT_CONFIG=os.path.join(work, "client.toml"), HOME=work)
    log = open(os.path.join(work, "dev.out"), "w")
    dev = subprocess.Popen(
        [SYNOD, "dev", "--base-port", "22000", "--data", os.path.join(work, "data")],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    certs = os.path.join(work, "data", "certs")
    tls = ["--servers", "127.0.0.1:22101,127.0.0.1:22102", "--ca", os.path.join(certs, "ca.crt")]
    # Until every node serves sessions on both its ports (a node still joining the quorum refuses
    # them, and the tests below name node 1's ports alone).
    deadline = time.time() + 60
    for addr in ("127.0.0.1:22101", "127.0.0.1:22102", "127.0.0.1:22103"):
        while True:
            r = subprocess.run([SYNOD, "cli", "--servers", addr] + tls[2:] + ["stat", "/"],
                               env=env, capture_output=True, text=True)
            if r.returncode == 0:
                break
            assert time.time() < deadline, r.stderr
            time.sleep(0.5)
    while subprocess.run([SYNOD, "cli", "--servers", "127.0.0.1:22001", "stat", "/"], env=env,
                         capture_output=True).returncode != 0:
        assert time.time() < deadline, "node 1's plain-text port serves no session"
        time.sleep(0.5)
    yield env, tls, work
    os.killpg(dev.pid, signal.SIGTERM)
    dev.wait(timeout=30)


def cli(env, *args, stdin=None):
    r = subprocess.run([SYNOD, "cli"] + list(args), env=env, input=stdin, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def test_tls_flags_and_exit_codes(cluster):
    env, tls, _ = cluster
    assert cli(env, *tls, "create", "/cli", "v")[0] == 0
    code, out, _ = cli(env, *tls, "get", "/cli")
    assert (code, out.strip()) == (0, "v")
    # The server's error: exit 1.
    code, _, err = cli(env, *tls, "get", "/nowhere")
    assert code == 1 and "no such node" in err
    # An unknown command (or missing argument) is an error, not a shrug.
    code, _, err = cli(env, *tls, "ls")
    assert code == 1 and "unknown command" in err
    # No server: exit 2, and the message says what to do.
    code, _, err = cli(env, "--servers", "127.0.0.1:1", "ls", "/")
    assert code == 2 and "--servers" in err
    # A TLS port without --ca: the error says so.
    code, _, err = cli(env, "--servers", "127.0.0.1:22101", "ls", "/")
    assert code == 2 and "pass --ca" in err, err
    # The plain-text port serves too.
    code, _, err = cli(env, "--servers", "127.0.0.1:22001", "get", "/cli")
    assert code == 0, err
    # A script on standard input: exit 1 when one of its commands failed.
    code, out, _ = cli(env, *tls, stdin="get /cli\nget /nowhere\n")
    assert code == 1 and "v" in out


def test_credentials(cluster):
    env, tls, _ = cluster
    assert cli(env, *tls, "--auth", "digest:alice:secret", "stat", "/")[0] == 0
    code, out, err = cli(env, *tls, stdin="addauth digest bob:pw\nstat /\n")
    assert code == 0, err
    assert cli(env, *tls, "--auth", "nocolon", "stat", "/")[0] == 1


def test_interactive_shell_completes_paths(cluster):
    env, tls, work = cluster
    assert cli(env, *tls, "create", "/completion-target", "x")[0] == 0
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(SYNOD, [SYNOD, "cli"] + tls, env)
    out = b""

    def read_until(marker, timeout=20):
        nonlocal out
        deadline = time.time() + timeout
        while marker not in out:
            assert time.time() < deadline, out
            r, _, _ = select.select([fd], [], [], 0.5)
            if r:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
        return out

    read_until(b"synod> ")
    os.write(fd, b"get /completion-ta\t")
    read_until(b"/completion-target")
    os.write(fd, b"\r")
    read_until(b"x\r\n")
    os.write(fd, b"quit\r")
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, out
    assert os.path.exists(os.path.join(work, ".synod_cli_history"))

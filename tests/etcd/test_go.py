"""etcd client compatibility through etcd's official Go client (go.etcd.io/etcd/client/v3 and
its concurrency package: Session, Mutex, Election, STM).

tests/etcd/go is a small program (etcdgo) that runs named checks against an endpoint list and
exits non-zero with a reason (see its main.go); each check is one test here, run against the
`target` fixture (a real etcd 3.4, then synod; see conftest.py). The program is built once per
session into target/etcdgo; without a Go toolchain the tests are skipped.
"""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

GO_DIR = os.path.join(ROOT, "tests", "etcd", "go")
ETCDGO = os.path.join(ROOT, "target", "etcdgo")
CHECKS = ["kv", "mutex", "election", "stm", "watch", "lease"]
TIMEOUT = 50  # seconds for one check (the program's own deadline; we allow a little more)


def find_go():
    go = shutil.which("go")
    if go is None and os.path.exists("/usr/local/go/bin/go"):
        go = "/usr/local/go/bin/go"
    return go


@pytest.fixture(scope="session")
def etcdgo():
    go = find_go()
    if go is None:
        pytest.skip("no Go toolchain (go) to build the etcd Go client checks")
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    r = subprocess.run([go, "build", "-o", ETCDGO, "."], cwd=GO_DIR, env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail("go build failed:\n%s%s" % (r.stdout, r.stderr))
    return ETCDGO


def run(etcdgo, target, check):
    args = [etcdgo, "-endpoints", ",".join(target.endpoints), "-timeout", "%ds" % TIMEOUT]
    if target.cacert:
        args += ["-cacert", target.cacert]
    try:
        r = subprocess.run(args + [check], capture_output=True, text=True, timeout=TIMEOUT + 15)
    except subprocess.TimeoutExpired as e:
        err = e.stderr or ""
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        pytest.fail("etcdgo %s against %s hung past %ds\n--- its stderr:\n%s"
                    % (check, target.name, TIMEOUT + 15, err[-6000:]), pytrace=False)
    if r.returncode != 0 or not r.stdout.startswith("ok %s" % check):
        fail = [l for l in r.stderr.splitlines() if l.startswith("FAIL ")]
        pytest.fail("%s against %s\n--- etcdgo stdout:\n%s--- etcdgo stderr (the client's log):\n%s"
                    % (fail[-1] if fail else "etcdgo exited %d" % r.returncode, target.name,
                       r.stdout, r.stderr[-6000:]), pytrace=False)


@pytest.mark.parametrize("check", CHECKS)
def test_go_client(etcdgo, target, check):
    run(etcdgo, target, check)

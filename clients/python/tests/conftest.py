"""Test setup: generate the gRPC stubs if they are missing or older than the .proto, make the package importable from
the checkout, and the ``kv_seeds`` fixture for tests against a real cluster (skipped unless
SYNOD_KV_ADDR is set: ``host:port[,host:port...]`` of its KV gRPC listeners)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "synod_kv" / "synod_kv_pb2_grpc.py"
PROTO = ROOT.parent.parent / "proto" / "synod_kv.proto"
if not STUB.exists() or STUB.stat().st_mtime < PROTO.stat().st_mtime:
    subprocess.run(
        ["bash", str(ROOT / "generate.sh")],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
sys.path.insert(0, str(ROOT))


def kv_tls():
    """TLS options for a cluster that serves it: SYNOD_KV_CA names the cluster CA's PEM file
    (``synod dev`` makes ``<data>/certs/ca.crt``)."""
    ca = os.environ.get("SYNOD_KV_CA")
    return {"ca": ca} if ca else {}


@pytest.fixture
def kv_seeds():
    """The seeds of a real cluster, from SYNOD_KV_ADDR; the test is skipped without it."""
    addr = os.environ.get("SYNOD_KV_ADDR")
    if not addr:
        pytest.skip("SYNOD_KV_ADDR is not set (host:port,... of a running cluster)")
    seeds = [a.strip() for a in addr.split(",") if a.strip()]
    # A cluster just started takes a few seconds to elect every bucket's master.
    import time

    from synod_kv import Client

    deadline = time.monotonic() + 60
    while True:
        try:
            with Client(seeds, timeout=2.0, retries=2, **kv_tls()) as c:
                c.put("e2e-ready", "1")
            return seeds
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)

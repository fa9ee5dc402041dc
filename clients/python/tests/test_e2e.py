"""Against a real cluster: skipped unless SYNOD_KV_ADDR names one (``host:port,...`` of its KV
gRPC listeners, e.g. ``synod dev --kv`` gives 127.0.0.1:2479,...). Add end-to-end tests here,
taking the ``kv_seeds`` fixture from conftest.py."""

import uuid

from conftest import kv_tls
from synod_kv import Client


def test_a_transaction_commits_and_its_writes_are_read_back(kv_seeds):
    prefix = f"e2e-{uuid.uuid4().hex}-"
    with Client(kv_seeds, **kv_tls()) as client:
        txn = client.begin()
        assert txn.get(prefix + "a") is None
        txn.put(prefix + "a", "1")
        txn.put(prefix + "b", "2")
        assert txn.commit().committed
        assert client.get(prefix + "a") == b"1"
        assert client.get_versioned(prefix + "b").version == 1


def test_single_key_operations_and_versions(kv_seeds):
    key = f"e2e-{uuid.uuid4().hex}"
    with Client(kv_seeds, **kv_tls()) as client:
        v1 = client.put(key, "a")
        assert client.compare_and_set(key, v1 - 1, "stale") == (False, v1)
        done, v2 = client.compare_and_set(key, v1, "b")
        assert done and v2 == v1 + 1
        assert client.get(key) == b"b"
        assert client.delete(key) == v2 + 1  # a tombstone keeps counting
        assert client.get(key) is None


def test_the_second_of_two_conflicting_transactions_aborts(kv_seeds):
    key = f"e2e-{uuid.uuid4().hex}"
    with Client(kv_seeds, **kv_tls()) as client:
        first, second = client.begin(), client.begin()
        first.get(key)
        second.get(key)
        first.put(key, "first")
        second.put(key, "second")
        assert first.commit().committed
        assert not second.commit().committed
        assert client.get(key) == b"first"

"""The client against an in-process fake cluster (fake_server.py): buffering, read-your-writes,
coalescing, routing to each bucket's master, redirects to a newer view, idempotent commit
retries, limits, single-key operations and the history recorder."""

import pytest

from fake_server import Cluster
from synod_kv import (
    MAX_KEY_BYTES,
    MAX_TXN_OPS,
    MAX_VALUE_BYTES,
    Client,
    InvalidArgument,
    OutcomeUnknown,
    TxnStateError,
    Unavailable,
    Versioned,
)
from synod_kv._stubs import pb

QUICK = dict(timeout=0.5, retries=3, backoff_initial=0.001, backoff_max=0.005)


@pytest.fixture
def cluster():
    c = Cluster(3, 8)
    yield c
    c.stop()


@pytest.fixture
def client(cluster):
    with Client(cluster.addresses, **QUICK) as c:
        cluster.take_calls()
        yield c


def rpcs(calls):
    return [c.rpc for c in calls]


def key_per_bucket(cluster, buckets):
    keys, i = {}, 0
    while len(keys) < buckets:
        k = f"key{i}".encode()
        keys.setdefault(cluster.bucket_of(k), k)
        i += 1
    return [keys[b] for b in range(buckets)]


def test_writes_stay_buffered_until_commit(cluster, client):
    txn = client.begin()
    txn.put("a", "1")
    txn.delete("b")
    assert rpcs(cluster.take_calls()) == ["Begin", "Read", "Read"]
    assert cluster.value(b"a") == (None, 0)
    assert txn.commit().committed
    calls = cluster.take_calls()
    assert rpcs(calls) == ["Commit"]
    ops = calls[0].ops
    assert [(o.key, o.kind, o.version, o.value) for o in ops] == [
        (b"a", pb.WRITE, 0, b"1"),
        (b"b", pb.DELETE, 0, b""),
    ]
    assert cluster.value(b"a") == (b"1", 1)
    assert cluster.value(b"b") == (None, 1)
    with pytest.raises(TxnStateError):
        txn.put("c", "x")


def test_reads_see_the_transactions_own_writes(cluster, client):
    client.put("a", "old")
    txn = client.begin()
    cluster.take_calls()
    txn.put("a", "new")
    assert txn.get("a") == b"new"
    txn.delete("a")
    assert txn.get("a") is None
    assert txn.get("z") is None
    assert txn.get("z") is None
    assert rpcs(cluster.take_calls()) == ["Read", "Read"]


def test_a_write_after_a_read_keeps_the_version_read(cluster, client):
    assert client.put("k", "v1") == 1
    txn = client.begin()
    assert txn.get("k") == b"v1"
    cluster.take_calls()
    txn.put("k", "v2")
    assert cluster.take_calls() == []
    assert txn.commit().committed
    op = cluster.take_calls()[0].ops[0]
    assert (op.kind, op.version) == (pb.WRITE, 1)

    txn = client.begin()
    txn.get("k")
    client.put("k", "other")
    txn.put("k", "mine")
    outcome = txn.commit()
    assert not outcome.committed and "changed" in outcome.reason
    assert cluster.value(b"k") == (b"other", 3)


def test_blind_writes_fetch_nothing_and_learn_the_versions_they_installed(cluster):
    records = []
    with Client(cluster.addresses, **QUICK, recorder=records.append) as client:
        client.put("a", "1")
        client.put("c", "1")
        txn = client.begin()
        cluster.take_calls()
        txn.put_blind("a", "blind")
        txn.delete_blind("b")
        assert cluster.take_calls() == []
        assert txn.get("a") == b"blind"
        txn.get("c")
        txn.put_blind("c", "2")  # read first: stays conditional
        client.put("a", "2")  # no conflict with a blind write
        cluster.take_calls()
        assert txn.commit().committed
        ops = cluster.take_calls()[-1].ops
        assert [(o.kind, o.version, o.blind) for o in ops] == [
            (pb.WRITE, 0, True),
            (pb.DELETE, 0, True),
            (pb.WRITE, 1, False),
        ]
        assert [txn.committed_version(k) for k in "abcz"] == [3, 1, 2, None]
        assert [(o.kind, o.blind, o.installed) for o in records[-1].ops] == [
            ("WRITE", True, 3),
            ("DELETE", True, 1),
            ("READ", False, None),
            ("WRITE", False, 2),
        ]


def test_requests_go_to_the_master_of_the_keys_bucket(cluster, client):
    keys = key_per_bucket(cluster, 8)
    for k in keys:
        client.get(k)
        client.put(k, "v")
        calls = cluster.take_calls()
        assert rpcs(calls) == ["Read", "Put"]
        assert {c.node for c in calls} == {cluster.master_of(k)}
    txn = client.begin()
    txn.put(keys[5], "x")
    txn.get(keys[3])
    txn.delete(keys[6])
    cluster.take_calls()
    assert txn.commit().committed
    calls = cluster.take_calls()
    assert rpcs(calls) == ["Commit"]
    assert calls[0].node == cluster.master_of(keys[3])
    assert len(calls[0].ops) == 3


def test_not_master_with_a_newer_view_retries_at_the_new_master(cluster, client):
    keys = key_per_bucket(cluster, 8)
    old = cluster.master_of(keys[0])
    cluster.remaster(lambda b: (b + 1) % 3 + 1)
    new = cluster.master_of(keys[0])
    assert old != new
    client.get(keys[0])
    calls = cluster.take_calls()
    assert rpcs(calls) == ["Read", "Read"]
    assert (calls[0].node, calls[1].node) == (old, new)
    assert client.routing.version == 2

    txn = client.begin()
    txn.put(keys[1], "v")
    cluster.remaster(lambda b: b % 3 + 1)
    cluster.take_calls()
    assert txn.commit().committed
    calls = cluster.take_calls()
    assert rpcs(calls) == ["Commit", "Commit"]
    assert calls[1].node == cluster.master_of(keys[1])
    assert calls[0].txn == calls[1].txn


def test_a_master_change_within_a_view_version_is_learned_from_the_refusal(cluster, client):
    keys = key_per_bucket(cluster, 8)
    old = cluster.master_of(keys[0])
    cluster.move_masters(lambda b: (b + 1) % 3 + 1)
    new = cluster.master_of(keys[0])
    client.get(keys[0])
    calls = cluster.take_calls()
    assert rpcs(calls) == ["Read", "Read"]
    assert (calls[0].node, calls[1].node) == (old, new)
    assert client.routing.version == 1
    assert client.routing.master_address(0) == cluster.addresses[new - 1]


def test_a_bucket_without_a_known_master_goes_to_a_replica(cluster):
    cluster.move_masters(lambda b: 0)
    with Client(cluster.addresses, **QUICK) as client:
        assert client.routing.master_address(0) is None
        cluster.move_masters(lambda b: b % 3 + 1)
        for i in range(8):
            key = f"k{i}".encode()
            assert client.put(key, "v") == 1
            puts = [c for c in cluster.take_calls() if c.rpc == "Put"]
            assert puts[-1].node == cluster.master_of(key)


def test_a_commit_is_retried_with_the_same_id(cluster, client):
    txn = client.begin()
    txn.put("a", "1")
    cluster.model.commit_unavailable_after_decide = 1
    cluster.take_calls()
    assert txn.commit().committed
    commits = [c for c in cluster.take_calls() if c.rpc == "Commit"]
    assert len(commits) == 2
    assert commits[0].txn == commits[1].txn == tuple(txn.id)
    assert cluster.value(b"a") == (b"1", 1)


def test_an_unanswered_commit_is_unknown_and_abort_learns_the_decision():
    cluster = Cluster(1, 2)
    records = []
    try:
        client = Client(
            cluster.addresses,
            **{**QUICK, "timeout": 0.1, "retries": 1},
            recorder=records.append,
        )
        txn = client.begin()
        txn.put("a", "1")
        cluster.model.commit_delay = (2, 0.4)
        with pytest.raises(OutcomeUnknown):
            txn.commit()
        assert records == []
        assert txn.abort().committed
        assert [(r.id, r.outcome) for r in records] == [(txn.id, "committed")]
        client.close()
    finally:
        cluster.stop()


def test_limits_are_checked_before_anything_is_sent(cluster, client):
    with pytest.raises(InvalidArgument):
        client.get(b"k" * (MAX_KEY_BYTES + 1))
    with pytest.raises(InvalidArgument):
        client.get("")
    with pytest.raises(InvalidArgument):
        client.put("k", b"\0" * (MAX_VALUE_BYTES + 1))
    txn = client.begin()
    with pytest.raises(InvalidArgument):
        txn.put("k", b"\0" * (MAX_VALUE_BYTES + 1))
    assert rpcs(cluster.take_calls()) == ["Begin"]
    client.put(b"k" * MAX_KEY_BYTES, "v")
    for i in range(MAX_TXN_OPS):
        txn.put(f"k{i}", "v")
    cluster.take_calls()
    with pytest.raises(InvalidArgument):
        txn.get("one too many")
    assert cluster.take_calls() == []
    txn.delete("k0")
    assert txn.commit().committed


def test_single_key_operations(client):
    assert client.put("k", "a") == 1
    assert client.put("k", b"b") == 2
    assert client.get_versioned("k") == Versioned(b"b", 2)
    assert client.compare_and_set("k", 2, "c") == (True, 3)
    assert client.compare_and_set("k", 2, "d") == (False, 3)
    assert client.delete("k") == 4
    assert client.get("k") is None
    assert client.get_versioned("k").version == 4


def test_read_only_transactions_commit_to_validate_their_reads(cluster, client):
    client.put("x", "1")
    txn = client.begin()
    txn.get("x")
    cluster.take_calls()
    assert txn.commit().committed
    calls = cluster.take_calls()
    assert rpcs(calls) == ["Commit"] and calls[0].ops[0].kind == pb.READ
    txn = client.begin()
    txn.get("x")
    client.put("x", "2")
    assert not txn.commit().committed


def test_the_recorder_gets_each_finished_transaction_once(cluster):
    records = []
    with Client(cluster.addresses, **QUICK, recorder=records.append) as client:
        client.put("x", "0")
        txn = client.begin()
        txn.get("x")
        txn.put("x", "1")
        txn.put("y", "2")
        txn.commit()
        assert [(r.id, r.outcome) for r in records] == [(txn.id, "committed")]
        assert [(o.key, o.kind, o.version, o.value) for o in records[0].ops] == [
            (b"x", "READ", 1, b"0"),
            (b"x", "WRITE", 1, b"1"),
            (b"y", "WRITE", 0, b"2"),
        ]
        with client.begin() as t:
            t.delete("x")
        assert records[-1].outcome == "aborted"
        assert records[-1].ops[0].kind == "DELETE"
        assert len(records) == 2
        assert not [c for c in cluster.take_calls() if c.rpc == "Abort"]


def test_a_refused_connection_is_unavailable_not_unknown(cluster, client):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
    txn = client.begin()
    txn.put("k", "v")
    with cluster.model.lock:
        cluster.model.view.nodes.append(pb.Node(id=4, address=dead))
        cluster.model.view.version += 1
        for b in cluster.model.view.buckets:
            b.master = 4
    with pytest.raises(Unavailable):
        client.put("k", "v")
    with pytest.raises(Unavailable):
        txn.commit()
    assert txn.outcome is not None and not txn.outcome.committed

//! The client against an in-process fake cluster (tests/fake): buffering, read-your-writes,
//! coalescing, routing to each bucket's master, redirects to a newer view, idempotent commit
//! retries, limits, single-key operations and the history recorder.

mod fake;

use bytes::Bytes;
use fake::Cluster;
use std::time::Duration;
use synod_kv_client::proto::OpKind;
use synod_kv_client::*;

fn quick() -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_millis(500),
        retries: 3,
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(5),
        ..ClientConfig::default()
    }
}

async fn setup(nodes: u32, buckets: u32) -> (Cluster, Client) {
    let cluster = Cluster::start(nodes, buckets).await;
    let client = Client::connect_with(&cluster.seeds(), quick())
        .await
        .unwrap();
    cluster.take_calls();
    (cluster, client)
}

/// Keys whose buckets are all different, one per bucket in `0..buckets`.
fn key_per_bucket(cluster: &Cluster, buckets: u32) -> Vec<String> {
    let mut keys = vec![String::new(); buckets as usize];
    let mut found = 0;
    for i in 0.. {
        let k = format!("key{i}");
        let b = cluster.bucket_of(k.as_bytes()) as usize;
        if keys[b].is_empty() {
            keys[b] = k;
            found += 1;
            if found == buckets {
                break;
            }
        }
    }
    keys
}

fn rpcs(calls: &[fake::Call]) -> Vec<&'static str> {
    calls.iter().map(|c| c.rpc).collect()
}

#[tokio::test]
async fn writes_stay_buffered_until_commit() {
    let (cluster, client) = setup(3, 8).await;
    let mut txn = client.begin().await.unwrap();
    txn.put("a", "1").await.unwrap();
    txn.delete("b").await.unwrap();
    assert_eq!(rpcs(&cluster.take_calls()), ["Begin", "Read", "Read"]);
    assert_eq!(cluster.value("a"), (None, 0));
    assert_eq!(client.get("a").await.unwrap(), None);
    cluster.take_calls();

    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    let calls = cluster.take_calls();
    assert_eq!(rpcs(&calls), ["Commit"]);
    let ops = &calls[0].ops;
    assert_eq!(ops.len(), 2);
    assert_eq!((ops[0].kind, ops[0].version), (OpKind::Write as i32, 0));
    assert_eq!(ops[0].value, Bytes::from("1"));
    assert_eq!((ops[1].kind, ops[1].version), (OpKind::Delete as i32, 0));
    assert_eq!(cluster.value("a"), (Some(Bytes::from("1")), 1));
    assert_eq!(cluster.value("b"), (None, 1), "a delete bumps the version");
    assert!(matches!(txn.put("c", "x").await, Err(Error::TxnState(_))));
}

#[tokio::test]
async fn reads_see_the_transactions_own_writes_without_requests() {
    let (cluster, client) = setup(3, 8).await;
    client.put("a", "old").await.unwrap();
    let mut txn = client.begin().await.unwrap();
    cluster.take_calls();
    txn.put("a", "new").await.unwrap();
    assert_eq!(txn.get("a").await.unwrap(), Some(Bytes::from("new")));
    txn.delete("a").await.unwrap();
    assert_eq!(txn.get("a").await.unwrap(), None);
    assert_eq!(rpcs(&cluster.take_calls()), ["Read"]);
    // A key read once is answered from the buffer afterwards.
    assert_eq!(txn.get("z").await.unwrap(), None);
    assert_eq!(txn.get("z").await.unwrap(), None);
    assert_eq!(rpcs(&cluster.take_calls()), ["Read"]);
}

#[tokio::test]
async fn a_write_after_a_read_keeps_the_version_read() {
    let (cluster, client) = setup(3, 8).await;
    assert_eq!(client.put("k", "v1").await.unwrap(), 1);

    let mut txn = client.begin().await.unwrap();
    assert_eq!(txn.get("k").await.unwrap(), Some(Bytes::from("v1")));
    cluster.take_calls();
    txn.put("k", "v2").await.unwrap();
    assert!(cluster.take_calls().is_empty(), "coalesced: no request");
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    let commit = cluster.take_calls().pop().unwrap();
    assert_eq!(commit.ops.len(), 1);
    assert_eq!(
        (commit.ops[0].kind, commit.ops[0].version),
        (OpKind::Write as i32, 1)
    );
    assert_eq!(cluster.value("k"), (Some(Bytes::from("v2")), 2));

    // The version observed by the read is validated: a write in between aborts it.
    let mut txn = client.begin().await.unwrap();
    txn.get("k").await.unwrap();
    client.put("k", "other").await.unwrap();
    txn.put("k", "mine").await.unwrap();
    match txn.commit().await.unwrap() {
        Outcome::Aborted { reason } => assert!(reason.contains("changed"), "{reason}"),
        o => panic!("{o:?}"),
    }
    assert_eq!(cluster.value("k"), (Some(Bytes::from("other")), 3));
}

#[tokio::test]
async fn blind_writes_fetch_nothing_and_learn_the_versions_they_installed() {
    let cluster = Cluster::start(3, 8).await;
    let (tx, mut records) = tokio::sync::mpsc::unbounded_channel();
    let config = ClientConfig {
        recorder: Some(Recorder::channel(tx)),
        ..quick()
    };
    let client = Client::connect_with(&cluster.seeds(), config)
        .await
        .unwrap();
    client.put("a", "1").await.unwrap();
    client.put("c", "1").await.unwrap();
    let mut txn = client.begin().await.unwrap();
    cluster.take_calls();
    txn.put_blind("a", "blind").await.unwrap();
    txn.delete_blind("b").await.unwrap();
    assert!(cluster.take_calls().is_empty(), "no Read for a blind write");
    assert_eq!(txn.get("a").await.unwrap(), Some(Bytes::from("blind")));
    // A key read first stays conditional on the version read.
    txn.get("c").await.unwrap();
    txn.put_blind("c", "2").await.unwrap();
    client.put("a", "2").await.unwrap(); // a blind write does not conflict with it
    cluster.take_calls();
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    let ops = cluster.take_calls().pop().unwrap().ops;
    let sent: Vec<_> = ops.iter().map(|o| (o.kind, o.version, o.blind)).collect();
    assert_eq!(
        sent,
        [
            (OpKind::Write as i32, 0, true),
            (OpKind::Delete as i32, 0, true),
            (OpKind::Write as i32, 1, false),
        ]
    );
    assert_eq!(txn.committed_version("a"), Some(3));
    assert_eq!(txn.committed_version("b"), Some(1));
    assert_eq!(txn.committed_version("c"), Some(2));
    assert_eq!(txn.committed_version("z"), None);
    let r = records.try_recv().unwrap();
    let recorded: Vec<_> = r
        .ops
        .iter()
        .map(|o| (o.kind, o.blind, o.installed))
        .collect();
    assert_eq!(
        recorded,
        [
            (OpKind::Write, true, Some(3)),
            (OpKind::Delete, true, Some(1)),
            (OpKind::Read, false, None),
            (OpKind::Write, false, Some(2)),
        ]
    );
}

#[tokio::test]
async fn requests_go_to_the_master_of_the_keys_bucket() {
    let (cluster, client) = setup(3, 8).await;
    let keys = key_per_bucket(&cluster, 8);
    for k in &keys {
        client.get(k).await.unwrap();
        client.put(k, "v").await.unwrap();
        let calls = cluster.take_calls();
        assert_eq!(rpcs(&calls), ["Read", "Put"]);
        let master = cluster.master_of(k.as_bytes());
        assert!(calls.iter().all(|c| c.node == master), "{k}: {calls:?}");
    }
    // A transaction over buckets 5, 3 and 6 commits once, at bucket 3's master.
    let mut txn = client.begin().await.unwrap();
    txn.put(&keys[5], "x").await.unwrap();
    txn.get(&keys[3]).await.unwrap();
    txn.delete(&keys[6]).await.unwrap();
    cluster.take_calls();
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    let calls = cluster.take_calls();
    assert_eq!(rpcs(&calls), ["Commit"]);
    assert_eq!(calls[0].node, cluster.master_of(keys[3].as_bytes()));
    assert_eq!(calls[0].ops.len(), 3);
}

#[tokio::test]
async fn not_master_with_a_newer_view_retries_at_the_new_master() {
    let (cluster, client) = setup(3, 8).await;
    let keys = key_per_bucket(&cluster, 8);
    let old = cluster.master_of(keys[0].as_bytes());
    cluster.remaster(|b| (b + 1) % 3 + 1);
    let new = cluster.master_of(keys[0].as_bytes());
    assert_ne!(old, new);

    client.get(&keys[0]).await.unwrap();
    let calls = cluster.take_calls();
    assert_eq!(
        rpcs(&calls),
        ["Read", "Read"],
        "no GetView: the view came with the refusal"
    );
    assert_eq!((calls[0].node, calls[1].node), (old, new));
    assert_eq!(client.routing().version(), 2);

    // The same for a commit: the client learns the view from the refusal.
    let mut txn = client.begin().await.unwrap();
    txn.put(&keys[1], "v").await.unwrap();
    let stale = Client::connect_with(&cluster.seeds(), quick())
        .await
        .unwrap();
    cluster.remaster(|b| b % 3 + 1);
    cluster.take_calls();
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    let calls = cluster.take_calls();
    assert_eq!(rpcs(&calls), ["Commit", "Commit"]);
    assert_eq!(calls[1].node, cluster.master_of(keys[1].as_bytes()));
    assert_eq!(calls[0].txn, calls[1].txn);
    assert_eq!(client.routing().version(), 3);
    drop(stale);
}

#[tokio::test]
async fn a_master_change_within_a_view_version_is_learned_from_the_refusal() {
    let (cluster, client) = setup(3, 8).await;
    let keys = key_per_bucket(&cluster, 8);
    let old = cluster.master_of(keys[0].as_bytes());
    cluster.move_masters(|b| (b + 1) % 3 + 1);
    let new = cluster.master_of(keys[0].as_bytes());
    client.get(&keys[0]).await.unwrap();
    let calls = cluster.take_calls();
    assert_eq!(rpcs(&calls), ["Read", "Read"]);
    assert_eq!((calls[0].node, calls[1].node), (old, new));
    let routing = client.routing();
    assert_eq!(routing.version(), 1);
    let new_addr = &cluster.addresses[new as usize - 1];
    assert_eq!(routing.master_address(0), Some(new_addr.as_str()));
}

#[tokio::test]
async fn a_bucket_without_a_known_master_goes_to_a_replica() {
    let cluster = Cluster::start(3, 8).await;
    cluster.move_masters(|_| 0);
    let client = Client::connect_with(&cluster.seeds(), quick())
        .await
        .unwrap();
    assert_eq!(client.routing().master_address(0), None);
    cluster.move_masters(|b| b % 3 + 1);
    cluster.take_calls();
    for i in 0..8 {
        let key = format!("k{i}");
        assert_eq!(client.put(&key, "v").await.unwrap(), 1);
        let put = cluster.calls("Put").pop().unwrap();
        assert_eq!(put.node, cluster.master_of(key.as_bytes()));
    }
    assert!(
        cluster.calls("Put").len() <= 8 + 8,
        "at most one redirect per bucket"
    );
}

#[tokio::test]
async fn a_commit_is_retried_with_the_same_id() {
    let (cluster, client) = setup(3, 8).await;
    let mut txn = client.begin().await.unwrap();
    txn.put("a", "1").await.unwrap();
    txn.put("b", "2").await.unwrap();
    cluster
        .model
        .lock()
        .unwrap()
        .commit_unavailable_after_decide = 1;
    cluster.take_calls();
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    let commits = cluster.calls("Commit");
    assert_eq!(commits.len(), 2);
    assert_eq!(commits[0].txn, Some((txn.id().time, txn.id().node)));
    assert_eq!(commits[0].txn, commits[1].txn);
    assert_eq!(
        cluster.value("a"),
        (Some(Bytes::from("1")), 1),
        "applied once"
    );
}

#[tokio::test]
async fn an_unanswered_commit_is_unknown_and_abort_learns_the_decision() {
    let cluster = Cluster::start(1, 2).await;
    let (tx, mut records) = tokio::sync::mpsc::unbounded_channel();
    let config = ClientConfig {
        timeout: Duration::from_millis(100),
        retries: 1,
        recorder: Some(Recorder::channel(tx)),
        ..quick()
    };
    let client = Client::connect_with(&cluster.seeds(), config)
        .await
        .unwrap();
    let mut txn = client.begin().await.unwrap();
    txn.put("a", "1").await.unwrap();
    cluster.model.lock().unwrap().commit_delay = Some((2, Duration::from_millis(400)));
    let err = txn.commit().await.unwrap_err();
    assert!(err.is_unknown(), "{err}");
    assert!(records.try_recv().is_err(), "not finished yet");
    // The coordinator had decided commit: abort cannot undo it, and says so.
    assert_eq!(txn.abort().await.unwrap(), Outcome::Committed);
    assert_eq!(rpcs(&cluster.calls("Abort")), ["Abort"]);
    let r = records.try_recv().unwrap();
    assert_eq!((r.id, r.outcome), (txn.id(), RecordedOutcome::Committed));
    drop(txn);
    assert!(records.try_recv().is_err(), "recorded once");

    // Unknown, then dropped: recorded as unknown.
    let mut txn = client.begin().await.unwrap();
    txn.put("b", "1").await.unwrap();
    cluster.model.lock().unwrap().commit_delay = Some((2, Duration::from_millis(400)));
    assert!(txn.commit().await.unwrap_err().is_unknown());
    drop(txn);
    assert_eq!(
        records.try_recv().unwrap().outcome,
        RecordedOutcome::Unknown
    );
}

#[tokio::test]
async fn limits_are_checked_before_anything_is_sent() {
    let (cluster, client) = setup(1, 1).await;
    let long_key = vec![b'k'; MAX_KEY_BYTES + 1];
    let long_value = vec![0u8; MAX_VALUE_BYTES + 1];
    let invalid = |r: Result<_>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(client.get(&long_key).await.map(|_| ())));
    assert!(invalid(client.get("").await.map(|_| ())));
    assert!(invalid(
        client.put("k", long_value.clone()).await.map(|_| ())
    ));
    assert!(invalid(
        client
            .compare_and_set("k", 0, long_value.clone())
            .await
            .map(|_| ())
    ));
    let mut txn = client.begin().await.unwrap();
    assert!(invalid(txn.put(&long_key, "v").await));
    assert!(invalid(txn.put("k", long_value).await));
    assert!(invalid(txn.delete("").await));
    assert_eq!(rpcs(&cluster.take_calls()), ["Begin"]);
    assert!(client.put(vec![b'k'; MAX_KEY_BYTES], "v").await.is_ok());

    for i in 0..MAX_TXN_OPS {
        txn.put(format!("k{i}"), "v").await.unwrap();
    }
    cluster.take_calls();
    assert!(invalid(txn.get("one too many").await.map(|_| ())));
    assert!(cluster.take_calls().is_empty());
    // Keys already in the set are still fine.
    txn.delete("k0").await.unwrap();
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
}

#[tokio::test]
async fn single_key_operations() {
    let (_cluster, client) = setup(3, 4).await;
    assert_eq!(client.put("k", "a").await.unwrap(), 1);
    assert_eq!(client.put("k", "b").await.unwrap(), 2);
    let v = client.get_versioned("k").await.unwrap();
    assert_eq!(
        v,
        Versioned {
            value: Some(Bytes::from("b")),
            version: 2
        }
    );
    assert_eq!(
        client.compare_and_set("k", 2, "c").await.unwrap(),
        (true, 3)
    );
    assert_eq!(
        client.compare_and_set("k", 2, "d").await.unwrap(),
        (false, 3)
    );
    assert_eq!(client.delete("k").await.unwrap(), 4);
    assert_eq!(client.get("k").await.unwrap(), None);
    assert_eq!(client.get_versioned("k").await.unwrap().version, 4);
    assert_eq!(
        client.compare_and_set("new", 0, "x").await.unwrap(),
        (true, 1)
    );
}

#[tokio::test]
async fn read_only_transactions_commit_to_validate_their_reads() {
    let (cluster, client) = setup(3, 8).await;
    client.put("x", "1").await.unwrap();
    let mut txn = client.begin().await.unwrap();
    txn.get("x").await.unwrap();
    txn.get("y").await.unwrap();
    cluster.take_calls();
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    let calls = cluster.take_calls();
    assert_eq!(rpcs(&calls), ["Commit"]);
    assert!(calls[0].ops.iter().all(|o| o.kind == OpKind::Read as i32));

    let mut txn = client.begin().await.unwrap();
    txn.get("x").await.unwrap();
    client.put("x", "2").await.unwrap();
    assert!(!txn.commit().await.unwrap().is_committed());

    // Nothing touched: nothing to validate, no request.
    let mut txn = client.begin().await.unwrap();
    cluster.take_calls();
    assert_eq!(txn.commit().await.unwrap(), Outcome::Committed);
    assert!(cluster.take_calls().is_empty());
}

#[tokio::test]
async fn the_recorder_gets_each_finished_transaction_once() {
    let cluster = Cluster::start(3, 8).await;
    let (tx, mut records) = tokio::sync::mpsc::unbounded_channel();
    let config = ClientConfig {
        recorder: Some(Recorder::channel(tx)),
        ..quick()
    };
    let client = Client::connect_with(&cluster.seeds(), config)
        .await
        .unwrap();
    client.put("x", "0").await.unwrap();

    let mut txn = client.begin().await.unwrap();
    txn.get("x").await.unwrap();
    txn.put("x", "1").await.unwrap();
    txn.put("y", "2").await.unwrap();
    txn.get("y").await.unwrap(); // from the buffer: not a read of the store
    txn.commit().await.unwrap();
    let r = records.try_recv().unwrap();
    assert_eq!((r.id, r.outcome), (txn.id(), RecordedOutcome::Committed));
    let ops: Vec<_> = r
        .ops
        .iter()
        .map(|o| (o.key.clone(), o.kind, o.version, o.value.clone()))
        .collect();
    let b = |s: &'static str| Bytes::from(s);
    assert_eq!(
        ops,
        [
            (b("x"), OpKind::Read, 1, Some(b("0"))),
            (b("x"), OpKind::Write, 1, Some(b("1"))),
            (b("y"), OpKind::Write, 0, Some(b("2"))),
        ]
    );
    assert!(r.finished >= r.begun);

    let mut aborted = client.begin().await.unwrap();
    aborted.delete("x").await.unwrap();
    assert!(!aborted.abort().await.unwrap().is_committed());
    let r = records.try_recv().unwrap();
    assert_eq!(r.outcome, RecordedOutcome::Aborted);
    assert_eq!(r.ops[0].kind, OpKind::Delete);

    let mut dropped = client.begin().await.unwrap();
    dropped.get("x").await.unwrap();
    drop(dropped);
    assert_eq!(
        records.try_recv().unwrap().outcome,
        RecordedOutcome::Aborted
    );
    drop(aborted);
    assert!(records.try_recv().is_err());
    assert!(
        cluster.calls("Abort").is_empty(),
        "local aborts send nothing"
    );
}

#[tokio::test]
async fn a_refused_connection_is_unavailable_not_unknown() {
    let cluster = Cluster::start(2, 2).await;
    let client = Client::connect_with(&cluster.seeds(), quick())
        .await
        .unwrap();
    let mut txn = client.begin().await.unwrap();
    txn.put("k", "v").await.unwrap();
    // Then a node that is down becomes the master of every bucket.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    {
        let mut m = cluster.model.lock().unwrap();
        m.view.nodes.push(synod_kv_client::proto::Node {
            id: 3,
            address: dead_addr,
        });
        m.view.version = 2;
        for b in &mut m.view.buckets {
            b.master = 3;
        }
    }
    let e = client.put("k", "v").await.unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let e = client.compare_and_set("k", 0, "v").await.unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");

    // A commit that never reached a node can never commit: it is aborted, and the error says
    // it was not delivered.
    let e = txn.commit().await.unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(matches!(txn.outcome(), Some(Outcome::Aborted { .. })));
    assert!(cluster.calls("Commit").len() <= 1);
}

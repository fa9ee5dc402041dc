//! etcd's rules, one test each (the numbers are what etcd 3.4 answers to the same requests;
//! tests/etcd runs the same sequences against a real etcd).

use crate::errors;
use crate::etcdserverpb::{
    compare::{CompareResult, CompareTarget, TargetUnion},
    range_request::{SortOrder, SortTarget},
    request_op::Request as Op,
    response_op::Response as Resp,
    CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use crate::machine::EtcdMachine;
use crate::mvccpb::event::EventType;
use crate::store::Span;
use crate::synod::etcd::v1::{self as log, command::Request as C, reply::Result as R};
use crate::{apply, Failure};
use bytes::Bytes;
use prost::Message;
use synod_core::{Command, Position, Snapshot, StateMachine};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn run(m: &mut EtcdMachine, c: C) -> Result<R, Failure> {
    match m
        .execute(&log::Command { request: Some(c) })
        .result
        .unwrap()
    {
        R::Failure(f) => Err(Failure::from_log(&f).expect("a known failure")),
        r => Ok(r),
    }
}

fn put(m: &mut EtcdMachine, k: &str, v: &str) -> i64 {
    let Ok(R::Put(p)) = run(
        m,
        C::Put(PutRequest {
            key: b(k),
            value: b(v),
            ..Default::default()
        }),
    ) else {
        panic!("put failed")
    };
    p.header.unwrap().revision
}

fn get(m: &EtcdMachine, r: RangeRequest) -> Result<crate::etcdserverpb::RangeResponse, Failure> {
    apply::range(m.store(), m.store().revision(), &r)
}

fn prefix(p: &str) -> RangeRequest {
    let mut end = p.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    RangeRequest {
        key: b(p),
        range_end: Bytes::from(end),
        ..Default::default()
    }
}

fn delete(k: &str, end: &str) -> C {
    C::DeleteRange(DeleteRangeRequest {
        key: b(k),
        range_end: b(end),
        prev_kv: true,
    })
}

fn cmp_mod(k: &str, result: CompareResult, rev: i64) -> Compare {
    Compare {
        result: result as i32,
        target: CompareTarget::Mod as i32,
        key: b(k),
        target_union: Some(TargetUnion::ModRevision(rev)),
        range_end: Bytes::new(),
    }
}

fn op_put(k: &str, v: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: b(k),
            value: b(v),
            ..Default::default()
        })),
    }
}

#[test]
fn the_revision_starts_at_one_and_each_change_raises_it_by_one() {
    let mut m = EtcdMachine::new();
    assert_eq!(m.store().revision(), 1);
    assert_eq!(put(&mut m, "a", "1"), 2);
    assert_eq!(put(&mut m, "a", "2"), 3);
    let kv = get(
        &m,
        RangeRequest {
            key: b("a"),
            ..Default::default()
        },
    )
    .unwrap()
    .kvs[0]
        .clone();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (2, 3, 2));
    // A delete that deletes nothing changes nothing.
    let Ok(R::DeleteRange(d)) = run(&mut m, delete("zz", "")) else {
        panic!()
    };
    assert_eq!((d.deleted, d.header.unwrap().revision), (0, 3));
    // A delete ends the generation: the next put creates the key again at version 1.
    let Ok(R::DeleteRange(d)) = run(&mut m, delete("a", "")) else {
        panic!()
    };
    assert_eq!(
        (d.deleted, d.header.unwrap().revision, d.prev_kvs.len()),
        (1, 4, 1)
    );
    assert_eq!(put(&mut m, "a", "3"), 5);
    let kv = get(
        &m,
        RangeRequest {
            key: b("a"),
            ..Default::default()
        },
    )
    .unwrap()
    .kvs[0]
        .clone();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (5, 5, 1));
}

#[test]
fn a_txn_is_one_revision_and_a_txn_that_writes_nothing_is_none() {
    let mut m = EtcdMachine::new();
    put(&mut m, "k", "v");
    let t = TxnRequest {
        // Create x and y unless x exists (the second time it does).
        compare: vec![cmp_mod("x", CompareResult::Equal, 0)],
        success: vec![op_put("x", "1"), op_put("y", "2")],
        failure: vec![RequestOp {
            request: Some(Op::RequestRange(RangeRequest {
                key: b("k"),
                ..Default::default()
            })),
        }],
    };
    let Ok(R::Txn(r)) = run(&mut m, C::Txn(t.clone())) else {
        panic!()
    };
    assert!(r.succeeded);
    assert_eq!(r.header.unwrap().revision, 3);
    let kvs = get(&m, prefix("x")).unwrap().kvs;
    assert_eq!(kvs[0].mod_revision, 3);
    assert_eq!(get(&m, prefix("y")).unwrap().kvs[0].mod_revision, 3);
    // The same Txn again: the compare fails, the else branch only reads.
    let Ok(R::Txn(r)) = run(&mut m, C::Txn(t)) else {
        panic!()
    };
    assert!(!r.succeeded);
    assert_eq!(r.header.unwrap().revision, 3);
    assert_eq!(m.store().revision(), 3);
    let Some(Resp::ResponseRange(rr)) = &r.responses[0].response else {
        panic!()
    };
    assert_eq!(rr.kvs[0].value, b("v"));
}

#[test]
fn reads_inside_a_txn_see_its_writes_but_its_compares_do_not() {
    let mut m = EtcdMachine::new();
    let t = TxnRequest {
        compare: vec![],
        success: vec![
            op_put("a", "1"),
            RequestOp {
                request: Some(Op::RequestRange(RangeRequest {
                    key: b("a"),
                    ..Default::default()
                })),
            },
            RequestOp {
                request: Some(Op::RequestTxn(TxnRequest {
                    // Compares see the state the outer Txn started from: "a" does not exist.
                    compare: vec![Compare {
                        result: CompareResult::Equal as i32,
                        target: CompareTarget::Version as i32,
                        key: b("a"),
                        target_union: Some(TargetUnion::Version(0)),
                        range_end: Bytes::new(),
                    }],
                    success: vec![op_put("b", "then")],
                    failure: vec![op_put("b", "else")],
                })),
            },
        ],
        failure: vec![],
    };
    let Ok(R::Txn(r)) = run(&mut m, C::Txn(t)) else {
        panic!()
    };
    let Some(Resp::ResponseRange(rr)) = &r.responses[1].response else {
        panic!()
    };
    assert_eq!(rr.kvs[0].value, b("1"));
    assert_eq!(rr.header.as_ref().unwrap().revision, 2);
    assert_eq!(get(&m, prefix("b")).unwrap().kvs[0].value, b("then"));
    assert_eq!(m.store().revision(), 2);
}

#[test]
fn duplicate_keys_and_too_many_ops_are_refused_with_etcds_words() {
    let mut m = EtcdMachine::new();
    let dup = TxnRequest {
        success: vec![op_put("a", "1"), op_put("a", "2")],
        ..Default::default()
    };
    assert_eq!(run(&mut m, C::Txn(dup)), Err(errors::DUPLICATE_KEY));
    let put_in_deleted = TxnRequest {
        success: vec![
            op_put("ab", "1"),
            RequestOp {
                request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                    key: b("a"),
                    range_end: b("b"),
                    prev_kv: false,
                })),
            },
        ],
        ..Default::default()
    };
    assert_eq!(
        run(&mut m, C::Txn(put_in_deleted)),
        Err(errors::DUPLICATE_KEY)
    );
    // The same key in both branches of a nested Txn is fine.
    let branches = TxnRequest {
        success: vec![RequestOp {
            request: Some(Op::RequestTxn(TxnRequest {
                success: vec![op_put("a", "1")],
                failure: vec![op_put("a", "2")],
                ..Default::default()
            })),
        }],
        ..Default::default()
    };
    assert!(run(&mut m, C::Txn(branches)).is_ok());
    let many = TxnRequest {
        success: (0..129).map(|i| op_put(&format!("k{i}"), "v")).collect(),
        ..Default::default()
    };
    assert_eq!(run(&mut m, C::Txn(many)), Err(errors::TOO_MANY_OPS));
    assert_eq!(
        errors::COMPACTED.message,
        "etcdserver: mvcc: required revision has been compacted"
    );
}

#[test]
fn ranges_limit_count_sort_and_filter_as_etcd() {
    let mut m = EtcdMachine::new();
    for (k, v) in [("p/c", "1"), ("p/a", "3"), ("p/b", "2"), ("q", "0")] {
        put(&mut m, k, v);
    }
    put(&mut m, "p/a", "4");
    let r = get(
        &m,
        RangeRequest {
            limit: 2,
            ..prefix("p/")
        },
    )
    .unwrap();
    assert_eq!((r.count, r.more, r.kvs.len()), (3, true, 2));
    assert_eq!(r.kvs[0].key, b("p/a"));
    let r = get(
        &m,
        RangeRequest {
            sort_target: SortTarget::Mod as i32,
            sort_order: SortOrder::Descend as i32,
            ..prefix("p/")
        },
    )
    .unwrap();
    let keys: Vec<_> = r.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(keys, vec![b("p/a"), b("p/b"), b("p/c")]);
    // A target other than the key sorts ascending by default.
    let r = get(
        &m,
        RangeRequest {
            sort_target: SortTarget::Value as i32,
            ..prefix("p/")
        },
    )
    .unwrap();
    assert_eq!(r.kvs[0].value, b("1"));
    let r = get(
        &m,
        RangeRequest {
            count_only: true,
            ..prefix("p/")
        },
    )
    .unwrap();
    assert_eq!((r.count, r.kvs.len()), (3, 0));
    let r = get(
        &m,
        RangeRequest {
            keys_only: true,
            ..prefix("p/")
        },
    )
    .unwrap();
    assert!(r.kvs.iter().all(|kv| kv.value.is_empty()));
    let r = get(
        &m,
        RangeRequest {
            min_create_revision: 3,
            max_mod_revision: 4,
            ..prefix("p/")
        },
    )
    .unwrap();
    let keys: Vec<_> = r.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(keys, vec![b("p/b")]);
    // "\0" as the end: every key from the key on; the count ignores the limit.
    let r = get(
        &m,
        RangeRequest {
            key: b("p/b"),
            range_end: Bytes::from_static(&[0]),
            limit: 1,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((r.count, r.kvs[0].key.clone()), (3, b("p/b")));
}

#[test]
fn old_revisions_are_read_until_compacted() {
    let mut m = EtcdMachine::new();
    put(&mut m, "a", "1"); // 2
    put(&mut m, "a", "2"); // 3
    run(&mut m, delete("a", "")).unwrap(); // 4
    put(&mut m, "b", "1"); // 5
    let at = |m: &EtcdMachine, rev| {
        get(
            m,
            RangeRequest {
                revision: rev,
                ..prefix("a")
            },
        )
    };
    assert_eq!(at(&m, 2).unwrap().kvs[0].value, b("1"));
    assert_eq!(at(&m, 3).unwrap().kvs[0].version, 2);
    assert!(at(&m, 4).unwrap().kvs.is_empty());
    assert_eq!(at(&m, 6), Err(errors::FUTURE_REV));
    let compact = |rev| {
        C::Compaction(CompactionRequest {
            revision: rev,
            physical: false,
        })
    };
    run(&mut m, compact(3)).unwrap();
    assert_eq!(at(&m, 2), Err(errors::COMPACTED));
    // The compaction point itself can still be read.
    assert_eq!(at(&m, 3).unwrap().kvs[0].value, b("2"));
    assert_eq!(run(&mut m, compact(3)), Err(errors::COMPACTED));
    assert_eq!(run(&mut m, compact(9)), Err(errors::FUTURE_REV));
    run(&mut m, compact(5)).unwrap();
    assert_eq!(
        m.store().len(),
        1,
        "a's history ended in a deletion: it is gone"
    );
    assert_eq!(m.store().revision(), 5, "compaction is no revision");
}

#[test]
fn events_come_in_revision_order_with_their_previous_versions() {
    let mut m = EtcdMachine::new();
    put(&mut m, "w/a", "1");
    put(&mut m, "other", "x");
    let t = TxnRequest {
        success: vec![op_put("w/b", "1"), op_put("w/a", "2")],
        ..Default::default()
    };
    run(&mut m, C::Txn(t)).unwrap();
    run(&mut m, delete("w/", "w0")).unwrap();
    let span = Span::new(&b("w/"), &b("w0"));
    let ev: Vec<_> = m.store().events(2, 10, &span, true).collect();
    let seen: Vec<_> = ev
        .iter()
        .map(|(rev, e)| {
            (
                *rev,
                e.r#type,
                e.kv.as_ref().unwrap().key.clone(),
                e.prev_kv.is_some(),
            )
        })
        .collect();
    let (p, d) = (EventType::Put as i32, EventType::Delete as i32);
    assert_eq!(
        seen,
        vec![
            (2, p, b("w/a"), false),
            (4, p, b("w/b"), false),
            (4, p, b("w/a"), true),
            (5, d, b("w/a"), true),
            (5, d, b("w/b"), true),
        ]
    );
    assert_eq!(ev[3].1.kv.as_ref().unwrap().mod_revision, 5);
}

#[test]
fn a_revoked_lease_deletes_its_keys_in_one_revision() {
    let mut m = EtcdMachine::new();
    let Ok(R::LeaseGrant(g)) = run(&mut m, C::LeaseGrant(LeaseGrantRequest { ttl: 1, id: 7 }))
    else {
        panic!()
    };
    assert_eq!((g.id, g.ttl), (7, 2), "etcd's smallest TTL is 2 s");
    assert_eq!(
        run(&mut m, C::LeaseGrant(LeaseGrantRequest { ttl: 5, id: 7 })),
        Err(errors::LEASE_EXIST)
    );
    for k in ["l/1", "l/2"] {
        run(
            &mut m,
            C::Put(PutRequest {
                key: b(k),
                value: b("v"),
                lease: 7,
                ..Default::default()
            }),
        )
        .unwrap();
    }
    let missing = C::Put(PutRequest {
        key: b("x"),
        lease: 8,
        ..Default::default()
    });
    assert_eq!(run(&mut m, missing), Err(errors::LEASE_NOT_FOUND));
    assert_eq!(m.store().revision(), 3);
    let Ok(R::LeaseRevoke(r)) = run(&mut m, C::LeaseRevoke(LeaseRevokeRequest { id: 7 })) else {
        panic!()
    };
    assert_eq!(r.header.unwrap().revision, 4);
    assert_eq!(get(&m, prefix("l/")).unwrap().count, 0);
    assert_eq!(
        run(&mut m, C::LeaseRevoke(LeaseRevokeRequest { id: 7 })),
        Err(errors::LEASE_NOT_FOUND)
    );
    // A lease holding no key is revoked without a revision.
    run(&mut m, C::LeaseGrant(LeaseGrantRequest { ttl: 5, id: 9 })).unwrap();
    run(&mut m, C::LeaseRevoke(LeaseRevokeRequest { id: 9 })).unwrap();
    assert_eq!(m.store().revision(), 4);
}

#[test]
fn ignore_value_and_ignore_lease_keep_what_the_key_had() {
    let mut m = EtcdMachine::new();
    let keep = C::Put(PutRequest {
        key: b("a"),
        ignore_value: true,
        ..Default::default()
    });
    assert_eq!(run(&mut m, keep.clone()), Err(errors::KEY_NOT_FOUND));
    put(&mut m, "a", "v");
    run(&mut m, keep).unwrap();
    let kv = get(&m, prefix("a")).unwrap().kvs[0].clone();
    assert_eq!((kv.value, kv.version), (b("v"), 2));
    let both = C::Put(PutRequest {
        key: b("a"),
        value: b("x"),
        ignore_value: true,
        ..Default::default()
    });
    assert_eq!(run(&mut m, both), Err(errors::VALUE_PROVIDED));
}

#[test]
fn a_snapshot_restores_the_same_state() {
    let mut m = EtcdMachine::new();
    run(&mut m, C::LeaseGrant(LeaseGrantRequest { ttl: 10, id: 3 })).unwrap();
    put(&mut m, "a", "1");
    run(
        &mut m,
        C::Put(PutRequest {
            key: b("b"),
            lease: 3,
            ..Default::default()
        }),
    )
    .unwrap();
    run(&mut m, delete("a", "")).unwrap();
    put(&mut m, "c", "1");
    run(
        &mut m,
        C::Compaction(CompactionRequest {
            revision: 4,
            physical: false,
        }),
    )
    .unwrap();
    let data = m.snapshot_view()();
    let mut n = EtcdMachine::new();
    n.restore(&Snapshot {
        at: Position::default(),
        data,
    })
    .unwrap();
    assert_eq!(n.snapshot_view()(), m.snapshot_view()());
    assert_eq!(n.store().compacted(), 4);
    assert_eq!(n.leases().get(3).unwrap().keys.len(), 1);
    // And both go on alike.
    for x in [&mut m, &mut n] {
        run(x, C::LeaseRevoke(LeaseRevokeRequest { id: 3 })).unwrap();
    }
    assert_eq!(n.snapshot_view()(), m.snapshot_view()());
    assert!(n
        .restore(&Snapshot {
            at: Position::default(),
            data: Bytes::from_static(b"\x0a\xff")
        })
        .is_err());
}

#[test]
fn bytes_that_are_not_a_command_are_refused_alike_everywhere() {
    let mut m = EtcdMachine::new();
    let junk = Command {
        id: 1,
        payload: Bytes::from_static(b"\xff\xff\xff"),
    };
    let reply = log::Reply::decode(m.apply(Position::default(), &junk, &mut Vec::new())).unwrap();
    assert!(matches!(reply.result, Some(R::Failure(_))));
    assert_eq!(m.store().revision(), 1);
}

mod watchers {
    use super::*;
    use crate::etcdserverpb::{watch_create_request::FilterType, WatchCreateRequest};
    use crate::watch::{Watchers, REVISIONS_PER_POLL};

    fn create(key: &str, end: &str, start: i64) -> WatchCreateRequest {
        WatchCreateRequest {
            key: b(key),
            range_end: b(end),
            start_revision: start,
            ..Default::default()
        }
    }

    #[test]
    fn a_watcher_far_behind_gets_every_revision_once_in_order() {
        let mut m = EtcdMachine::new();
        let n = REVISIONS_PER_POLL as i64 + 500;
        for i in 0..n {
            put(&mut m, &format!("a/{}", i % 7), "v");
            put(&mut m, "other", "x");
        }
        let mut w = Watchers::new(10);
        let created = w.create(m.store(), &create("a/", "a0", 1), 0);
        assert!(created.created && !created.canceled);
        let mut revs = Vec::new();
        let mut polls = 0;
        while !w.caught_up(m.store()) {
            let mut out = Vec::new();
            w.poll(m.store(), 0, &mut out);
            revs.extend(out.iter().map(|r| r.header.unwrap().revision));
            polls += 1;
        }
        assert!(polls >= 2, "a long catch-up takes several polls");
        let want: Vec<i64> = (0..n).map(|i| 2 + 2 * i).collect();
        assert_eq!(revs, want);
        // New changes come from the next poll, once.
        put(&mut m, "a/x", "v");
        let mut out = Vec::new();
        w.poll(m.store(), 0, &mut out);
        w.poll(m.store(), 0, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            w.progress(m.store()).unwrap().header.unwrap().revision,
            m.store().revision()
        );
        assert!(
            Watchers::new(1).progress(m.store()).is_none(),
            "no watcher, no progress"
        );
    }

    #[test]
    fn a_watcher_behind_the_compaction_is_cancelled_with_its_revision() {
        let mut m = EtcdMachine::new();
        for _ in 0..5 {
            put(&mut m, "k", "v");
        }
        run(
            &mut m,
            C::Compaction(CompactionRequest {
                revision: 4,
                physical: false,
            }),
        )
        .unwrap();
        let mut w = Watchers::new(10);
        w.create(m.store(), &create("k", "", 2), 0);
        // The compaction point itself is still served.
        w.create(
            m.store(),
            &WatchCreateRequest {
                watch_id: 7,
                ..create("k", "", 4)
            },
            0,
        );
        let mut out = Vec::new();
        w.poll(m.store(), 0, &mut out);
        assert!(out[0].canceled && out[0].compact_revision == 4 && out[0].watch_id == 0);
        let got: Vec<_> = out[1..]
            .iter()
            .map(|r| (r.watch_id, r.header.unwrap().revision))
            .collect();
        assert_eq!(got, vec![(7, 4), (7, 5), (7, 6)]);
        assert_eq!(w.len(), 1);
        let dup = w.create(
            m.store(),
            &WatchCreateRequest {
                watch_id: 7,
                ..create("k", "", 0)
            },
            0,
        );
        assert!(dup.canceled && dup.cancel_reason.contains("duplicate") && dup.watch_id == -1);
        let empty = w.create(m.store(), &create("b", "a", 0), 0);
        assert!(empty.canceled && empty.cancel_reason == crate::watch::EMPTY_RANGE);
        // A cancelled watcher's id is not given again.
        let next = w.create(m.store(), &create("k", "", 0), 0);
        assert_eq!(next.watch_id, 1);
        w.cancel(m.store(), 1).unwrap();
        assert_eq!(w.create(m.store(), &create("k", "", 0), 0).watch_id, 2);
    }

    #[test]
    fn filters_drop_events_and_revisions_left_empty() {
        let mut m = EtcdMachine::new();
        let mut w = Watchers::new(10);
        let c = WatchCreateRequest {
            filters: vec![FilterType::Nodelete as i32],
            ..create("k", "", 0)
        };
        w.create(m.store(), &c, 0);
        put(&mut m, "k", "1");
        run(&mut m, delete("k", "")).unwrap();
        put(&mut m, "k", "2");
        let mut out = Vec::new();
        w.poll(m.store(), 0, &mut out);
        let revs: Vec<_> = out.iter().map(|r| r.header.unwrap().revision).collect();
        assert_eq!(revs, vec![2, 4]);
        assert!(
            w.idle_progress(m.store(), 10, 5).is_empty(),
            "progress only when asked"
        );
    }
}

#[test]
fn the_digest_follows_the_commands_applied_and_their_replies() {
    let cmd = |c: C| Command {
        id: 1,
        payload: Bytes::from(log::Command { request: Some(c) }.encode_to_vec()),
    };
    let put = |k: &str| {
        cmd(C::Put(PutRequest {
            key: b(k),
            value: b("v"),
            ..Default::default()
        }))
    };
    let (mut a, mut b2) = (EtcdMachine::new(), EtcdMachine::new());
    for m in [&mut a, &mut b2] {
        m.apply(Position::default(), &put("x"), &mut Vec::new());
    }
    assert_eq!(a.digest(), b2.digest());
    a.apply(Position::default(), &put("y"), &mut Vec::new());
    assert_ne!(a.digest(), b2.digest());
    // A snapshot carries it.
    let mut c = EtcdMachine::new();
    c.restore(&Snapshot {
        at: Position::default(),
        data: a.snapshot_view()(),
    })
    .unwrap();
    assert_eq!(c.digest(), a.digest());
}

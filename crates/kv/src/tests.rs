//! Scenario tests of the bucket machine: a few buckets wired by a test network that delivers
//! each emitted command (in order, or as the test says).

use crate::route::bucket_of;
use crate::*;
use bytes::Bytes;
use std::collections::VecDeque;
use synod_core::wire::Wire;

/// Buckets joined by FIFO queues; `step` applies the next command of one bucket's inbox.
pub(crate) struct Net {
    pub buckets: Vec<Bucket>,
    pub inbox: Vec<VecDeque<Bytes>>,
}

impl Net {
    pub fn new(n: u32) -> Self {
        Net {
            buckets: (0..n).map(|b| Bucket::new(b, n, 60_000_000)).collect(),
            inbox: vec![VecDeque::new(); n as usize],
        }
    }

    pub fn submit(&mut self, b: u32, cmd: &Cmd) -> Reply {
        let mut out = Vec::new();
        let r = self.buckets[b as usize].apply(&cmd.to_bytes(), &mut out);
        for o in out {
            self.inbox[o.to as usize].push_back(o.payload);
        }
        r
    }

    /// Deliver everything until quiet.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            let Some(b) = (0..self.inbox.len()).find(|&b| !self.inbox[b].is_empty()) else {
                return;
            };
            self.deliver(b as u32);
        }
        panic!("the buckets never went quiet");
    }

    pub fn deliver(&mut self, b: u32) {
        let payload = self.inbox[b as usize]
            .pop_front()
            .expect("something to deliver");
        let mut out = Vec::new();
        self.buckets[b as usize].apply(&payload, &mut out);
        for o in out {
            self.inbox[o.to as usize].push_back(o.payload);
        }
    }
}

pub(crate) fn key_in(bucket: u32, buckets: u32, n: usize) -> Bytes {
    let mut found = 0;
    for i in 0.. {
        let k = format!("k{i}");
        if bucket_of(k.as_bytes(), buckets) == bucket {
            if found == n {
                return Bytes::from(k);
            }
            found += 1;
        }
    }
    unreachable!()
}

fn id(t: u64) -> TxnId {
    TxnId { time: t, node: 1 }
}

fn write(key: &Bytes, version: u64, value: &str) -> Op {
    Op {
        key: key.clone(),
        kind: OpKind::Write,
        version,
        value: Bytes::from(value.to_string()),
        blind: false,
    }
}

fn read(key: &Bytes, version: u64) -> Op {
    Op {
        key: key.clone(),
        kind: OpKind::Read,
        version,
        value: Bytes::new(),
        blind: false,
    }
}

fn outcome(r: &Reply) -> Option<Outcome> {
    match r {
        Reply::Decided(d) => Some(d.outcome),
        _ => None,
    }
}

#[test]
fn a_single_bucket_transaction_commits_in_one_command() {
    let mut net = Net::new(3);
    let x = key_in(1, 3, 0);
    let r = net.submit(
        1,
        &Cmd::Commit {
            id: id(1),
            parts: vec![(1, vec![write(&x, 0, "a")])],
        },
    );
    assert_eq!(outcome(&r), Some(Outcome::Committed));
    assert_eq!(net.buckets[1].read(&x), (Some(Bytes::from("a")), 1));
    // A retry answers the same; a stale version aborts.
    let again = net.submit(
        1,
        &Cmd::Commit {
            id: id(1),
            parts: vec![(1, vec![write(&x, 0, "a")])],
        },
    );
    assert_eq!(outcome(&again), Some(Outcome::Committed));
    let stale = net.submit(
        1,
        &Cmd::Commit {
            id: id(2),
            parts: vec![(1, vec![write(&x, 0, "b")])],
        },
    );
    assert_eq!(outcome(&stale), Some(Outcome::Aborted));
    assert_eq!(net.buckets[1].read(&x), (Some(Bytes::from("a")), 1));
}

#[test]
fn a_multi_bucket_transaction_commits_everywhere_or_nowhere() {
    let mut net = Net::new(3);
    let (x, y) = (key_in(0, 3, 0), key_in(2, 3, 0));
    let t = Cmd::Commit {
        id: id(1),
        parts: vec![(0, vec![write(&x, 0, "x1")]), (2, vec![write(&y, 0, "y1")])],
    };
    assert_eq!(net.submit(0, &t), Reply::Pending);
    net.settle();
    assert_eq!(
        net.buckets[0].decided(&id(1)).map(|d| d.outcome),
        Some(Outcome::Committed)
    );
    assert_eq!(net.buckets[0].read(&x).1, 1);
    assert_eq!(net.buckets[2].read(&y).1, 1);
    // One stale part aborts the whole transaction.
    let t = Cmd::Commit {
        id: id(2),
        parts: vec![(0, vec![write(&x, 1, "x2")]), (2, vec![write(&y, 0, "y2")])],
    };
    net.submit(0, &t);
    net.settle();
    assert_eq!(
        net.buckets[0].decided(&id(2)).map(|d| d.outcome),
        Some(Outcome::Aborted)
    );
    assert_eq!(
        net.buckets[0].read(&x),
        (Some(Bytes::from("x1")), 1),
        "x untouched"
    );
    for b in &net.buckets {
        assert_eq!(b.in_progress(), (0, 0));
        assert_eq!(b.busy_keys(), 0, "every lock released");
        assert_eq!(b.unacked(), 0, "every message acknowledged");
    }
}

#[test]
fn a_cross_bucket_deadlock_is_resolved_by_the_older_transaction() {
    // T1 (older) and T2 both write x (bucket 0) and y (bucket 1). Bucket 0 coordinates both.
    // Bucket 1 receives T2's part first and prepares it; bucket 0 prepares T1. Without the
    // priority rule neither could finish.
    let mut net = Net::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    let parts = |v: &str| vec![(0, vec![write(&x, 0, v)]), (1, vec![write(&y, 0, v)])];
    net.submit(
        0,
        &Cmd::Commit {
            id: id(2),
            parts: parts("t2"),
        },
    );
    // T2 now holds x at bucket 0 (prepared); its Prepare to bucket 1 is in flight.
    net.deliver(1); // bucket 1 prepares T2 and votes yes
    net.submit(
        0,
        &Cmd::Commit {
            id: id(1),
            parts: parts("t1"),
        },
    ); // T1 queues behind T2 at bucket 0 and asks to revert it
    net.settle();
    let d1 = net.buckets[0].decided(&id(1)).expect("T1 decided").outcome;
    let d2 = net.buckets[0].decided(&id(2)).expect("T2 decided").outcome;
    // Both saw version 0, so exactly one can commit; the older one has priority.
    assert_eq!((d1, d2), (Outcome::Committed, Outcome::Aborted));
    assert!(
        net.buckets[0].stats().reverts >= 1,
        "T2's vote was withdrawn"
    );
    assert_eq!(net.buckets[0].read(&x).0, Some(Bytes::from("t1")));
    assert_eq!(net.buckets[1].read(&y).0, Some(Bytes::from("t1")));
}

#[test]
fn a_younger_reader_and_an_older_writer_both_commit_in_some_serial_order() {
    // T2 reads x and writes y; T1 (older) writes z in bucket 0 and reads x... both only read the
    // contended key, so after the revert both commit (the thesis's Figure 3.5 case).
    let mut net = Net::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    let w = key_in(1, 2, 1);
    let t2 = vec![(0, vec![write(&x, 0, "t2")]), (1, vec![read(&y, 0)])];
    let t1 = vec![
        (0, vec![read(&key_in(0, 2, 1), 0)]),
        (1, vec![write(&y, 0, "t1"), read(&w, 0)]),
    ];
    net.submit(
        0,
        &Cmd::Commit {
            id: id(2),
            parts: t2,
        },
    );
    net.deliver(1); // T2 prepared at bucket 1 (reads y: shared lock)
    net.submit(
        0,
        &Cmd::Commit {
            id: id(1),
            parts: t1,
        },
    );
    net.settle();
    let d1 = net.buckets[0].decided(&id(1)).unwrap().outcome;
    let d2 = net.buckets[0].decided(&id(2)).unwrap().outcome;
    // T2's vote reached its coordinator before the revert request: T2 committed first (it read
    // y@0 before T1 wrote it), then T1 got the lock and committed too (Figure 3.5: both commit).
    assert_eq!((d1, d2), (Outcome::Committed, Outcome::Committed));
    assert_eq!(net.buckets[1].read(&y), (Some(Bytes::from("t1")), 1));
}

#[test]
fn a_client_abort_wins_over_an_undecided_commit_and_refuses_a_late_copy() {
    let mut net = Net::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    let t = Cmd::Commit {
        id: id(5),
        parts: vec![(0, vec![write(&x, 0, "a")]), (1, vec![write(&y, 0, "a")])],
    };
    net.submit(0, &t);
    let r = net.submit(0, &Cmd::Abort { id: id(5) });
    assert_eq!(outcome(&r), Some(Outcome::Aborted));
    net.settle();
    assert_eq!(net.buckets[1].read(&y).1, 0);
    assert_eq!(
        outcome(&net.submit(0, &t)),
        Some(Outcome::Aborted),
        "a retried commit gets the same answer"
    );
    // An abort of an unknown id is remembered: its commit arriving later is refused.
    assert_eq!(
        outcome(&net.submit(0, &Cmd::Abort { id: id(6) })),
        Some(Outcome::Aborted)
    );
    let late = Cmd::Commit {
        id: id(6),
        parts: vec![(0, vec![write(&x, 0, "late")])],
    };
    assert_eq!(outcome(&net.submit(0, &late)), Some(Outcome::Aborted));
    assert_eq!(net.buckets[0].read(&x).1, 0);
}

#[test]
fn fast_abort_of_waiters_when_a_write_commits() {
    let mut net = Net::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    // T1 prepares x (multi-bucket, so it holds the lock until the decision).
    net.submit(
        0,
        &Cmd::Commit {
            id: id(1),
            parts: vec![(0, vec![write(&x, 0, "t1")]), (1, vec![write(&y, 0, "t1")])],
        },
    );
    // Younger single-key transactions on x queue behind it.
    for t in 2..6 {
        assert_eq!(
            net.submit(
                0,
                &Cmd::Commit {
                    id: id(t),
                    parts: vec![(0, vec![write(&x, 0, "late")])]
                }
            ),
            Reply::Pending
        );
    }
    net.settle();
    for t in 2..6 {
        assert_eq!(
            net.buckets[0].decided(&id(t)).unwrap().outcome,
            Outcome::Aborted
        );
    }
    assert_eq!(net.buckets[0].stats().fast_aborts, 4);
    assert_eq!(net.buckets[0].busy_keys(), 0);
}

#[test]
fn lost_and_repeated_messages_are_applied_once_in_order() {
    let mut net = Net::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    net.submit(
        0,
        &Cmd::Commit {
            id: id(1),
            parts: vec![(0, vec![write(&x, 0, "a")]), (1, vec![write(&y, 0, "a")])],
        },
    );
    // The prepare is lost; the new master re-sends what is pending, twice.
    net.inbox[1].clear();
    for _ in 0..2 {
        let mut again = Vec::new();
        net.buckets[0].pending(&mut again);
        for o in again {
            net.inbox[o.to as usize].push_back(o.payload);
        }
    }
    net.settle();
    assert_eq!(
        net.buckets[0].decided(&id(1)).unwrap().outcome,
        Outcome::Committed
    );
    assert_eq!(net.buckets[1].read(&y).1, 1, "applied once");
    assert_eq!(net.buckets[0].unacked() + net.buckets[1].unacked(), 0);
}

#[test]
fn snapshots_round_trip_mid_transaction() {
    let mut net = Net::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    net.submit(
        0,
        &Cmd::Commit {
            id: id(1),
            parts: vec![(0, vec![write(&x, 0, "a")]), (1, vec![write(&y, 0, "a")])],
        },
    );
    net.submit(
        0,
        &Cmd::Commit {
            id: id(2),
            parts: vec![(0, vec![write(&x, 0, "b")])],
        },
    );
    for b in 0..2 {
        let copy = Bucket::decode(net.buckets[b].encode()).expect("decodes");
        assert_eq!(copy.digest(), net.buckets[b].digest());
        net.buckets[b] = copy;
    }
    net.settle();
    assert_eq!(
        net.buckets[0].decided(&id(1)).unwrap().outcome,
        Outcome::Committed
    );
    assert_eq!(
        net.buckets[0].decided(&id(2)).unwrap().outcome,
        Outcome::Aborted
    );
    assert!(Bucket::decode(Bytes::from_static(b"\x01junk")).is_err());
}

#[test]
fn malformed_commands_are_refused_not_panicked_on() {
    let mut net = Net::new(3);
    let x = key_in(1, 3, 0);
    let mut out = Vec::new();
    for junk in [&b""[..], b"\x09", b"\x01\x00", b"\x03\x00\x00\x00\x07"] {
        assert!(matches!(
            net.buckets[0].apply(&Bytes::copy_from_slice(junk), &mut out),
            Reply::Refused(_)
        ));
    }
    // A key of bucket 1 sent to bucket 0, a commit not at its coordinator, a key twice.
    let bad = [
        vec![(0, vec![write(&x, 0, "a")])],
        vec![(1, vec![write(&x, 0, "a")])],
        vec![(
            0,
            vec![
                write(&key_in(0, 3, 0), 0, "a"),
                write(&key_in(0, 3, 0), 0, "b"),
            ],
        )],
        vec![],
    ];
    for parts in bad {
        assert!(matches!(
            net.submit(0, &Cmd::Commit { id: id(9), parts }),
            Reply::Refused(_)
        ));
    }
    assert!(out.is_empty());
}

#[test]
fn blind_writes_need_no_validation_and_learn_the_version_they_installed() {
    let mut net = Net::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    // Someone writes y first; a transaction that read x and writes y blindly still commits.
    net.submit(
        1,
        &Cmd::Commit {
            id: id(1),
            parts: vec![(1, vec![write(&y, 0, "first")])],
        },
    );
    let mut blind = write(&y, 0, "blind");
    blind.blind = true;
    net.submit(
        0,
        &Cmd::Commit {
            id: id(2),
            parts: vec![(0, vec![read(&x, 0)]), (1, vec![blind])],
        },
    );
    net.settle();
    let d = net.buckets[0].decided(&id(2)).unwrap().clone();
    assert_eq!(d.outcome, Outcome::Committed);
    assert_eq!(
        d.versions,
        vec![0, 2],
        "x read at 0, y installed at 2 over the other write's 1"
    );
    assert_eq!(net.buckets[1].read(&y), (Some(Bytes::from("blind")), 2));
    // A blind read is refused.
    let mut r = read(&x, 0);
    r.blind = true;
    assert!(matches!(
        net.submit(
            0,
            &Cmd::Commit {
                id: id(3),
                parts: vec![(0, vec![r])]
            }
        ),
        Reply::Refused(_)
    ));
}

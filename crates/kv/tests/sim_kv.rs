//! The bucket-level world (a bucket is one master that fails over): the four scenarios of the
//! transaction layer as scripted runs (masters failing over at chosen moments, fixed delays),
//! and the CPU cost model of the scaling experiment. The fault sweeps with the serializability
//! checker run on whole nodes over real cores: crates/protocols/tests/sim_kv.rs
//! (`synod sim --kv`).

use bytes::Bytes;
use synod_core::wire::Wire;
use synod_kv::route::bucket_of;
use synod_kv::sim::world::{ClientEvent, NetCfg, ReplyTo, World};
use synod_kv::sim::{sweep, KvReport, KvSimConfig};
use synod_kv::{Cmd, Op, OpKind, Outcome, Reply, TxnId};

fn show(r: &KvReport) -> String {
    let mut s = format!("seed {}: {}", r.seed, r.summary());
    for x in r.anomalies.iter().chain(&r.violations).take(10) {
        s += &format!("\n    {x}");
    }
    s
}

fn clean(cfg: &KvSimConfig, seeds: std::ops::Range<u64>) {
    let r = sweep(cfg, seeds);
    for f in &r.failures {
        eprintln!("{}", show(f));
    }
    assert!(r.ok(), "{} seeds failed", r.failures.len());
}

// ---- Scripted scenarios ------------------------------------------------------------------

/// A world with fixed delays (client 0.5 ms, replication 1 ms, between buckets 5 ms, failover
/// 100 ms) and a scripted client whose replies are kept by tag.
struct Script {
    w: World,
    replies: Vec<(u64, Reply)>,
}

impl Script {
    fn new(buckets: u32) -> Self {
        Script {
            w: World::new(buckets, NetCfg::fixed(1_000, 5_000, 500), 7),
            replies: Vec::new(),
        }
    }

    fn submit(&mut self, tag: u64, cmd: Cmd) {
        let (to, id) = match &cmd {
            Cmd::Commit { id, parts } => (parts[0].0, *id),
            _ => panic!("commits only"),
        };
        self.submit_to(to, tag, id, cmd);
    }

    fn submit_to(&mut self, to: u32, tag: u64, id: TxnId, cmd: Cmd) {
        let rt = ReplyTo { client: 0, tag, id };
        self.w.submit(to, cmd.to_bytes(), Some(rt));
    }

    /// Run until virtual time `t` (microseconds).
    fn until(&mut self, t: u64) {
        while let Some(ev) = self.w.step(t) {
            if let ClientEvent::Reply { tag, reply, .. } = ev {
                self.replies.push((tag, reply));
            }
        }
    }

    /// Run in 100 µs steps until `pred` holds (at most 1 s more).
    fn until_true(&mut self, pred: impl Fn(&World) -> bool) {
        let limit = self.w.now + 1_000_000;
        while !pred(&self.w) {
            assert!(self.w.now < limit, "the awaited state never came");
            let t = self.w.now + 100;
            self.until(t);
        }
    }

    fn decided(&self, tag: u64) -> Vec<Outcome> {
        self.replies
            .iter()
            .filter_map(|(t, r)| match r {
                Reply::Decided(d) if *t == tag => Some(d.outcome),
                _ => None,
            })
            .collect()
    }

    fn bucket(&self, b: u32) -> &synod_kv::Bucket {
        &self.w.nodes[b as usize].bucket
    }

    fn settled(&mut self) {
        self.until(self.w.now + 3_000_000);
        assert!(self.w.quiet() && self.w.settled(), "the world settles");
    }
}

fn key_in(bucket: u32, buckets: u32, n: usize) -> Bytes {
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| bucket_of(k.as_bytes(), buckets) == bucket)
        .nth(n)
        .map(Bytes::from)
        .expect("keys enough")
}

fn op(key: &Bytes, kind: OpKind, version: u64, value: &str) -> Op {
    Op {
        key: key.clone(),
        kind,
        version,
        value: Bytes::from(value.to_string()),
        blind: false,
    }
}

fn id(time: u64, n: u64) -> TxnId {
    TxnId { time, node: n }
}

fn two_bucket_write(t: TxnId, x: &Bytes, y: &Bytes, v: &str) -> Cmd {
    Cmd::Commit {
        id: t,
        parts: vec![
            (0, vec![op(x, OpKind::Write, 0, v)]),
            (1, vec![op(y, OpKind::Write, 0, v)]),
        ],
    }
}

#[test]
fn a_participant_master_killed_between_its_vote_and_the_decision() {
    for (restore, after_decision) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut s = Script::new(2);
        let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
        let t = id(1, 1);
        s.submit(1, two_bucket_write(t, &x, &y, "t"));
        // Bucket 1 prepares and votes; the vote is on its way (unacknowledged).
        s.until_true(|w| w.nodes[1].bucket.in_progress().0 == 1);
        assert_eq!(s.bucket(1).unacked(), 1, "the vote is in flight");
        if after_decision {
            // The coordinator decides; bucket 1 fails before the decision reaches it.
            s.until_true(|w| w.nodes[0].bucket.decided(&t).is_some());
        }
        s.w.fail_master(1, restore);
        s.settled();
        assert_eq!(s.decided(1), [Outcome::Committed], "restore {restore}");
        assert_eq!(s.bucket(0).read(&x), (Some(Bytes::from("t")), 1));
        assert_eq!(s.bucket(1).read(&y), (Some(Bytes::from("t")), 1));
        assert!(s.w.violations.is_empty(), "{:?}", s.w.violations);
    }
}

#[test]
fn a_coordinator_bucket_fails_over_mid_transaction() {
    for stage in 0..3 {
        let mut s = Script::new(2);
        let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
        let t = id(1, 1);
        let cmd = two_bucket_write(t, &x, &y, "t");
        s.submit(1, cmd.clone());
        match stage {
            // Coordinating, its prepare to bucket 1 in flight (and lost with the master).
            0 => s.until_true(|w| w.nodes[0].bucket.in_progress().1 == 1),
            // Bucket 1 has voted; the vote is lost since the coordinator has no master.
            1 => s.until_true(|w| w.nodes[1].bucket.in_progress().0 == 1),
            // Decided at the coordinator; the decision to bucket 1 is lost with the master.
            _ => s.until_true(|w| w.nodes[0].bucket.decided(&t).is_some()),
        }
        s.w.fail_master(0, stage == 1);
        // The client heard nothing (its master failed): it sends the commit again.
        s.until(s.w.now + 200_000);
        s.submit(2, cmd.clone());
        s.settled();
        let again = s
            .decided(1)
            .into_iter()
            .chain(s.decided(2))
            .collect::<Vec<_>>();
        assert!(
            !again.is_empty(),
            "stage {stage}: the client learns the outcome"
        );
        assert!(
            again.iter().all(|o| *o == Outcome::Committed),
            "stage {stage}"
        );
        assert_eq!(s.bucket(0).read(&x).1, 1, "stage {stage}: applied once");
        assert_eq!(s.bucket(1).read(&y).1, 1, "stage {stage}: applied once");
    }
}

#[test]
fn a_cross_bucket_deadlock_is_resolved_by_the_priority_rule() {
    // T_B (older) writes z (bucket 0, its coordinator), x (bucket 1) and y (bucket 2); T_A
    // (younger) writes x and y, coordinated by bucket 1. Bucket 1 locks x for T_A before T_B's
    // part arrives, while bucket 2 locks y for T_B before T_A's part arrives: each waits for
    // the other. Bucket 1 asks T_A's coordinator (itself) to withdraw T_A's vote, T_B takes x
    // and commits, and T_A (which saw x and y at version 0) aborts.
    let mut s = Script::new(3);
    let (z, x, y) = (key_in(0, 3, 0), key_in(1, 3, 0), key_in(2, 3, 0));
    let tb = id(0, 2);
    let ta = id(4_500, 1);
    s.submit(
        2,
        Cmd::Commit {
            id: tb,
            parts: vec![
                (0, vec![op(&z, OpKind::Write, 0, "b")]),
                (1, vec![op(&x, OpKind::Write, 0, "b")]),
                (2, vec![op(&y, OpKind::Write, 0, "b")]),
            ],
        },
    );
    s.until(4_500);
    s.submit(
        1,
        Cmd::Commit {
            id: ta,
            parts: vec![
                (1, vec![op(&x, OpKind::Write, 0, "a")]),
                (2, vec![op(&y, OpKind::Write, 0, "a")]),
            ],
        },
    );
    // At 7.5 ms T_B's parts reach buckets 1 and 2 together; by 7 ms the cycle is set up:
    // T_A holds x at bucket 1, T_B holds y at bucket 2.
    s.until(7_000);
    assert_eq!(
        s.bucket(1).in_progress(),
        (1, 1),
        "T_A prepared at bucket 1"
    );
    assert_eq!(s.bucket(2).in_progress(), (0, 0));
    s.until(8_000);
    assert_eq!(
        s.bucket(1).stats().reverts,
        1,
        "T_A's vote withdrawn for T_B"
    );
    s.settled();
    assert_eq!(s.decided(2), [Outcome::Committed], "the older commits");
    assert_eq!(
        s.decided(1),
        [Outcome::Aborted],
        "the younger saw stale versions"
    );
    for (b, k) in [(0, &z), (1, &x), (2, &y)] {
        assert_eq!(s.bucket(b).read(k), (Some(Bytes::from("b")), 1));
    }
}

#[test]
fn a_client_retrying_after_a_timeout_gets_the_same_outcome_applied_once() {
    let mut s = Script::new(2);
    let (x, y) = (key_in(0, 2, 0), key_in(1, 2, 0));
    // A blind put: its reply is lost (everything is lost from 1 ms to 50 ms).
    let put = Cmd::Commit {
        id: id(1, 1),
        parts: vec![(
            0,
            vec![Op {
                blind: true,
                ..op(&x, OpKind::Write, 0, "p")
            }],
        )],
    };
    // A two-bucket transaction whose prepare and pending reply are lost the same way.
    let txn = two_bucket_write(id(2, 2), &key_in(0, 2, 1), &y, "t");
    s.submit(1, put.clone());
    s.submit(2, txn.clone());
    s.until(1_000);
    s.w.net.loss = 1.0;
    s.w.faulty_until = 50_000;
    s.until(50_000);
    assert!(s.replies.is_empty(), "every reply was lost");
    assert_eq!(s.bucket(0).read(&x).1, 1, "the put was applied");
    // The client times out at 200 ms and sends both again (the same ids).
    s.until(200_000);
    s.submit(3, put.clone());
    s.submit(4, txn.clone());
    s.until(300_000);
    let versions: Vec<u64> = s
        .replies
        .iter()
        .filter_map(|(t, r)| match r {
            Reply::Decided(d) if *t == 3 => Some(d.version),
            _ => None,
        })
        .collect();
    assert_eq!(
        versions,
        [1],
        "the retried put is answered with its decision"
    );
    assert_eq!(s.decided(3), [Outcome::Committed]);
    assert!(
        s.replies.contains(&(4, Reply::Pending)),
        "the transaction waits for bucket 1, whose prepare is re-sent within a second"
    );
    s.settled();
    assert_eq!(s.decided(4), [Outcome::Committed], "answered when decided");
    s.submit(5, txn.clone());
    s.submit(6, put.clone());
    s.settled();
    assert_eq!(s.decided(5), [Outcome::Committed]);
    assert_eq!(s.decided(6), [Outcome::Committed]);
    assert_eq!(s.bucket(0).read(&x).1, 1, "the put applied once");
    assert_eq!(s.bucket(0).read(&key_in(0, 2, 1)).1, 1, "applied once");
    assert_eq!(s.bucket(1).read(&y).1, 1, "applied once");
}

// --- The cost model and the scaling experiment (synod_kv::sim::cost, ::scaling) ---

#[test]
fn throughput_grows_with_buckets_under_the_cost_model() {
    use synod_kv::sim::scaling::{point, ScalingCfg};
    let cfg = ScalingCfg::default();
    let one = point(1, &cfg);
    let eight = point(8, &cfg);
    let speedup = eight.txns_per_s / one.txns_per_s;
    assert!(
        speedup >= 6.0,
        "1 → 8 buckets: {speedup:.2}× ({one:?} / {eight:?})"
    );
    assert_eq!((one.nodes_busy, eight.nodes_busy), (3, 24));
    // The masters' CPU per committed transaction stays within 20 %.
    let cpu = eight.cpu_us_per_txn / one.cpu_us_per_txn;
    assert!((0.8..=1.2).contains(&cpu), "CPU µs/txn ratio {cpu:.2}");
    // Commands per committed transaction: NOT within 20 % of the 1-bucket point (measured
    // 1.00 against 1.23, +23 %): one bucket has no cross-bucket transaction at all (one
    // command each), while from 2 buckets on 5 % of them span two buckets and each costs
    // about 4–5 more replicated commands (prepare, vote, decision, acknowledgements). What
    // holds, and is asserted: ≤ 1.3 commands per transaction with 8 buckets, and flat
    // (within 20 %) from 2 buckets on.
    assert!(one.commands_per_txn < 1.02, "{one:?}");
    assert!(eight.commands_per_txn <= 1.3, "{eight:?}");
    let two = point(
        2,
        &ScalingCfg {
            measure_us: 200_000,
            ..cfg.clone()
        },
    );
    let flat = eight.commands_per_txn / two.commands_per_txn;
    assert!(
        (0.8..=1.2).contains(&flat),
        "commands/txn 2 → 8 buckets: {flat:.2}"
    );
}

#[test]
fn the_cost_model_keeps_runs_clean() {
    use synod_kv::sim::cost::CostCfg;
    use synod_kv::sim::scaling::{config, ScalingCfg};
    let mut cfg = config(4, &ScalingCfg::default());
    cfg.workload.clients = 24;
    cfg.workload.keys = 400;
    cfg.workload.txns = 20;
    cfg.workload.single = 0.2;
    cfg.workload.replica_reads = 0.2;
    cfg.cost = Some(CostCfg::default());
    // With faults and the default network too: the cost model changes only timings.
    for faults in [false, true] {
        let c = KvSimConfig {
            faults,
            net: if faults {
                NetCfg::default()
            } else {
                cfg.net.clone()
            },
            ..cfg.clone()
        };
        clean(&c, 0..10);
    }
}

//! A performance-shaped history: 20 000 ops on 8 keys by 10 concurrent processes, with crashed
//! clients, failed ops and BadVersion cas. Not timed; it must simply be accepted.

mod common;

use std::time::Instant;
use synod_history::{
    check_all, check_linearizable, Budget, Call, FinalRead, FinalReads, History, Op, Outcome, Ret,
    Verdict, ZnodeState,
};

/// xorshift64*: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Each process runs ops back to back (latency 1..2000 ns, think time 0..200 ns) on one session;
/// every op takes effect at a random point of its interval, and the model is executed in that
/// order. The zxid of a reply is the number of writes applied so far (cluster-wide). Returns the
/// history and the final state of each key.
fn realistic_history(
    ops: usize,
    keys: usize,
    processes: usize,
    crash_pct: u64,
    seed: u64,
) -> (History, FinalReads) {
    let mut rng = Rng(seed | 1);
    let mut free_at: Vec<u64> = (0..processes as u64).map(|p| p * 13).collect();
    let mut points = Vec::with_capacity(ops);
    let mut shape = Vec::with_capacity(ops);
    for i in 0..ops {
        let p = (0..processes).min_by_key(|&p| free_at[p]).unwrap();
        let invoke = free_at[p];
        let complete = invoke + 1 + rng.below(2000);
        free_at[p] = complete + rng.below(200);
        let point = invoke + rng.below(complete - invoke + 1);
        points.push((point, i));
        shape.push((p as u64, rng.below(keys as u64) as usize, invoke, complete));
    }
    points.sort_unstable();
    let mut states = vec![ZnodeState::default(); keys];
    let mut zxid = 0i64;
    let mut out: Vec<Option<Op>> = vec![None; ops];
    for (_, i) in points {
        let (process, key, invoke, complete) = shape[i];
        let state = &mut states[key];
        let call = match rng.below(10) {
            0..=4 => Call::Read,
            5..=7 => Call::Write {
                value: rng.below(1_000_000) as i64,
            },
            _ => Call::Cas {
                expect_version: state.version - i32::from(rng.below(4) == 0),
                value: rng.below(1_000_000) as i64,
            },
        };
        // crash_pct% crashed (half of them applied), 1% failed, the rest ok.
        let dice = rng.below(200);
        let crashed = dice < 2 * crash_pct;
        let failed = !crashed && dice < 2 * crash_pct + 2;
        let before = *state;
        if (crashed && dice & 1 == 0) || (!crashed && !failed) {
            *state = common::model_apply(before, &call);
            if state.version != before.version {
                zxid += 1;
            }
        }
        let ret = common::model_ret(&call, before, *state);
        let outcome = match (crashed, failed) {
            (true, _) => Outcome::Unknown,
            (_, true) => Outcome::Failed,
            _ => Outcome::Ok(ret),
        };
        out[i] = Some(Op {
            id: i as u64,
            process,
            session: 0x1000 + process as i64,
            key: format!("key-{key}"),
            call,
            invoke_ns: invoke,
            complete_ns: Some(complete),
            zxid: matches!(outcome, Outcome::Ok(_)).then_some(zxid),
            outcome,
            node: Some((process % 5) as u8 + 1),
        });
    }
    let mut history = History::new();
    history.meta.insert("seed".into(), seed.into());
    history.ops = out.into_iter().map(Option::unwrap).collect();
    let finals = states
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let reads = (1..=5).map(|node| FinalRead {
                node,
                value: s.value,
                version: s.version,
            });
            (format!("key-{k}"), reads.collect())
        })
        .collect();
    (history, finals)
}

#[test]
fn twenty_thousand_ops_on_eight_keys_are_accepted() {
    let (history, finals) = realistic_history(20_000, 8, 10, 2, 42);
    let start = Instant::now();
    let report = check_all(&history, Some(&finals), Budget::default());
    eprintln!("checked 20 000 ops in {:?}\n{report}", start.elapsed());
    assert_eq!(report.verdict(), Verdict::Pass, "{report}");
    assert_eq!(report.linearizability.keys.len(), 8);
}

#[test]
fn hot_key_with_ten_processes_is_accepted() {
    let (history, _) = realistic_history(5_000, 1, 10, 2, 7);
    let report = check_linearizable(&history, Budget::default());
    assert_eq!(report.verdict(), Verdict::Pass, "{report}");
}

#[test]
fn a_single_stale_read_in_a_large_history_is_found() {
    let (mut history, _) = realistic_history(20_000, 8, 10, 2, 43);
    // Make one read in the middle return the state before the write preceding it.
    let target = history
        .ops
        .iter()
        .position(|op| {
            op.id > 10_000
                && matches!(op.outcome, Outcome::Ok(Ret::Read { version, .. }) if version > 3)
        })
        .unwrap();
    let key = history.ops[target].key.clone();
    if let Outcome::Ok(Ret::Read { value, version }) = &mut history.ops[target].outcome {
        *value += 1;
        *version -= 1;
    }
    let report = check_linearizable(&history, Budget::default());
    let violations: Vec<_> = report.violations().collect();
    assert_eq!(violations.len(), 1, "{report}");
    assert_eq!(violations[0].key, key);
    common::assert_diagnosis_consistent(&history, violations[0]);
}

#[test]
fn crash_heavy_hot_key_is_accepted() {
    // One key, 10 processes, 10% (then 30%) of the ops crashed: indeterminate writes pile up.
    for (ops, crash_pct) in [(20_000, 10), (3_000, 30)] {
        let (history, _) = realistic_history(ops, 1, 10, crash_pct, 11);
        let report = check_linearizable(&history, Budget::default());
        assert_eq!(report.verdict(), Verdict::Pass, "{report}");
    }
}

#[test]
fn a_long_hot_key_history_is_decided() {
    // Chaos runs put tens of thousands of ops by a dozen sessions on one key; every explored
    // configuration must stay small enough for the search to finish within the default budget,
    // whether the history is linearizable or has one stale read near its end.
    let (history, _) = realistic_history(100_000, 1, 12, 1, 5);
    let start = Instant::now();
    let report = check_linearizable(&history, Budget::default());
    eprintln!("100 000 ops on one key: {:?}\n{report}", start.elapsed());
    assert_eq!(report.verdict(), Verdict::Pass, "{report}");

    // A stale read near the end, as a server cut off from the leader would serve: a read
    // invoked after the write of version v returned sees version v - 1 and its value.
    let mut history = history;
    let written = |version: i32| {
        history.ops.iter().find(|op| {
            matches!(op.call, Call::Write { .. } | Call::Cas { .. })
                && op.outcome == Outcome::Ok(Ret::Written { version })
        })
    };
    let (target, stale) = history
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.id > 90_000 && op.call == Call::Read)
        .find_map(|(k, read)| {
            let Outcome::Ok(Ret::Read { version, .. }) = read.outcome else {
                return None;
            };
            let newest = written(version)?;
            let older = written(version - 1)?;
            let value = match older.call {
                Call::Write { value } | Call::Cas { value, .. } => value,
                Call::Read => unreachable!(),
            };
            (newest.complete_ns? < read.invoke_ns).then_some((k, (value, version - 1)))
        })
        .unwrap();
    history.ops[target].outcome = Outcome::Ok(Ret::Read {
        value: stale.0,
        version: stale.1,
    });
    let start = Instant::now();
    let report = check_linearizable(&history, Budget::default());
    eprintln!("with a stale read: {:?}\n{report}", start.elapsed());
    assert_eq!(report.verdict(), Verdict::Fail, "{report}");
    // Either the search refuted it, or it ran out of budget and the regression check named the
    // stale read and an op that returned a newer version before the read was invoked.
    let found_by_search = report.violations().count();
    let regressions: Vec<_> = report.regressions().collect();
    assert_eq!(found_by_search + regressions.len(), 1, "{report}");
    for r in regressions {
        assert_eq!(r.later.id, history.ops[target].id, "{report}");
        assert!(r.earlier.complete_ns.unwrap() < r.later.invoke_ns);
        assert!(r.earlier_version > r.later_version);
    }
}

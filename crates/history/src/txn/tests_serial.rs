//! Serial executions against a model store pass; a lost update injected into one is caught;
//! a history of 200 000 transactions is checked quickly.

use super::tests::{r, txn, w};
use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Instant;

/// SplitMix64: a small deterministic generator, so a seed names a history.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The shape of a generated history.
#[derive(Debug, Clone, Copy)]
struct Shape {
    txns: usize,
    keys: u64,
    ops_max: u64,
    abort_pct: u64,
    unknown_pct: u64,
}

/// A SconeKV-like store that runs one transaction at a time: each key has its version
/// (monotone, tombstones kept) and its value.
#[derive(Default)]
struct Model {
    keys: HashMap<String, (u64, Option<u64>)>,
}

impl Model {
    fn get(&self, key: &str) -> (u64, Option<u64>) {
        self.keys.get(key).copied().unwrap_or((0, None))
    }
}

/// Runs random transactions serially against the model. Aborted ones and half the Unknown
/// ones never install; the other Unknown ones do.
fn serial_history(seed: u64, shape: Shape) -> Vec<Txn> {
    let mut rng = Rng(seed);
    let mut model = Model::default();
    let mut next_value = 1u64;
    let mut history = Vec::with_capacity(shape.txns);
    for id in 0..shape.txns as u64 {
        let mut ops = Vec::new();
        // key → (version observed, buffered value; None = delete), once written
        let mut buffer: HashMap<String, (u64, Option<u64>)> = HashMap::new();
        for _ in 0..1 + rng.below(shape.ops_max) {
            let key = format!("k{}", rng.below(shape.keys));
            let (version, value) = model.get(&key);
            // A write keeps the version the transaction observed first (coalescing).
            let read_version = buffer.get(&key).map_or(version, |b| b.0);
            match rng.below(20) {
                0..=9 => {
                    if !buffer.contains_key(&key) {
                        ops.push(r(&key, version, value));
                    }
                }
                10..=16 => {
                    ops.push(w(&key, next_value, read_version));
                    buffer.insert(key, (read_version, Some(next_value)));
                    next_value += 1;
                }
                _ => {
                    ops.push(TxnOp::Delete {
                        key: key.clone(),
                        read_version,
                    });
                    buffer.insert(key, (read_version, None));
                }
            }
        }
        let roll = rng.below(100);
        let (status, install) = if roll < shape.abort_pct {
            (Status::Aborted, false)
        } else if roll < shape.abort_pct + shape.unknown_pct {
            (Status::Unknown, rng.below(2) == 0)
        } else {
            (Status::Committed, true)
        };
        if install {
            for (key, (read_version, value)) in buffer {
                assert_eq!(
                    model.get(&key).0,
                    read_version,
                    "serial: nothing intervened"
                );
                model.keys.insert(key, (read_version + 1, value));
            }
        }
        history.push(txn(id, status, ops));
    }
    history
}

fn shape() -> impl Strategy<Value = Shape> {
    (1usize..150, 1u64..8, 1u64..7, 0u64..40, 0u64..30).prop_map(
        |(txns, keys, ops_max, abort_pct, unknown_pct)| Shape {
            txns,
            keys,
            ops_max,
            abort_pct,
            unknown_pct,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn serial_executions_pass(seed in any::<u64>(), shape in shape()) {
        let history = serial_history(seed, shape);
        let report = check(&history);
        prop_assert!(report.ok(), "{}", report);
        let committed = history.iter().filter(|t| t.status == Status::Committed).count();
        prop_assert!(report.committed >= committed);
        prop_assert_eq!(report.committed + report.aborted + report.unknown, history.len());
    }

    #[test]
    fn an_injected_lost_update_is_caught(seed in any::<u64>(), shape in shape(), pick in any::<u64>()) {
        let mut history = serial_history(seed, shape);
        // Copy a committed write as a new committed transaction writing a fresh value on
        // top of the same version: two installers of one version.
        let writes: Vec<(String, u64)> = history
            .iter()
            .filter(|t| t.status == Status::Committed)
            .flat_map(|t| &t.ops)
            .filter_map(|op| match op {
                TxnOp::Write { key, read_version, .. } => Some((key.clone(), *read_version)),
                _ => None,
            })
            .collect();
        prop_assume!(!writes.is_empty());
        let (key, read_version) = writes[(pick % writes.len() as u64) as usize].clone();
        history.push(txn(u64::MAX, Status::Committed, vec![w(&key, u64::MAX, read_version)]));
        let report = check(&history);
        prop_assert!(
            report.of_kind(AnomalyKind::DuplicateVersion).any(|a| a.txns.contains(&u64::MAX)),
            "{}", report
        );
    }

    #[test]
    fn a_corrupted_read_is_caught(seed in any::<u64>(), shape in shape(), pick in any::<u64>()) {
        let mut history = serial_history(seed, shape);
        // Make one committed read of a written version return a value nobody wrote.
        let reads: Vec<(usize, usize)> = history
            .iter()
            .enumerate()
            .filter(|(_, t)| t.status == Status::Committed)
            .flat_map(|(i, t)| t.ops.iter().enumerate().map(move |(j, op)| (i, j, op)))
            .filter(|(_, _, op)| matches!(op, TxnOp::Read { version, .. } if *version > 0))
            .map(|(i, j, _)| (i, j))
            .collect();
        prop_assume!(!reads.is_empty());
        let (i, j) = reads[(pick % reads.len() as u64) as usize];
        if let TxnOp::Read { value, .. } = &mut history[i].ops[j] {
            *value = Some(u64::MAX);
        }
        let report = check(&history);
        prop_assert!(!report.ok());
        prop_assert!(report.anomalies.iter().all(|a| a.txns.contains(&history[i].id)), "{}", report);
    }
}

#[test]
fn two_hundred_thousand_transactions_check_quickly() {
    let shape = Shape {
        txns: 200_000,
        keys: 20_000,
        ops_max: 9, // 5 ops on average
        abort_pct: 10,
        unknown_pct: 5,
    };
    let history = serial_history(7, shape);
    let ops: usize = history.iter().map(|t| t.ops.len()).sum();
    let started = Instant::now();
    let report = check(&history);
    let elapsed = started.elapsed();
    eprintln!(
        "{} txns, {ops} ops: {} edges, checked in {elapsed:?}",
        history.len(),
        report.edges
    );
    assert!(report.ok(), "{report}");
    assert!(ops > 900_000);
    // Generous: the machine is shared; the check itself takes a fraction of this.
    assert!(elapsed.as_secs() < 10, "{elapsed:?}");
}

//! The end of a run: every transaction's outcome settled, the final reads, the history for the
//! serializability checker, and the direct checks (agreement, atomicity, liveness).

use super::clients::{key_name, value_of, Clients, ROp, Record};
use super::env::StoreView;
use super::KvReport;
use crate::txn::Outcome;
use std::collections::BTreeMap;

/// A transaction with its outcome settled: what its client heard or, if it heard nothing,
/// what its coordinator decided (a commit nobody applied never happened: aborted).
#[derive(Clone, Debug)]
pub struct Settled {
    pub rec: Record,
    pub outcome: Outcome,
    /// The ops with every blind write's version filled in (from the decision).
    pub ops: Vec<ROp>,
    /// When the outcome was fixed (the client heard it, or the coordinator decided it).
    pub complete_us: u64,
}

/// The final state of a key: its value and version at its bucket's master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Final {
    pub value: Option<u64>,
    pub version: u64,
}

/// Every bucket has finished its transactions and had its messages acknowledged.
pub fn settled(w: &impl StoreView) -> bool {
    (0..w.buckets()).all(|b| {
        w.bucket(b)
            .is_some_and(|b| b.in_progress() == (0, 0) && b.busy_keys() == 0 && b.unacked() == 0)
    })
}

/// Why the world did not settle.
pub fn unsettled(w: &impl StoreView) -> String {
    let busy: Vec<String> = (0..w.buckets())
        .filter_map(|b| {
            let Some(n) = w.bucket(b) else {
                return Some(format!("bucket {b}: no replica holds it"));
            };
            if n.in_progress() == (0, 0) && n.busy_keys() == 0 && n.unacked() == 0 {
                return None;
            }
            Some(format!(
                "bucket {b}: {:?} in progress (parts, coordinated), {} busy keys, {} unacked{}",
                n.in_progress(),
                n.busy_keys(),
                n.unacked(),
                if w.master_up(b) { "" } else { ", no master" }
            ))
        })
        .collect();
    format!(
        "not settled {} s after the clients finished: {}",
        w.now() / 1_000_000,
        if busy.is_empty() {
            "messages still in flight".to_string()
        } else {
            busy.join("; ")
        }
    )
}

/// Settle every record's outcome, checking the client and the coordinator agree.
pub fn settle(w: &impl StoreView, clients: &Clients, violations: &mut Vec<String>) -> Vec<Settled> {
    let end = w.now();
    clients
        .records
        .iter()
        .map(|r| {
            let decision = w.decision(&r.id);
            let d = decision.as_ref().map(|(d, _)| d);
            match (r.status, d) {
                (Some(s), Some(d)) if s != d.outcome => violations.push(format!(
                    "{}: its client was told {s:?}, its coordinator (bucket {}) decided {:?}",
                    r.id, r.coordinator, d.outcome
                )),
                (Some(s), None) => violations.push(format!(
                    "{}: its client was told {s:?}, its coordinator (bucket {}) never decided it",
                    r.id, r.coordinator
                )),
                _ => {}
            }
            let outcome = r
                .status
                .or(d.map(|d| d.outcome))
                .unwrap_or(Outcome::Aborted);
            let complete_us = if r.status.is_some() {
                r.end_us
            } else {
                decision.as_ref().map_or(end, |(_, at)| *at).max(r.end_us)
            };
            let ops = if outcome == Outcome::Committed {
                let versions = d.map_or(&r.versions, |d| &d.versions);
                with_versions(r, versions, violations)
            } else {
                // Nothing installed: a blind op's version is irrelevant.
                r.ops
                    .iter()
                    .map(|op| match *op {
                        ROp::Write {
                            key,
                            value,
                            read_version,
                        } => ROp::Write {
                            key,
                            value,
                            read_version: read_version.or(Some(0)),
                        },
                        ROp::Delete { key, read_version } => ROp::Delete {
                            key,
                            read_version: read_version.or(Some(0)),
                        },
                        ref op => op.clone(),
                    })
                    .collect()
            };
            Settled {
                rec: r.clone(),
                outcome,
                ops,
                complete_us,
            }
        })
        .collect()
}

/// A committed transaction's ops with every blind write's version filled in from the
/// decision's versions, which must agree with what the client observed.
fn with_versions(r: &Record, versions: &[u64], violations: &mut Vec<String>) -> Vec<ROp> {
    if versions.len() != r.order.len() {
        violations.push(format!(
            "{}: committed with {} versions reported for {} ops",
            r.id,
            versions.len(),
            r.order.len()
        ));
        return r.ops.clone();
    }
    let at: BTreeMap<u32, u64> = r
        .order
        .iter()
        .copied()
        .zip(versions.iter().copied())
        .collect();
    let mut ops = Vec::new();
    for op in &r.ops {
        let (key, rv) = match op {
            ROp::Read { .. } => {
                ops.push(op.clone());
                continue;
            }
            ROp::Write {
                key, read_version, ..
            }
            | ROp::Delete {
                key, read_version, ..
            } => (*key, *read_version),
        };
        let v = at[&key];
        if v == 0 || rv.is_some_and(|rv| rv + 1 != v) {
            violations.push(format!(
                "{}: the decision reports {}@{v}, the client wrote over version {rv:?}",
                r.id,
                key_name(key)
            ));
        }
        ops.push(match *op {
            ROp::Write { key, value, .. } => ROp::Write {
                key,
                value,
                read_version: Some(v.saturating_sub(1)),
            },
            _ => ROp::Delete {
                key,
                read_version: Some(v.saturating_sub(1)),
            },
        });
    }
    // A key the transaction only read ends at the version it read.
    for op in &r.ops {
        if let ROp::Read { key, version, .. } = op {
            let written = r.ops.iter().any(
                |o| matches!(o, ROp::Write { key: k, .. } | ROp::Delete { key: k, .. } if k == key),
            );
            if !written && at[key] != *version {
                violations.push(format!(
                    "{}: the decision reports {}@{}, the client read version {version}",
                    r.id,
                    key_name(*key),
                    at[key]
                ));
            }
        }
    }
    ops
}

/// Every key read at its bucket's master.
pub fn final_reads(w: &impl StoreView, clients: &Clients) -> BTreeMap<u32, Final> {
    let buckets: Vec<Option<crate::Bucket>> = (0..w.buckets()).map(|b| w.bucket(b)).collect();
    (0..clients.keys.len() as u32)
        .map(|k| {
            let b = clients.bucket(k);
            let (value, version) = buckets[b as usize]
                .as_ref()
                .map_or((None, 0), |b| b.read(&clients.keys[k as usize]));
            (
                k,
                Final {
                    value: value_of(&value),
                    version,
                },
            )
        })
        .collect()
}

/// Committed writes are installed exactly once: a key's versions are its committed writes and
/// deletes numbered 1, 2, … (each installs the version it validated plus one), and its final
/// value is the last one's.
pub fn atomicity(txns: &[Settled], finals: &BTreeMap<u32, Final>, violations: &mut Vec<String>) {
    let mut installs: BTreeMap<u32, BTreeMap<u64, (Option<u64>, &Settled)>> = BTreeMap::new();
    for t in txns.iter().filter(|t| t.outcome == Outcome::Committed) {
        for op in &t.ops {
            let (key, value, rv) = match *op {
                ROp::Write {
                    key,
                    value,
                    read_version,
                } => (key, Some(value), read_version.expect("settled")),
                ROp::Delete { key, read_version } => (key, None, read_version.expect("settled")),
                ROp::Read { .. } => continue,
            };
            if let Some((_, other)) = installs.entry(key).or_default().insert(rv + 1, (value, t)) {
                violations.push(format!(
                    "{}: version {} installed by both {} and {}",
                    key_name(key),
                    rv + 1,
                    other.rec.id,
                    t.rec.id
                ));
            }
        }
    }
    for (&k, f) in finals {
        let ins = installs.remove(&k).unwrap_or_default();
        let expect: Vec<u64> = (1..=f.version).collect();
        let got: Vec<u64> = ins.keys().copied().collect();
        if got != expect {
            let missing: Vec<String> = ins
                .iter()
                .filter(|(v, _)| **v > f.version)
                .map(|(v, (_, t))| {
                    format!(
                        "{} ({}-bucket, v{v})",
                        t.rec.id,
                        if t.rec.buckets > 1 { "multi" } else { "one" }
                    )
                })
                .collect();
            violations.push(format!(
                "{}: final version {} but committed installs of versions {:?}{}",
                key_name(k),
                f.version,
                got,
                if missing.is_empty() {
                    String::new()
                } else {
                    format!(" (not installed: {})", missing.join(", "))
                }
            ));
        } else if let Some((value, t)) = ins.get(&f.version) {
            if *value != f.value {
                violations.push(format!(
                    "{}: final value {:?}, but its last committed write ({}) wrote {:?}",
                    key_name(k),
                    f.value,
                    t.rec.id,
                    value
                ));
            }
        }
    }
}

/// Settle, read, check; the counts of the run.
pub fn check(w: &impl StoreView, clients: &Clients, stable_at: u64) -> KvReport {
    let mut violations = w.violations();
    // Only a retry of a transaction older than the retention may be refused ("too old"); its
    // client then never learns the outcome, by design.
    let mut too_old = std::collections::BTreeSet::new();
    for (id, at, why) in &clients.refused {
        if why.contains("too old") && id.time + w.retain_us() < *at {
            too_old.insert(*id);
        } else {
            violations.push(format!("{id} refused at {at} us: {why}"));
        }
    }
    let txns = settle(w, clients, &mut violations);
    for r in &clients.records {
        if r.status.is_none() && r.begin_us >= stable_at && !too_old.contains(&r.id) {
            violations.push(format!(
                "{}: begun at {} us, after the faults healed ({stable_at} us), and its client \
                 never learnt the outcome",
                r.id, r.begin_us
            ));
        }
    }
    if !settled(w) {
        // Already reported by the run loop if it gave up; otherwise it is news.
        let u = unsettled(w);
        if !violations.contains(&u) {
            violations.push(u);
        }
    }
    let finals = final_reads(w, clients);
    atomicity(&txns, &finals, &mut violations);
    let anomalies = super::history::anomalies(&txns, &finals, clients, w.now());
    let stats = w.stats();
    let mut r = KvReport {
        runs: 1,
        txns: txns.len() as u64,
        failovers: stats.failovers,
        restores: stats.restores,
        lost: stats.lost,
        duplicated: stats.duplicated,
        virtual_us: clients.records.iter().map(|r| r.end_us).max().unwrap_or(0),
        anomalies,
        violations,
        ..KvReport::default()
    };
    for b in (0..w.buckets()).filter_map(|b| w.bucket(b)) {
        let s = b.stats();
        r.reverts += s.reverts;
        r.fast_aborts += s.fast_aborts;
    }
    for t in &txns {
        let ops = t.ops.len() as u64;
        r.ops += ops;
        if t.rec.status.is_none() {
            r.unknown += 1;
        }
        match t.outcome {
            Outcome::Committed => {
                r.committed += 1;
                r.committed_ops += ops;
                if t.rec.buckets > 1 {
                    r.committed_multi += 1;
                }
            }
            Outcome::Aborted => r.aborted += 1,
        }
    }
    r
}

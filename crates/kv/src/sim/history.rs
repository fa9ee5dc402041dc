//! The run as a history for the transactional checker ([`synod_history::txn`]): every client
//! transaction with its outcome settled, and the final reads as one committed read-only
//! transaction per bucket.

use super::check::{Final, Settled};
use super::clients::{key_name, Clients, ROp};
use crate::txn::Outcome;
use std::collections::BTreeMap;
use synod_history::txn::{check, Status, Txn, TxnOp};

pub fn history(
    txns: &[Settled],
    finals: &BTreeMap<u32, Final>,
    clients: &Clients,
    end_us: u64,
) -> Vec<Txn> {
    let mut h: Vec<Txn> = txns
        .iter()
        .map(|t| Txn {
            id: t.rec.hid,
            status: match t.outcome {
                Outcome::Committed => Status::Committed,
                Outcome::Aborted => Status::Aborted,
            },
            ops: t
                .ops
                .iter()
                .map(|op| match *op {
                    ROp::Read {
                        key,
                        version,
                        value,
                    } => TxnOp::Read {
                        key: key_name(key),
                        version,
                        value,
                    },
                    ROp::Write {
                        key,
                        value,
                        read_version,
                    } => TxnOp::Write {
                        key: key_name(key),
                        value,
                        read_version: read_version.expect("settled"),
                    },
                    ROp::Delete { key, read_version } => TxnOp::Delete {
                        key: key_name(key),
                        read_version: read_version.expect("settled"),
                    },
                })
                .collect(),
            invoke_ns: t.rec.begin_us * 1_000,
            complete_ns: t.complete_us * 1_000,
        })
        .collect();
    let mut per_bucket: BTreeMap<u32, Vec<TxnOp>> = BTreeMap::new();
    for (&k, f) in finals {
        per_bucket
            .entry(clients.bucket(k))
            .or_default()
            .push(TxnOp::Read {
                key: key_name(k),
                version: f.version,
                value: f.value,
            });
    }
    for (b, ops) in per_bucket {
        h.push(Txn {
            id: u64::MAX - b as u64,
            status: Status::Committed,
            ops,
            invoke_ns: end_us * 1_000,
            complete_ns: end_us * 1_000,
        });
    }
    h
}

/// What the checker finds in the run's history, one line per anomaly.
pub fn anomalies(
    txns: &[Settled],
    finals: &BTreeMap<u32, Final>,
    clients: &Clients,
    end_us: u64,
) -> Vec<String> {
    let report = check(&history(txns, finals, clients, end_us));
    report.anomalies.iter().map(|a| a.to_string()).collect()
}

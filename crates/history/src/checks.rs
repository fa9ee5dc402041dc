//! The checks other than linearizability: well-formedness of the history, per-session zxid
//! monotonicity, and survival of acknowledged writes in the healed cluster.

use crate::history::{Call, FinalRead, FinalReads, History, Outcome, Ret};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// An anomaly found by [`check_well_formed`], [`check_zxid_monotonic`] or
/// [`check_acked_writes_survive`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Violation {
    /// The history itself is broken (a harness bug rather than a server bug).
    Malformed {
        /// The op's id.
        op: u64,
        /// What is wrong with it.
        problem: String,
    },
    /// A session saw a reply whose zxid is lower than that of a reply it had received earlier.
    ZxidDecreased {
        /// The session.
        session: i64,
        /// The op with the highest zxid among those that completed strictly earlier.
        earlier: u64,
        /// Its zxid.
        earlier_zxid: i64,
        /// The later op.
        later: u64,
        /// Its (lower) zxid.
        later_zxid: i64,
    },
    /// A key has acknowledged writes but no final read to check them against.
    MissingFinalRead {
        /// The key.
        key: String,
    },
    /// The servers do not agree on a key's final state.
    FinalReadsDisagree {
        /// The key.
        key: String,
        /// What each server returned.
        reads: Vec<FinalRead>,
    },
    /// A server's final state is older than a version that was acknowledged to a client (by a
    /// write or cas reply, or observed by a read), or than the key's initial version.
    AcknowledgedVersionLost {
        /// The key.
        key: String,
        /// The server whose final read is too old.
        node: u8,
        /// The version it returned.
        final_version: i32,
        /// The highest acknowledged version.
        acked_version: i32,
        /// The op that acknowledged it (`None`: the initial state).
        op: Option<u64>,
    },
    /// A server's final value is not the value written by the acknowledged write that produced
    /// its final version (or not the initial value, for the initial version).
    FinalValueMismatch {
        /// The key.
        key: String,
        /// The server.
        node: u8,
        /// The final version it returned.
        version: i32,
        /// The value it returned.
        final_value: i64,
        /// The value(s) the version was produced with.
        expected: Vec<i64>,
        /// The acknowledged op(s) that produced that version (empty: the initial state).
        ops: Vec<u64>,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Malformed { op, problem } => write!(f, "malformed op #{op}: {problem}"),
            Violation::ZxidDecreased {
                session,
                earlier,
                earlier_zxid,
                later,
                later_zxid,
            } => {
                write!(
                    f,
                    "session {session:#x}: zxid went backwards: op #{earlier} got zxid \
                     {earlier_zxid:#x}, then op #{later} got {later_zxid:#x}"
                )
            }
            Violation::MissingFinalRead { key } => {
                write!(f, "key {key:?} has acknowledged writes but no final read")
            }
            Violation::FinalReadsDisagree { key, reads } => {
                write!(f, "key {key:?}: servers disagree on the final state:")?;
                for r in reads {
                    write!(
                        f,
                        " node {}=(value={}, version={})",
                        r.node, r.value, r.version
                    )?;
                }
                Ok(())
            }
            Violation::AcknowledgedVersionLost {
                key,
                node,
                final_version,
                acked_version,
                op,
            } => {
                write!(
                    f,
                    "key {key:?}: node {node} ends at version {final_version}, but version \
                     {acked_version} was acknowledged"
                )?;
                match op {
                    Some(op) => write!(f, " by op #{op} (acknowledged write lost)"),
                    None => write!(f, " as the initial state"),
                }
            }
            Violation::FinalValueMismatch {
                key,
                node,
                version,
                final_value,
                expected,
                ops,
            } => {
                write!(
                    f,
                    "key {key:?}: node {node} ends with value {final_value} at version {version}, \
                     but that version was produced with value {expected:?}"
                )?;
                if ops.is_empty() {
                    write!(f, " (the initial state)")
                } else {
                    write!(f, " by op(s) {ops:?}")
                }
            }
        }
    }
}

/// Checks that the history is well formed: op ids are unique, replies fit their calls
/// (read → value and version, write → new version, cas → new version or BadVersion), an op with
/// a reply has a completion time, and no op completes before it is invoked.
///
/// The other checks cope with such histories conservatively (a reply that does not fit its call
/// is a linearizability violation; a missing or early completion time is taken as +infinity or
/// as the invocation time), but each of these is a harness bug worth fixing.
pub fn check_well_formed(history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for op in &history.ops {
        let count = seen.entry(op.id).or_default();
        *count += 1;
        if *count == 2 {
            out.push(Violation::Malformed {
                op: op.id,
                problem: "duplicate op id".into(),
            });
        }
        if let Outcome::Ok(ret) = &op.outcome {
            let fits = matches!(
                (op.call, ret),
                (Call::Read, Ret::Read { .. })
                    | (Call::Write { .. }, Ret::Written { .. })
                    | (Call::Cas { .. }, Ret::Written { .. } | Ret::BadVersion)
            );
            if !fits {
                let problem = format!("reply {ret} does not fit call {}", op.call);
                out.push(Violation::Malformed { op: op.id, problem });
            }
            if op.complete_ns.is_none() {
                let problem = "has a reply but no completion time".to_string();
                out.push(Violation::Malformed { op: op.id, problem });
            }
        }
        if let Some(c) = op.complete_ns {
            if c < op.invoke_ns && op.outcome != Outcome::Unknown {
                let problem = format!(
                    "completes at {c}, before its invocation at {}",
                    op.invoke_ns
                );
                out.push(Violation::Malformed { op: op.id, problem });
            }
        }
    }
    out
}

/// Checks that, in every session, the zxids in the reply headers of [`Outcome::Ok`] ops never
/// decrease in order of completion time. Ops without a zxid or a completion time are skipped;
/// ops of one session that complete at the same time are not ordered against each other.
pub fn check_zxid_monotonic(history: &History) -> Vec<Violation> {
    let mut sessions: BTreeMap<i64, Vec<(u64, i64, u64)>> = BTreeMap::new();
    for op in &history.ops {
        if let (Outcome::Ok(_), Some(c), Some(z)) = (op.outcome, op.complete_ns, op.zxid) {
            sessions.entry(op.session).or_default().push((c, z, op.id));
        }
    }
    let mut out = Vec::new();
    for (session, mut replies) in sessions {
        replies.sort_unstable();
        // The highest (zxid, op id) among replies that completed strictly earlier.
        let mut max_before: Option<(i64, u64)> = None;
        let mut group_start = 0;
        while group_start < replies.len() {
            let time = replies[group_start].0;
            let group_end = replies[group_start..]
                .iter()
                .position(|r| r.0 != time)
                .map_or(replies.len(), |k| group_start + k);
            let group = &replies[group_start..group_end];
            if let Some((earlier_zxid, earlier)) = max_before {
                for &(_, zxid, id) in group {
                    if zxid < earlier_zxid {
                        out.push(Violation::ZxidDecreased {
                            session,
                            earlier,
                            earlier_zxid,
                            later: id,
                            later_zxid: zxid,
                        });
                    }
                }
            }
            for &(_, zxid, id) in group {
                if max_before.is_none_or(|(z, _)| z < zxid) {
                    max_before = Some((zxid, id));
                }
            }
            group_start = group_end;
        }
    }
    out
}

/// Checks the final state of the healed cluster against the history: for every key in
/// `final_reads`, every server returned the same value and version; no server's version is
/// below the highest version acknowledged on that key (returned by an [`Outcome::Ok`]
/// write/cas, or observed by an `Ok` read — ZooKeeper only serves committed data) nor below the
/// initial version; and the final value is the value of the acknowledged write/cas that
/// produced the final version, if there is one in the history (or the initial value, if the
/// final version is the initial one).
///
/// A key with acknowledged writes and no (or an empty list of) final reads is reported as
/// [`Violation::MissingFinalRead`].
pub fn check_acked_writes_survive(history: &History, final_reads: &FinalReads) -> Vec<Violation> {
    // Per key: the highest acknowledged version and its op; the producers of each version.
    #[derive(Default)]
    struct KeyFacts {
        acked: Option<(i32, u64)>,
        has_acked_write: bool,
        producers: HashMap<i32, Vec<(i64, u64)>>,
    }
    let mut facts: BTreeMap<&str, KeyFacts> = BTreeMap::new();
    for op in &history.ops {
        let Outcome::Ok(ret) = op.outcome else {
            continue;
        };
        let f = facts.entry(op.key.as_str()).or_default();
        let acked_version = match (op.call, ret) {
            (Call::Read, Ret::Read { version, .. }) => version,
            (Call::Write { value } | Call::Cas { value, .. }, Ret::Written { version }) => {
                f.has_acked_write = true;
                f.producers.entry(version).or_default().push((value, op.id));
                version
            }
            _ => continue,
        };
        if f.acked.is_none_or(|(v, _)| v < acked_version) {
            f.acked = Some((acked_version, op.id));
        }
    }

    let mut out = Vec::new();
    let keys: BTreeSet<&str> = facts
        .keys()
        .copied()
        .chain(final_reads.keys().map(String::as_str))
        .collect();
    for key in keys {
        let reads = final_reads.get(key).map(Vec::as_slice).unwrap_or_default();
        let f = facts.get(key);
        if reads.is_empty() {
            if f.is_some_and(|f| f.has_acked_write) {
                out.push(Violation::MissingFinalRead {
                    key: key.to_string(),
                });
            }
            continue;
        }
        if reads
            .iter()
            .any(|r| (r.value, r.version) != (reads[0].value, reads[0].version))
        {
            out.push(Violation::FinalReadsDisagree {
                key: key.to_string(),
                reads: reads.to_vec(),
            });
        }
        let initial = history.initial_state(key);
        let (acked_version, acked_op) = match f.and_then(|f| f.acked) {
            Some((v, op)) if v > initial.version => (v, Some(op)),
            _ => (initial.version, None),
        };
        for r in reads {
            if r.version < acked_version {
                out.push(Violation::AcknowledgedVersionLost {
                    key: key.to_string(),
                    node: r.node,
                    final_version: r.version,
                    acked_version,
                    op: acked_op,
                });
            }
            let producers = f.and_then(|f| f.producers.get(&r.version));
            let (expected, ops): (Vec<i64>, Vec<u64>) = match producers {
                Some(p) => p.iter().copied().unzip(),
                None if r.version == initial.version => (vec![initial.value], vec![]),
                None => continue,
            };
            if !expected.contains(&r.value) {
                out.push(Violation::FinalValueMismatch {
                    key: key.to_string(),
                    node: r.node,
                    version: r.version,
                    final_value: r.value,
                    expected,
                    ops,
                });
            }
        }
    }
    out
}

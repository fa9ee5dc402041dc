//! From a history to a dependency graph: which transaction installed which `key@version`,
//! which transactions count as committed, what each read observed, and the structural
//! anomalies found on the way (DuplicateVersion, G1a, G1b, ValueMismatch, PhantomVersion).
//!
//! Everything is indexed by hash maps keyed by (interned key, version) or (key, value), so
//! the work is linear in the number of operations apart from sorting the installs.

use super::graph::{Edge, Graph};
use super::hash::FxMap;
use super::{Anomaly, AnomalyKind, DepKind, Status, Txn, TxnOp};

/// What an observation saw at its `key@version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// A read returned this value.
    Value(u64),
    /// A read returned nothing: absent (version 0) or a tombstone.
    Absent,
    /// A write or delete ran on top of this version (commit validated it); no value.
    Version,
}

/// One thing a transaction observed about the store.
#[derive(Debug, Clone, Copy)]
struct Observation {
    key: u32,
    version: u64,
    seen: Seen,
}

/// `txn` installs `key@version` holding `value` (`None`: a tombstone) if it commits.
#[derive(Debug, Clone, Copy)]
struct Install {
    key: u32,
    version: u64,
    txn: u32,
    value: Option<u64>,
}

/// The write that produced a value of a key.
#[derive(Debug, Clone, Copy)]
struct ValueWrite {
    txn: u32,
    /// The version it installs (or would install) if it is the transaction's last write of
    /// the key.
    version: u64,
    /// Overwritten later in the same transaction: never installed.
    intermediate: bool,
}

/// What [`resolve`] hands to the cycle search.
pub(super) struct Resolved {
    pub graph: Graph,
    /// The counted transactions (committed, or Unknown and observed), in history order.
    pub counted: Vec<u32>,
    /// `counted` as a flag per transaction.
    pub counted_flag: Vec<bool>,
    /// Interned key names.
    pub keys: Vec<String>,
    /// The structural anomalies.
    pub anomalies: Vec<Anomaly>,
}

/// The history's observations and installs, indexed.
struct Index<'a> {
    txns: &'a [Txn],
    keys: Vec<String>,
    /// Observations of transaction `t` are `observations[starts[t]..starts[t + 1]]`.
    observations: Vec<Observation>,
    starts: Vec<usize>,
    /// Installs sorted by (key, version, txn), and the range of each (key, version).
    installs: Vec<Install>,
    groups: FxMap<(u32, u64), (usize, usize)>,
    /// Highest version installed per key by a transaction that did not abort.
    version_max: Vec<u64>,
    /// The first write of each (key, value).
    values: FxMap<(u32, u64), ValueWrite>,
}

impl<'a> Index<'a> {
    fn build(txns: &'a [Txn]) -> Self {
        let mut ids: FxMap<String, u32> = FxMap::default();
        let mut keys: Vec<String> = Vec::new();
        let mut intern = |key: &str| -> u32 {
            if let Some(&id) = ids.get(key) {
                return id;
            }
            let id = u32::try_from(keys.len()).expect("fewer than 2^32 keys");
            ids.insert(key.to_string(), id);
            keys.push(key.to_string());
            id
        };
        let mut observations = Vec::new();
        let mut starts = Vec::with_capacity(txns.len() + 1);
        let mut installs = Vec::new();
        let mut values = FxMap::default();
        // Per transaction: (key, index of its first write, index of its last write). A
        // transaction has a handful of keys: a list beats a map.
        let mut written: Vec<(u32, usize, usize)> = Vec::new();
        let mut op_keys: Vec<u32> = Vec::new();

        for (t, txn) in txns.iter().enumerate() {
            starts.push(observations.len());
            written.clear();
            op_keys.clear();
            for (i, op) in txn.ops.iter().enumerate() {
                let key = intern(op_key(op));
                op_keys.push(key);
                if !matches!(op, TxnOp::Read { .. }) {
                    match written.iter_mut().find(|(k, _, _)| *k == key) {
                        Some(entry) => entry.2 = i,
                        None => written.push((key, i, i)),
                    }
                }
            }
            for (i, op) in txn.ops.iter().enumerate() {
                let key = op_keys[i];
                let writes = written
                    .iter()
                    .find(|(k, _, _)| *k == key)
                    .map(|&(_, first, last)| (first, last));
                match *op {
                    TxnOp::Read { version, value, .. } => {
                        if writes.is_some_and(|(first, _)| first < i) {
                            continue; // served from the transaction's own buffer
                        }
                        let seen = value.map_or(Seen::Absent, Seen::Value);
                        observations.push(Observation { key, version, seen });
                    }
                    TxnOp::Write {
                        value,
                        read_version,
                        ..
                    } => {
                        let version = read_version.saturating_add(1);
                        let installed = writes.is_some_and(|(_, last)| last == i);
                        let write = ValueWrite {
                            txn: t as u32,
                            version,
                            intermediate: !installed,
                        };
                        values.entry((key, value)).or_insert(write);
                        observations.push(Observation {
                            key,
                            version: read_version,
                            seen: Seen::Version,
                        });
                        if installed {
                            installs.push(Install {
                                key,
                                version,
                                txn: t as u32,
                                value: Some(value),
                            });
                        }
                    }
                    TxnOp::Delete { read_version, .. } => {
                        observations.push(Observation {
                            key,
                            version: read_version,
                            seen: Seen::Version,
                        });
                        if writes.is_some_and(|(_, last)| last == i) {
                            installs.push(Install {
                                key,
                                version: read_version.saturating_add(1),
                                txn: t as u32,
                                value: None,
                            });
                        }
                    }
                }
            }
        }
        starts.push(observations.len());

        installs.sort_unstable_by_key(|i| (i.key, i.version, i.txn));
        let mut groups = FxMap::default();
        let mut version_max = vec![0; keys.len()];
        let mut start = 0;
        for i in 1..=installs.len() {
            let (a, b) = (&installs[start], installs.get(i));
            if b.is_some_and(|b| (b.key, b.version) == (a.key, a.version)) {
                continue;
            }
            groups.insert((a.key, a.version), (start, i));
            for install in &installs[start..i] {
                if txns[install.txn as usize].status != Status::Aborted {
                    let max = &mut version_max[install.key as usize];
                    *max = (*max).max(install.version);
                }
            }
            start = i;
        }
        Index {
            txns,
            keys,
            observations,
            starts,
            installs,
            groups,
            version_max,
            values,
        }
    }

    fn observations_of(&self, t: u32) -> &[Observation] {
        &self.observations[self.starts[t as usize]..self.starts[t as usize + 1]]
    }

    /// Every install of `key@version`, whatever its transaction's status.
    fn installs_of(&self, key: u32, version: u64) -> &[Install] {
        match self.groups.get(&(key, version)) {
            Some(&(start, end)) => &self.installs[start..end],
            None => &[],
        }
    }

    fn status(&self, t: u32) -> Status {
        self.txns[t as usize].status
    }

    fn id(&self, t: u32) -> u64 {
        self.txns[t as usize].id
    }

    /// `key@version` as text, with the value a read saw.
    fn describe(&self, key: u32, version: u64, seen: Seen) -> String {
        let key = &self.keys[key as usize];
        match seen {
            Seen::Value(value) => format!("{key}@{version} = {value}"),
            Seen::Absent => format!("{key}@{version} (absent)"),
            Seen::Version => format!("{key}@{version}"),
        }
    }
}

fn op_key(op: &TxnOp) -> &str {
    match op {
        TxnOp::Read { key, .. } | TxnOp::Write { key, .. } | TxnOp::Delete { key, .. } => key,
    }
}

/// Whether an install could be what an observation saw.
fn fits(install: &Install, seen: Seen) -> bool {
    match seen {
        Seen::Value(value) => install.value == Some(value),
        Seen::Absent => install.value.is_none(),
        Seen::Version => true,
    }
}

/// Which transactions count: the committed ones, then, to a fixed point, every Unknown one
/// that is the only possible installer of something a counted transaction observed.
fn counted(index: &Index<'_>) -> Vec<bool> {
    let txns = index.txns;
    let mut flag: Vec<bool> = txns.iter().map(|t| t.status == Status::Committed).collect();
    let mut queue: Vec<u32> = (0..txns.len() as u32)
        .filter(|&t| flag[t as usize])
        .collect();
    while let Some(t) = queue.pop() {
        for observation in index.observations_of(t) {
            if observation.version == 0 {
                continue;
            }
            let mut candidates = index
                .installs_of(observation.key, observation.version)
                .iter()
                .filter(|i| index.status(i.txn) != Status::Aborted && fits(i, observation.seen));
            let (Some(only), None) = (candidates.next(), candidates.next()) else {
                continue; // no installer recorded, or ambiguous (then a counted one may be it)
            };
            if !flag[only.txn as usize] {
                flag[only.txn as usize] = true;
                queue.push(only.txn);
            }
        }
    }
    flag
}

/// Indexes the history, decides which transactions count, builds the dependency graph and
/// finds the structural anomalies.
pub(super) fn resolve(txns: &[Txn]) -> Resolved {
    let index = Index::build(txns);
    let flag = counted(&index);
    let counted: Vec<u32> = (0..txns.len() as u32)
        .filter(|&t| flag[t as usize])
        .collect();
    let mut graph = Graph::new(txns.len());
    let mut anomalies = Vec::new();

    // Installs: lost updates, and ww edges from the installer of the version before.
    let mut start = 0;
    while start < index.installs.len() {
        let (key, version) = (index.installs[start].key, index.installs[start].version);
        let end = index.groups[&(key, version)].1;
        let here: Vec<&Install> = index.installs[start..end]
            .iter()
            .filter(|i| flag[i.txn as usize])
            .collect();
        start = end;
        if here.len() > 1 {
            anomalies.push(duplicate(&index, key, version, &here));
        }
        if here.is_empty() || version < 2 {
            continue;
        }
        for before in index.installs_of(key, version - 1) {
            if !flag[before.txn as usize] {
                continue;
            }
            for install in &here {
                graph.add(
                    before.txn,
                    Edge {
                        to: install.txn,
                        kind: DepKind::Ww,
                        key,
                        version: version - 1,
                    },
                );
            }
        }
    }

    // Observations: rw edges to the installer of the next version; wr edges from the
    // installer of the version read, or an anomaly when the read fits no installer.
    for &t in &counted {
        for &observation in index.observations_of(t) {
            let Observation { key, version, seen } = observation;
            for next in index.installs_of(key, version.saturating_add(1)) {
                if flag[next.txn as usize] && next.txn != t {
                    let edge = Edge {
                        to: next.txn,
                        kind: DepKind::Rw,
                        key,
                        version,
                    };
                    graph.add(t, edge);
                }
            }
            if seen == Seen::Version {
                continue; // the ww edge covers it; a version nobody recorded is a gap
            }
            let mut fitted = false;
            for install in index.installs_of(key, version) {
                if flag[install.txn as usize] && fits(install, seen) && install.txn != t {
                    fitted = true;
                    let edge = Edge {
                        to: t,
                        kind: DepKind::Wr,
                        key,
                        version,
                    };
                    graph.add(install.txn, edge);
                }
            }
            let initial = version == 0 && seen == Seen::Absent;
            if !fitted && !initial {
                anomalies.extend(unfitted_read(&index, &flag, t, observation));
            }
        }
    }
    graph.finish();
    Resolved {
        graph,
        counted,
        counted_flag: flag,
        keys: index.keys,
        anomalies,
    }
}

fn duplicate(index: &Index<'_>, key: u32, version: u64, here: &[&Install]) -> Anomaly {
    let txns: Vec<u64> = here.iter().map(|i| index.id(i.txn)).collect();
    let names: Vec<String> = txns.iter().map(|id| format!("T{id}")).collect();
    let key_name = &index.keys[key as usize];
    Anomaly {
        kind: AnomalyKind::DuplicateVersion,
        explanation: format!(
            "{} {} installed {key_name}@{version}: commit validated more than one writer \
             against {key_name}@{} (a lost update, or versions that went back)",
            names.join(", "),
            if names.len() == 2 { "both" } else { "all" },
            version - 1
        ),
        txns,
        cycle: Vec::new(),
    }
}

/// The anomaly, if any, of a read by counted transaction `t` that no counted installer of
/// its version fits.
fn unfitted_read(index: &Index<'_>, flag: &[bool], t: u32, read: Observation) -> Option<Anomaly> {
    let Observation { key, version, seen } = read;
    let reader = index.id(t);
    let what = index.describe(key, version, seen);
    let group = index.installs_of(key, version);
    let installer = group.iter().find(|i| flag[i.txn as usize]);
    let (kind, txns, explanation) = match seen {
        Seen::Value(value) => match index.values.get(&(key, value)) {
            Some(w) if index.status(w.txn) == Status::Aborted => (
                AnomalyKind::G1a,
                vec![reader, index.id(w.txn)],
                format!(
                    "T{reader} read {what}, written by T{}, which aborted",
                    index.id(w.txn)
                ),
            ),
            Some(w) if w.intermediate => (
                AnomalyKind::G1b,
                vec![reader, index.id(w.txn)],
                format!(
                    "T{reader} read {what}, an intermediate value: T{} wrote it, then \
                     overwrote it in the same transaction",
                    index.id(w.txn)
                ),
            ),
            // Installed at this version by an Unknown transaction that could not be told
            // apart from another: not counted, nothing to say.
            Some(w) if w.version == version => return None,
            Some(w) => (
                AnomalyKind::ValueMismatch,
                vec![reader, index.id(w.txn)],
                format!(
                    "T{reader} read {what}, but T{} installed that value at version {}",
                    index.id(w.txn),
                    w.version
                ),
            ),
            None => {
                let installed = match installer {
                    Some(i) => format!(" (T{} installed that version)", index.id(i.txn)),
                    None => String::new(),
                };
                (
                    AnomalyKind::G1a,
                    vec![reader],
                    format!("T{reader} read {what}, a value no transaction wrote{installed}"),
                )
            }
        },
        Seen::Absent => {
            let tombstone =
                |i: &&Install| i.value.is_none() && index.status(i.txn) != Status::Aborted;
            if let Some(i) = installer {
                value_mismatch(index, reader, &what, i)
            } else if group.iter().any(|i| tombstone(&i)) {
                return None; // Unknown installers not told apart
            } else if let Some(i) = group
                .iter()
                .find(|i| index.status(i.txn) == Status::Aborted && i.value.is_none())
            {
                (
                    AnomalyKind::G1a,
                    vec![reader, index.id(i.txn)],
                    format!(
                        "T{reader} read {what}, a tombstone only T{} installed, which aborted",
                        index.id(i.txn)
                    ),
                )
            } else if group.is_empty() && version > index.version_max[key as usize] {
                (
                    AnomalyKind::PhantomVersion,
                    vec![reader],
                    format!(
                        "T{reader} read {what}, but no transaction installed {} at a version \
                         above {}",
                        index.keys[key as usize], index.version_max[key as usize]
                    ),
                )
            } else {
                return None; // a gap
            }
        }
        Seen::Version => return None,
    };
    Some(Anomaly {
        kind,
        txns,
        cycle: Vec::new(),
        explanation,
    })
}

fn value_mismatch(
    index: &Index<'_>,
    reader: u64,
    what: &str,
    installer: &Install,
) -> (AnomalyKind, Vec<u64>, String) {
    let writer = index.id(installer.txn);
    let installed = match installer.value {
        Some(value) => format!("= {value}"),
        None => "a tombstone".to_string(),
    };
    (
        AnomalyKind::ValueMismatch,
        vec![reader, writer],
        format!("T{reader} read {what}, but T{writer} installed that version {installed}"),
    )
}

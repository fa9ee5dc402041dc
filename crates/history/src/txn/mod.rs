//! A transactional history checker in the style of Elle, for SconeKV's versioned keys
//! (the store's consistency model: J. Gonçalves, *SconeKV: Strongly CONSistEnt Key-Value
//! Store*, M.Sc. thesis, IST, 2020, §3.3–3.4; docs/references.md). Below, §n is a section of
//! the project's research notes on that thesis (`sconekv.md`, kept with the source documents,
//! not in this repository): §4 its consistency model, §11 the points an implementation must get
//! right.
//!
//! # The model
//!
//! Keys are strings. Every key has a version: 0 while it was never written, then one more on
//! every committed write *or delete* of that key. Versions never reset: a delete installs a
//! tombstone with the next version (§11.9, the fix for the ABA problem). Test clients write
//! each value at most once per key, so a value names the write that produced it.
//!
//! A history is a list of [`Txn`]s, each [`Status::Committed`], [`Status::Aborted`] or
//! [`Status::Unknown`] (the commit outcome is indeterminate, e.g. it timed out). Its ops
//! ([`TxnOp`]) are what the client saw while it ran:
//!
//! * `Read { key, version, value }`: the store returned `key@version` with this value (`None`
//!   for a key never written or deleted: absent);
//! * `Write { key, value, read_version }`, `Delete { key, read_version }`: a buffered write;
//!   SconeKV fetches the current version when the op runs, and commits only if the key is
//!   still at `read_version`, installing `read_version + 1` (a tombstone for a delete).
//!
//! **Reads served from the client's buffer are not recorded.** Once a transaction wrote or
//! deleted a key, later reads of that key return its own buffered value (read-your-writes)
//! and say nothing about the store; the checker skips any read that follows the
//! transaction's own write of the same key. If a transaction writes a key twice, only the
//! last write is installed; the earlier values are *intermediate* and nobody may read them.
//!
//! **Which transactions count.** Committed ones. An Unknown transaction counts as committed
//! when a counted transaction *observed* it: read a value it installed, or read or wrote on
//! top of a version that only it installed (the store validated that version, so its
//! installer committed). This is applied to a fixed point. An Unknown transaction nobody
//! observed is dropped: it may never have committed, and nothing depends on it. When two
//! Unknown transactions claim the same version and the observation does not tell them apart
//! (a version without a value), neither is counted: the checker then knows less (fewer
//! edges) but never reports a false anomaly. Aborted transactions install nothing, and their
//! reads are not checked (SconeKV gives no isolation before commit, §4).
//!
//! # Dependencies
//!
//! Versions are explicit, so the version order of each key is exact: the transaction that
//! installed `k@v+1` directly follows the one that installed `k@v`. Between counted
//! transactions:
//!
//! * **ww**: T1 installed `k@v`, T2 installed `k@v+1`: T1 →ww T2;
//! * **wr**: T1 installed `k@v`, T2 read `k@v`: T1 →wr T2;
//! * **rw** (anti-dependency): T1 read `k@v` (or wrote on top of it), T2 installed `k@v+1`,
//!   T1 ≠ T2: T1 →rw T2.
//!
//! Version 0 is the initial state, written by nobody. In a serializable history this graph
//! is acyclic: any serial order must put each transaction after its predecessors. Edges are
//! labelled with the key and the version both ends are about: the one `from` installed or
//! read, and `to` read or overwrote (`T3 -ww(k@4)-> T7`: T3 installed k@4, T7 installed k@5).
//!
//! # Anomalies ([`AnomalyKind`])
//!
//! Adya's phenomena, as Elle finds them:
//!
//! * **G0** (write cycle): a cycle of ww edges only. Writes of different transactions
//!   interleave, so no order of whole transactions produced the final versions.
//! * **G1a** (aborted read): a counted transaction read a value, or a tombstone at a
//!   version, that only an aborted transaction wrote; or a value no transaction wrote at all
//!   (whatever the version, 0 included).
//! * **G1b** (intermediate read): it read a value that its writer overwrote later in the
//!   same transaction (only the last write of a key is installed).
//! * **G1c** (circular information flow): a cycle of ww and wr edges with at least one wr.
//! * **G-single** (read skew, write skew): a cycle with exactly one rw edge.
//! * **G2** (anti-dependency cycle): a cycle with two or more rw edges.
//!
//! and the structural errors that explicit versions make visible:
//!
//! * **DuplicateVersion**: two counted transactions installed the same `k@v`: validation let
//!   two writers through on the same read version (a lost update; also what a store that
//!   resets versions on delete produces, §11.9).
//! * **ValueMismatch**: a read's value is not what the installer of that version wrote: the
//!   value was installed, but at another version; or the read saw absent where a value was
//!   installed, or the reverse.
//! * **PhantomVersion**: a read of a tombstone at a version above every version any recorded
//!   transaction installed for that key. A version *gap* below the highest installed version
//!   is tolerated: its writer may be an Unknown transaction the checker could not identify,
//!   or one the harness never recorded.
//!
//! # How cycles are found
//!
//! The graph's strongly connected components are computed with an iterative Tarjan (no
//! recursion: histories have 10^5 transactions). Each non-trivial component holds at least
//! one cycle, and one anomaly is reported per component, of the most severe class it
//! contains: the checker looks for a ww-only cycle (G0), then a ww+wr cycle (G1c), then a
//! cycle with a single rw edge (G-single, under a work budget, see `graph.rs`), then any
//! cycle (G2). Each is a short cycle found by breadth-first search, printed with its edges.

mod graph;
mod hash;
mod resolve;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_serial;

use serde::{Deserialize, Serialize};
use std::fmt;

/// The commit outcome of a transaction, as its client learned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The store acknowledged the commit.
    Committed,
    /// The store refused the commit, or the client aborted: nothing was installed.
    Aborted,
    /// The outcome is indeterminate (a timeout, a crash): it may or may not have committed.
    Unknown,
}

/// One operation of a transaction, as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TxnOp {
    /// The store returned `key@version` holding `value` (`None`: absent or a tombstone).
    /// Reads served from the transaction's own write buffer are not recorded.
    Read {
        /// The key read.
        key: String,
        /// The version the store returned.
        version: u64,
        /// The value at that version; `None` for absent (version 0) or a tombstone.
        value: Option<u64>,
    },
    /// A buffered write; if the transaction commits it installs `key@read_version+1`.
    Write {
        /// The key written.
        key: String,
        /// The value written (unique per key in the workload).
        value: u64,
        /// The version the store returned when the write ran; commit validates it.
        read_version: u64,
    },
    /// A buffered delete; if the transaction commits it installs a tombstone at
    /// `key@read_version+1`.
    Delete {
        /// The key deleted.
        key: String,
        /// The version the store returned when the delete ran; commit validates it.
        read_version: u64,
    },
}

/// One transaction of a history.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Txn {
    /// Unique in the history.
    pub id: u64,
    /// Its commit outcome.
    pub status: Status,
    /// Its operations in program order.
    pub ops: Vec<TxnOp>,
    /// When the client began it (not used by the checker: SconeKV claims serializability,
    /// not strict serializability).
    #[serde(default)]
    pub invoke_ns: u64,
    /// When the client learned its outcome.
    #[serde(default)]
    pub complete_ns: u64,
}

/// The kind of a dependency edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepKind {
    /// Write-write: `to` installed the version after the one `from` installed.
    Ww,
    /// Write-read: `to` read the version `from` installed.
    Wr,
    /// Read-write (anti-dependency): `to` installed the version after the one `from` read.
    Rw,
}

impl DepKind {
    fn name(self) -> &'static str {
        match self {
            DepKind::Ww => "ww",
            DepKind::Wr => "wr",
            DepKind::Rw => "rw",
        }
    }
}

/// One edge of a reported cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dep {
    /// The id of the transaction that must come first.
    pub from: u64,
    /// The id of the transaction that must come after it.
    pub to: u64,
    /// Why.
    pub kind: DepKind,
    /// The key both ends touched.
    pub key: String,
    /// The version both ends are about: the one `from` installed (ww, wr) or read (rw).
    pub version: u64,
}

/// The kinds of anomaly the checker reports (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AnomalyKind {
    /// Two counted transactions installed the same `key@version` (a lost update).
    DuplicateVersion,
    /// A read of a value only an aborted transaction wrote, or that nobody wrote.
    G1a,
    /// A read of a value its writer overwrote later in the same transaction.
    G1b,
    /// A read whose value is not the one installed at that version.
    ValueMismatch,
    /// A read of a version above every version installed for that key.
    PhantomVersion,
    /// A cycle of ww edges.
    G0,
    /// A cycle of ww and wr edges, at least one wr.
    G1c,
    /// A cycle with exactly one rw edge.
    GSingle,
    /// A cycle with two or more rw edges.
    G2,
}

impl AnomalyKind {
    /// The name used in reports (`G-single` rather than `GSingle`).
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::DuplicateVersion => "DuplicateVersion",
            AnomalyKind::G1a => "G1a",
            AnomalyKind::G1b => "G1b",
            AnomalyKind::ValueMismatch => "ValueMismatch",
            AnomalyKind::PhantomVersion => "PhantomVersion",
            AnomalyKind::G0 => "G0",
            AnomalyKind::G1c => "G1c",
            AnomalyKind::GSingle => "G-single",
            AnomalyKind::G2 => "G2",
        }
    }

    /// Whether this kind is a dependency cycle (its [`Anomaly::cycle`] is not empty).
    pub fn is_cycle(self) -> bool {
        matches!(
            self,
            AnomalyKind::G0 | AnomalyKind::G1c | AnomalyKind::GSingle | AnomalyKind::G2
        )
    }
}

/// One anomaly found in a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    /// What kind.
    pub kind: AnomalyKind,
    /// The ids of the transactions involved: for a cycle, in cycle order; otherwise the
    /// reader first (if any), then the writers.
    pub txns: Vec<u64>,
    /// For a cycle, its edges in order (the last one returns to the first transaction);
    /// empty otherwise.
    pub cycle: Vec<Dep>,
    /// A sentence for a human.
    pub explanation: String,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.explanation)
    }
}

/// Writes a cycle as `T3 -ww(k@4)-> T7 -rw(x@2)-> T3`.
pub fn format_cycle(cycle: &[Dep]) -> String {
    let mut out = String::new();
    for (i, dep) in cycle.iter().enumerate() {
        if i == 0 {
            out.push_str(&format!("T{}", dep.from));
        }
        out.push_str(&format!(
            " -{}({}@{})-> T{}",
            dep.kind.name(),
            dep.key,
            dep.version,
            dep.to
        ));
    }
    out
}

/// The result of [`check`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Everything found: duplicate versions (by key and version), then the other structural
    /// errors (in history order), then one cycle per cyclic strongly connected component.
    pub anomalies: Vec<Anomaly>,
    /// Transactions counted as committed: the committed ones plus the observed Unknown ones.
    pub committed: usize,
    /// Aborted transactions.
    pub aborted: usize,
    /// Unknown transactions nobody observed (dropped).
    pub unknown: usize,
    /// Distinct dependency edges (`from`, `to`, kind) in the graph.
    pub edges: usize,
}

impl Report {
    /// Whether no anomaly was found.
    pub fn ok(&self) -> bool {
        self.anomalies.is_empty()
    }

    /// The anomalies of one kind.
    pub fn of_kind(&self, kind: AnomalyKind) -> impl Iterator<Item = &Anomaly> {
        self.anomalies.iter().filter(move |a| a.kind == kind)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.ok() { "PASS" } else { "FAIL" };
        writeln!(
            f,
            "transactional check: {verdict} ({} committed, {} aborted, {} unknown dropped, {} edges, {} anomalies)",
            self.committed,
            self.aborted,
            self.unknown,
            self.edges,
            self.anomalies.len()
        )?;
        for anomaly in &self.anomalies {
            writeln!(f, "  - {anomaly}")?;
        }
        Ok(())
    }
}

/// Checks a history of SconeKV transactions for serializability (see the module docs).
///
/// Runs in O(n log n) in the number of operations, plus a bounded search per cyclic
/// component; transaction ids are only used for reporting.
pub fn check(txns: &[Txn]) -> Report {
    assert!(
        u32::try_from(txns.len()).is_ok(),
        "a history holds fewer than 2^32 transactions"
    );
    let resolved = resolve::resolve(txns);
    let ids: Vec<u64> = txns.iter().map(|t| t.id).collect();
    let mut anomalies = resolved.anomalies;
    anomalies.extend(graph::cycles(
        &resolved.graph,
        &resolved.counted,
        &ids,
        &resolved.keys,
    ));
    let unknown = txns
        .iter()
        .zip(&resolved.counted_flag)
        .filter(|(t, counted)| t.status == Status::Unknown && !**counted)
        .count();
    Report {
        anomalies,
        committed: resolved.counted.len(),
        aborted: txns.iter().filter(|t| t.status == Status::Aborted).count(),
        unknown,
        edges: resolved.graph.edge_count(),
    }
}

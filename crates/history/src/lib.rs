//! Histories of client operations on ZooKeeper znodes, and checkers for them.
//!
//! A chaos harness records every operation its clients perform as an [`Op`] in a [`History`]
//! (JSON-serialisable), reads the final state from every server once the cluster has healed
//! ([`FinalReads`]), and hands both to [`check_all`], whose [`Report`] says whether the run was
//! correct and, if not, names each anomaly.
//!
//! # The model
//!
//! Each key is a znode with state `(value: i64, version: i32)` ([`ZnodeState`]), initially
//! [`History::initial`] or `(0, 0)`. A [`Call::Read`] returns the state; a [`Call::Write`]
//! (`setData` with version -1) sets the value, bumps the version and returns the new version; a
//! [`Call::Cas`] does the same if the version equals its expected version and otherwise returns
//! `BadVersion` (itself an observation: the version was not the expected one at that moment).
//! See [`ZnodeState::apply`].
//!
//! # Linearizability ([`check_linearizable`])
//!
//! The register is checked key by key: linearizability is compositional (a history is
//! linearizable iff its restriction to every object is), so each key is an independent, smaller
//! problem. For each key the checker runs the Wing & Gong search with Lowe's memoisation, as in
//! Porcupine: the call and return events of the key's operations form a doubly linked list
//! sorted by time; a depth-first search walks it from the front, *lifting* a call (and its
//! return) out of the list when the op can be linearized next — its reply is what the model
//! gives in the current state — and pushing it on a stack; reaching a return event means that
//! op should already have been linearized, so the search backtracks (*unlifts* the top of the
//! stack) and tries the next candidate. Every configuration (set of linearized ops as a bitset,
//! model state) is cached, and a configuration seen before is not explored again. The bitset
//! keeps a Zobrist hash (XOR of a random word per member) up to date in O(1), so hashing a
//! configuration does not cost O(n).
//!
//! **Tie rule.** At equal timestamps, call events sort before return events: an op that returns
//! at `t` and an op invoked at `t` are treated as *concurrent*, never as ordered. This only ever
//! allows more linearizations, so a tie can never produce a false violation (it can at worst
//! hide a real one that depends on that exact nanosecond). Op A precedes op B in real time
//! exactly when `A.complete_ns < B.invoke_ns`.
//!
//! **Indeterminate ops** ([`Outcome::Unknown`]) have no return event (their completion is at
//! +infinity, whatever `complete_ns` says) and their result is unconstrained. Unknown reads are
//! dropped, as are [`Outcome::Failed`] ops of any kind. An unknown write or cas is *optional*:
//! the search may linearize it at any point after its invocation, or never — leaving it out is
//! equivalent to linearizing it after every other op, where nothing observes it. Hence the
//! search succeeds as soon as every op with a known reply is linearized, and it only tries an
//! indeterminate op where it takes effect (a cas whose expected version does not match would
//! change nothing). An `Ok` op without a completion time is treated as completing at +infinity
//! (its reply still constrains it).
//!
//! **Pruning.** Crashed clients leave indeterminate writes pending until the end of the
//! history, and a naive search tries every subset of them at every point: exponential. The
//! search therefore uses facts that hold in *every* valid linearization of this model, so they
//! never change the verdict (the property tests compare the checker with a brute-force one):
//! versions never decrease and each version above the initial one is produced by exactly one
//! successful write. So no op is linearized where it would take the version past one that a
//! not-yet-linearized op with a known reply needs to see (a read's version, a write's new
//! version minus one); an indeterminate op never produces a version that an acknowledged
//! write/cas reported as its own, nor one that acknowledged reads saw with a different value;
//! and an indeterminate op whose value no other op writes, and that reads saw at some versions,
//! can only have produced one of those. (Versions wrapping around after 2^31 writes to one
//! znode are not modelled.)
//!
//! **Forced ops.** An op with a known reply that leaves the state unchanged (a read, a cas
//! refused with `BadVersion`) and fits the current state is linearized at once, and no other
//! op is tried in its place: if any linearization exists from there, one starts with it (see
//! `Search::forced` for the argument). Otherwise a dozen concurrent reads of one version would
//! make every subset of them a configuration of its own.
//!
//! **Compact configurations.** The search never passes a return whose op is not linearized,
//! so the linearized ops are all those with a reply up to some point in return order, plus a
//! few concurrent ones and the indeterminate ones taken as applied. The cache stores exactly
//! that (a watermark and a short list), so a configuration costs about a hundred bytes
//! whatever the length of the history, not a bit per op (8 KB each for the 63 000-op chaos
//! history that ran the memory budget out).
//!
//! **Budget.** The search is still exponential in the worst case, so it runs under a
//! [`Budget`]: steps and cache memory per key, and wall-clock time for the whole check. A key
//! whose search runs out is then given to a cheap necessary condition, the version regression
//! check ([`Regression`]: an op that returned before another was invoked but left a higher
//! version than the other found, in O(n log n)); if it proves a violation the key is
//! [`KeyResult::VersionRegression`], else [`KeyResult::Unknown`]: neither a violation nor
//! success is claimed without proof. (The search proves a violation deep in a long history
//! only after refuting every alternative before it, which can exceed the budget; a stale
//! read, the most likely bug, is exactly what the regression check catches at any depth.)
//!
//! **Diagnosis.** A non-linearizable key comes with a [`LinViolation`] describing the deepest
//! point the search reached: the longest linearizable prefix it found and the state after it,
//! the op whose reply arrived before it could be linearized, and the other ops pending at that
//! point, each with the reason it could not go next (its reply contradicts the state; it would
//! skip a version a later op needs, naming that op; it leads only to dead ends; or, for an
//! indeterminate op, it cannot take effect there).
//!
//! # Other checks
//!
//! * [`check_zxid_monotonic`]: per session, the zxids of replies never decrease in order of
//!   completion.
//! * [`check_acked_writes_survive`]: after healing, all servers agree on each key, no
//!   acknowledged version was lost, and the final value is the one written with the final
//!   version.
//! * [`check_well_formed`]: the history itself is consistent (unique ids, replies that fit
//!   their calls, sane times).
//!
//! # Transactions ([`txn`])
//!
//! [`txn::check`] is a separate, Elle-style checker for SconeKV's transactional key-value store:
//! a history of [`txn::Txn`]s (reads and buffered writes with explicit per-key versions) becomes
//! a ww/wr/rw dependency graph, whose cycles (G0, G1c, G-single, G2) and structural errors
//! (aborted and intermediate reads, duplicate versions, mismatched values) it reports.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bitset;
mod checks;
mod history;
mod linearizability;
pub mod txn;

pub use checks::{check_acked_writes_survive, check_well_formed, check_zxid_monotonic, Violation};
pub use history::{Call, FinalRead, FinalReads, History, Op, Outcome, Ret, ZnodeState};
pub use linearizability::{
    check_linearizable, Budget, BudgetExhausted, KeyReport, KeyResult, LinReport, LinViolation,
    PendingOp, PendingReason, Regression, Step, Verdict, PREFIX_TAIL,
};

use serde::Serialize;
use std::fmt;

/// The result of [`check_all`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Number of ops in the history.
    pub ops: usize,
    /// [`check_well_formed`]'s findings.
    pub well_formed: Vec<Violation>,
    /// [`check_linearizable`]'s report.
    pub linearizability: LinReport,
    /// [`check_zxid_monotonic`]'s findings.
    pub zxid: Vec<Violation>,
    /// [`check_acked_writes_survive`]'s findings; `None` if no final reads were given.
    pub durability: Option<Vec<Violation>>,
}

impl Report {
    /// `Fail` if any check found an anomaly; otherwise `Unknown` if linearizability could not
    /// be decided for some key within the budget; otherwise `Pass`.
    pub fn verdict(&self) -> Verdict {
        if self.violations().next().is_some() || self.linearizability.verdict() == Verdict::Fail {
            Verdict::Fail
        } else {
            self.linearizability.verdict()
        }
    }

    /// Whether the verdict is [`Verdict::Pass`].
    pub fn passed(&self) -> bool {
        self.verdict() == Verdict::Pass
    }

    /// Every [`Violation`] of the non-linearizability checks (see
    /// [`LinReport::violations`] for the linearizability ones).
    pub fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.well_formed
            .iter()
            .chain(&self.zxid)
            .chain(self.durability.iter().flatten())
    }
}

fn write_section(f: &mut fmt::Formatter<'_>, name: &str, found: &[Violation]) -> fmt::Result {
    if found.is_empty() {
        return writeln!(f, "{name}: PASS");
    }
    let plural = if found.len() == 1 {
        "anomaly"
    } else {
        "anomalies"
    };
    writeln!(f, "{name}: FAIL ({} {plural})", found.len())?;
    for v in found {
        writeln!(f, "  - {v}")?;
    }
    Ok(())
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "history check: {} ({} ops)", self.verdict(), self.ops)?;
        write_section(f, "well-formedness", &self.well_formed)?;
        write!(f, "{}", self.linearizability)?;
        write_section(f, "zxid monotonic per session", &self.zxid)?;
        match &self.durability {
            Some(found) => write_section(f, "acknowledged writes survive", found),
            None => writeln!(
                f,
                "acknowledged writes survive: not checked (no final reads)"
            ),
        }
    }
}

/// Runs every check: [`check_well_formed`], [`check_linearizable`] (within `budget`),
/// [`check_zxid_monotonic`] and, if `final_reads` is given, [`check_acked_writes_survive`].
pub fn check_all(history: &History, final_reads: Option<&FinalReads>, budget: Budget) -> Report {
    Report {
        ops: history.ops.len(),
        well_formed: check_well_formed(history),
        linearizability: check_linearizable(history, budget),
        zxid: check_zxid_monotonic(history),
        durability: final_reads.map(|reads| check_acked_writes_survive(history, reads)),
    }
}

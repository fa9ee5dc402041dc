//! The linearizability checker: Wing & Gong's search with Lowe's memoisation, as in Porcupine,
//! run independently on each key (see the crate documentation for the rules).

use crate::bitset::{Cache, LinSet, Slot};
use crate::history::{Call, History, Op, Outcome, Ret, ZnodeState};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// How much work the linearizability search may do before giving up with
/// [`KeyResult::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// Maximum search steps for one key (`None`: unlimited). A step is one visit of an entry of
    /// the search list (a few tens of nanoseconds).
    pub max_steps_per_key: Option<u64>,
    /// Maximum memory for one key's cache of explored configurations, in bytes, approximately
    /// (`None`: unlimited). One configuration is counted as about 100 bytes, plus 4 for each
    /// linearized op that returned after an op not yet linearized, and 4 for each
    /// indeterminate op linearized.
    pub max_cache_bytes_per_key: Option<u64>,
    /// Maximum wall-clock time for the whole check, all keys together (`None`: unlimited). Keys
    /// not finished when it runs out are reported as [`KeyResult::Unknown`].
    pub max_time: Option<Duration>,
}

impl Budget {
    /// No limit at all.
    pub const fn unlimited() -> Self {
        Budget {
            max_steps_per_key: None,
            max_cache_bytes_per_key: None,
            max_time: None,
        }
    }

    /// A step limit per key and nothing else.
    pub const fn steps(max_steps_per_key: u64) -> Self {
        Budget {
            max_steps_per_key: Some(max_steps_per_key),
            ..Self::unlimited()
        }
    }
}

impl Default for Budget {
    /// 100 million steps and 1 GiB of cache per key, 60 seconds in total.
    fn default() -> Self {
        Budget {
            max_steps_per_key: Some(100_000_000),
            max_cache_bytes_per_key: Some(1 << 30),
            max_time: Some(Duration::from_secs(60)),
        }
    }
}

/// The result of [`check_linearizable`]: one [`KeyReport`] per key that has operations.
#[derive(Debug, Clone, Serialize)]
pub struct LinReport {
    /// Per key, in key order.
    pub keys: BTreeMap<String, KeyReport>,
    /// Wall-clock time the check took.
    pub elapsed: Duration,
}

/// Overall verdict of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Everything checked and no anomaly found.
    Pass,
    /// At least one anomaly was proven.
    Fail,
    /// No anomaly found, but some part could not be decided within the budget.
    Unknown,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Unknown => "UNKNOWN",
        })
    }
}

impl LinReport {
    /// `Fail` if any key is not linearizable, else `Unknown` if any key ran out of budget, else
    /// `Pass`.
    pub fn verdict(&self) -> Verdict {
        let results = || self.keys.values().map(|k| &k.result);
        if results().any(|r| {
            matches!(
                r,
                KeyResult::NotLinearizable(_) | KeyResult::VersionRegression(_)
            )
        }) {
            Verdict::Fail
        } else if results().any(|r| matches!(r, KeyResult::Unknown(_))) {
            Verdict::Unknown
        } else {
            Verdict::Pass
        }
    }

    /// The violations the search found, one per key it proved not linearizable.
    pub fn violations(&self) -> impl Iterator<Item = &LinViolation> {
        self.keys.values().filter_map(|k| match &k.result {
            KeyResult::NotLinearizable(v) => Some(&**v),
            _ => None,
        })
    }

    /// The regressions found where the search ran out of budget, one per key they prove not
    /// linearizable.
    pub fn regressions(&self) -> impl Iterator<Item = &Regression> {
        self.keys.values().filter_map(|k| match &k.result {
            KeyResult::VersionRegression(r) => Some(&**r),
            _ => None,
        })
    }
}

/// The outcome of checking one key.
#[derive(Debug, Clone, Serialize)]
pub struct KeyReport {
    /// Operations that took part in the search.
    pub ops: usize,
    /// Operations left out: [`Outcome::Failed`] ones, and reads with [`Outcome::Unknown`].
    pub dropped: usize,
    /// Search steps taken.
    pub steps: u64,
    /// The verdict for this key.
    pub result: KeyResult,
}

/// Whether one key's history is linearizable.
#[derive(Debug, Clone, Serialize)]
pub enum KeyResult {
    /// A linearization was found.
    Linearizable,
    /// The search was exhaustive and found no linearization.
    NotLinearizable(Box<LinViolation>),
    /// The search ran out of budget, but two operations alone prove that no linearization
    /// exists: see [`Regression`].
    VersionRegression(Box<Regression>),
    /// The budget ran out first: nothing is claimed.
    Unknown(BudgetExhausted),
}

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BudgetExhausted {
    /// [`Budget::max_steps_per_key`].
    Steps,
    /// [`Budget::max_cache_bytes_per_key`].
    Memory,
    /// [`Budget::max_time`].
    Time,
}

/// Diagnosis of a non-linearizable key: the deepest point the search reached.
///
/// The search linearized [`prefix`](Self::prefix) (a linearization of those ops that respects
/// the model and real time), reaching [`state`](Self::state); then [`blocked`](Self::blocked)
/// had to take effect before its reply, but neither it nor any of the other operations
/// [`pending`](Self::pending) at that time could be linearized next in a way that leads to a
/// complete linearization. Other branches of the search got less far.
#[derive(Debug, Clone, Serialize)]
pub struct LinViolation {
    /// The key.
    pub key: String,
    /// Operations of this key that took part in the search.
    pub ops: usize,
    /// The key's state before the run.
    pub initial: ZnodeState,
    /// Ids of the longest linearizable prefix found, in linearization order (indeterminate ops
    /// in it are ones the search took as applied).
    pub prefix: Vec<u64>,
    /// The last (up to [`PREFIX_TAIL`]) operations of the prefix, each with the state after it.
    pub prefix_tail: Vec<Step>,
    /// The state after the prefix.
    pub state: ZnodeState,
    /// The operation whose reply came before it could be linearized: the first completion the
    /// search could not get past.
    pub blocked: PendingOp,
    /// The other operations invoked before `blocked` completed and not in the prefix.
    pub pending: Vec<PendingOp>,
    /// Operations the reasons above refer to (see [`PendingReason::SkipsVersion`]) that are not
    /// listed above.
    pub related: Vec<Op>,
}

/// Proof that a key is not linearizable from two of its operations: `earlier` returned before
/// `later` was invoked, so every linearization puts `earlier` first, yet the znode's version
/// after `earlier` (the version it read, or the one it wrote) is above the version `later`
/// found (the version it read, or the one it overwrote). Versions never decrease in the model.
///
/// This is the shape of a stale read (a read of version 5 invoked after a write of version 6
/// was acknowledged), and of a write acknowledged out of order. The check takes O(n log n),
/// so it decides histories too long for the search; it is only consulted when the search runs
/// out of budget, because the search's diagnosis says more. Where it finds nothing, nothing is
/// claimed: other violations need the search.
#[derive(Debug, Clone, Serialize)]
pub struct Regression {
    /// The key.
    pub key: String,
    /// The operation that returned first.
    pub earlier: Op,
    /// The version after `earlier`.
    pub earlier_version: i32,
    /// The operation invoked after `earlier` returned.
    pub later: Op,
    /// The version `later` found before taking effect.
    pub later_version: i32,
}

impl fmt::Display for Regression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "key {:?} is not linearizable: #{} was invoked after #{} returned, yet found version \
             {} where #{} had already left version {} (versions never decrease; the search ran \
             out of budget, this pair is the proof)",
            self.key,
            self.later.id,
            self.earlier.id,
            self.later_version,
            self.earlier.id,
            self.earlier_version
        )?;
        writeln!(f, "    earlier: {}", self.earlier)?;
        writeln!(f, "    later:   {}", self.later)
    }
}

/// The version just before and just after op `op` took effect, if its reply says (a read: the
/// version read, twice; an acknowledged write or applied cas: its new version minus one, and
/// its new version).
fn versions_around(op: &Op) -> Option<(i32, i32)> {
    match (op.call, op.outcome) {
        (Call::Read, Outcome::Ok(Ret::Read { version, .. })) => Some((version, version)),
        (Call::Write { .. } | Call::Cas { .. }, Outcome::Ok(Ret::Written { version })) => {
            Some((version.wrapping_sub(1), version))
        }
        _ => None,
    }
}

/// Finds two ops of one key whose versions go backwards in real time (see [`Regression`]):
/// the first op, by invocation, whose version before it is below the highest version after any
/// op that returned before it was invoked.
pub(crate) fn find_regression(key: &str, ops: &[&Op]) -> Option<Regression> {
    let mut by_complete: Vec<(u64, i32, usize)> = Vec::new();
    let mut by_invoke: Vec<(u64, i32, usize)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let Some((before, after)) = versions_around(op) else {
            continue;
        };
        if let Some(c) = op.complete_ns {
            by_complete.push((c.max(op.invoke_ns), after, i));
        }
        by_invoke.push((op.invoke_ns, before, i));
    }
    by_complete.sort_unstable();
    by_invoke.sort_unstable();
    let mut done = by_complete.iter().peekable();
    let mut highest: Option<(i32, usize)> = None;
    for &(invoke, before, i) in &by_invoke {
        // Ops that returned strictly before this one was invoked (at equal times, concurrent).
        while let Some(&&(complete, after, j)) = done.peek() {
            if complete >= invoke {
                break;
            }
            if highest.is_none_or(|(v, _)| after > v) {
                highest = Some((after, j));
            }
            done.next();
        }
        if let Some((v, j)) = highest {
            if before < v {
                return Some(Regression {
                    key: key.to_string(),
                    earlier: ops[j].clone(),
                    earlier_version: v,
                    later: ops[i].clone(),
                    later_version: before,
                });
            }
        }
    }
    None
}

/// How many prefix operations a [`LinViolation`] shows in detail.
pub const PREFIX_TAIL: usize = 8;

/// An operation of a linearization, with the model state after it.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The operation.
    pub op: Op,
    /// The state after applying it.
    pub state_after: ZnodeState,
}

/// An operation that could not be linearized next at the point the search got stuck.
#[derive(Debug, Clone, Serialize)]
pub struct PendingOp {
    /// The operation.
    pub op: Op,
    /// Why it could not.
    pub reason: PendingReason,
}

/// Why a pending operation could not be linearized next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PendingReason {
    /// Its reply contradicts the state (e.g. a read of another value, a write returning a
    /// version other than the next one, a successful cas whose expected version is not the
    /// current one, or a reply that does not fit the call).
    Contradicts,
    /// It fits the state, but it would take the version past `version`, which the op with id
    /// `needed_by` (not yet linearized, and with a known reply) needs to see: versions never
    /// decrease, so that op could never be linearized afterwards.
    SkipsVersion {
        /// The version still needed.
        version: i32,
        /// The id of the op that needs it.
        needed_by: u64,
    },
    /// It fits the state, but every continuation after it was explored and failed.
    DeadEnd,
    /// An indeterminate operation that cannot take effect here (a cas whose expected version is
    /// not the current one, or a write whose new version was produced by an acknowledged op).
    CannotApply,
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::Contradicts => write!(f, "its result contradicts this state"),
            PendingReason::SkipsVersion { version, needed_by } => write!(
                f,
                "fits this state, but would move past version {version}, which #{needed_by} needs"
            ),
            PendingReason::DeadEnd => write!(f, "fits this state, but every continuation fails"),
            PendingReason::CannotApply => {
                write!(f, "indeterminate, cannot take effect in this state")
            }
        }
    }
}

impl fmt::Display for LinViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "key {:?} is not linearizable: the longest linearizable prefix has {} of {} ops",
            self.key,
            self.prefix.len(),
            self.ops
        )?;
        writeln!(f, "    initial state {}", self.initial)?;
        let hidden = self.prefix.len() - self.prefix_tail.len();
        if hidden > 0 {
            writeln!(f, "    ... {hidden} earlier ops of the prefix ...")?;
        }
        for step in &self.prefix_tail {
            writeln!(f, "    {}  => {}", step.op, step.state_after)?;
        }
        writeln!(f, "    state after the prefix {}", self.state)?;
        writeln!(f, "  blocked (replied before it could be linearized):")?;
        writeln!(f, "    {}: {}", self.blocked.op, self.blocked.reason)?;
        if self.pending.is_empty() {
            writeln!(f, "  no other operation was pending")?;
        } else {
            writeln!(f, "  other pending operations:")?;
            for p in &self.pending {
                writeln!(f, "    {}: {}", p.op, p.reason)?;
            }
        }
        if !self.related.is_empty() {
            writeln!(f, "  later operations referred to above:")?;
            for op in &self.related {
                writeln!(f, "    {op}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for LinReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count =
            |pred: fn(&KeyResult) -> bool| self.keys.values().filter(|k| pred(&k.result)).count();
        writeln!(
            f,
            "linearizability: {} ({} keys: {} linearizable, {} not, {} unknown; {:.3}s)",
            self.verdict(),
            self.keys.len(),
            count(|r| matches!(r, KeyResult::Linearizable)),
            count(|r| {
                matches!(
                    r,
                    KeyResult::NotLinearizable(_) | KeyResult::VersionRegression(_)
                )
            }),
            count(|r| matches!(r, KeyResult::Unknown(_))),
            self.elapsed.as_secs_f64()
        )?;
        for (key, report) in &self.keys {
            match &report.result {
                KeyResult::Linearizable => {}
                KeyResult::NotLinearizable(v) => write!(f, "  {v}")?,
                KeyResult::VersionRegression(r) => write!(f, "  {r}")?,
                KeyResult::Unknown(why) => writeln!(
                    f,
                    "  key {key:?}: undecided, {} budget exhausted after {} steps ({} ops)",
                    match why {
                        BudgetExhausted::Steps => "step",
                        BudgetExhausted::Memory => "memory",
                        BudgetExhausted::Time => "time",
                    },
                    report.steps,
                    report.ops
                )?,
            }
        }
        Ok(())
    }
}

/// Checks that the history of every key is linearizable with respect to the znode register
/// model, each key independently, within `budget`.
pub fn check_linearizable(history: &History, budget: Budget) -> LinReport {
    let start = Instant::now();
    let deadline = budget.max_time.map(|d| start + d);
    let mut per_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &history.ops {
        per_key.entry(op.key.as_str()).or_default().push(op);
    }
    let keys = per_key
        .into_iter()
        .map(|(key, ops)| {
            let report = check_key(key, &ops, history.initial_state(key), budget, deadline);
            (key.to_string(), report)
        })
        .collect();
    LinReport {
        keys,
        elapsed: start.elapsed(),
    }
}

const NIL: u32 = u32::MAX;

/// The deepest point the search got stuck at.
#[derive(Default)]
struct Stuck {
    /// The search stack then: (call entry, state before it) for each linearized op.
    stack: Vec<(u32, ZnodeState)>,
    /// The state after the stack's ops.
    state: ZnodeState,
    /// The op whose return entry was reached.
    blocked: u32,
    /// The other ops whose call entries came before that return.
    pending: Vec<u32>,
}

/// Facts that hold in every valid linearization of one key's operations, used to prune the
/// search. They rest on one property of the model: every version above the initial one is
/// produced exactly once, by one successful write or cas, and versions never decrease (a znode
/// would need 2^31 writes for its version to wrap around, which this checker does not model).
struct Facts {
    /// Versions that acknowledged writes/cas reported producing: no indeterminate op produced
    /// them.
    claimed: HashSet<i32>,
    /// Version → the value acknowledged reads saw with it (`None`: they disagree): whatever
    /// produced that version wrote that value.
    observed: HashMap<i32, Option<i64>>,
    /// Per op: for an indeterminate write/cas whose value no other op writes, the versions above
    /// the initial one that reads saw with that value: it produced one of them (if any).
    only_versions: Vec<Option<Vec<i32>>>,
    /// Per op with a known reply: the version the znode has just before it takes effect (a
    /// read: the version read; a write or applied cas: its new version minus one). Once the
    /// state is past it, the op can never be linearized.
    needs_version: Vec<Option<i32>>,
}

impl Facts {
    fn new(ops: &[&Op], initial: ZnodeState) -> Self {
        let mut claimed = HashSet::new();
        let mut observed: HashMap<i32, Option<i64>> = HashMap::new();
        let mut writers: HashMap<i64, usize> = HashMap::new();
        let mut seen_at: HashMap<i64, Vec<i32>> = HashMap::new();
        for op in ops {
            match (op.call, op.outcome) {
                (Call::Write { value } | Call::Cas { value, .. }, outcome) => {
                    *writers.entry(value).or_default() += 1;
                    if let Outcome::Ok(Ret::Written { version }) = outcome {
                        claimed.insert(version);
                    }
                }
                (Call::Read, Outcome::Ok(Ret::Read { value, version })) => {
                    let seen = observed.entry(version).or_insert(Some(value));
                    if *seen != Some(value) {
                        *seen = None;
                    }
                    if version > initial.version {
                        let at = seen_at.entry(value).or_default();
                        if !at.contains(&version) {
                            at.push(version);
                        }
                    }
                }
                _ => {}
            }
        }
        let only_versions = ops
            .iter()
            .map(|op| match (op.call, op.outcome) {
                (Call::Write { value } | Call::Cas { value, .. }, Outcome::Unknown)
                    if writers[&value] == 1 =>
                {
                    seen_at.get(&value).cloned()
                }
                _ => None,
            })
            .collect();
        let needs_version = ops
            .iter()
            .map(|op| versions_around(op).map(|(before, _)| before))
            .collect();
        Facts {
            claimed,
            observed,
            only_versions,
            needs_version,
        }
    }
}

/// The search over one key's operations.
struct Search<'a> {
    ops: Vec<&'a Op>,
    /// What every valid linearization satisfies, used to prune the search.
    facts: Facts,
    /// Doubly linked list of entries; node `2n` is the head sentinel.
    next: Vec<u32>,
    prev: Vec<u32>,
    /// For each entry: its op index.
    node_op: Vec<u32>,
    /// For each entry: whether it is a call (else a return).
    node_is_call: Vec<bool>,
    /// For each op: its return entry.
    ret_node: Vec<u32>,
    /// For each op: where [`LinSet`] keeps it (ops with a known reply by order of return).
    slots: Vec<Slot>,
}

impl<'a> Search<'a> {
    fn new(ops: Vec<&'a Op>, initial: ZnodeState) -> Self {
        let n = ops.len();
        // Sort key: (time, 0 for a call / 1 for a return, op index). Calls before returns at
        // equal times: an op returning at t and one invoked at t are concurrent.
        let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * n);
        for (i, op) in ops.iter().enumerate() {
            events.push((op.invoke_ns, 0, i as u32));
            let ret_time = match (op.outcome, op.complete_ns) {
                (Outcome::Ok(_), Some(c)) => c.max(op.invoke_ns),
                _ => u64::MAX,
            };
            events.push((ret_time, 1, i as u32));
        }
        events.sort_unstable();
        let head = 2 * n as u32;
        let mut next = vec![NIL; 2 * n + 1];
        let mut prev = vec![NIL; 2 * n + 1];
        let mut node_op = vec![0; 2 * n];
        let mut node_is_call = vec![false; 2 * n];
        let mut ret_node = vec![0; n];
        let mut last = head;
        let mut slots = vec![Slot::Optional(0); n];
        let (mut returns, mut optional) = (0, 0);
        for (i, op) in ops.iter().enumerate() {
            if !matches!(op.outcome, Outcome::Ok(_)) {
                slots[i] = Slot::Optional(optional);
                optional += 1;
            }
        }
        for (node, &(_, kind, i)) in events.iter().enumerate() {
            if kind == 1 && matches!(ops[i as usize].outcome, Outcome::Ok(_)) {
                slots[i as usize] = Slot::Required(returns);
                returns += 1;
            }
            let node = node as u32;
            node_op[node as usize] = i;
            node_is_call[node as usize] = kind == 0;
            if kind == 1 {
                ret_node[i as usize] = node;
            }
            next[last as usize] = node;
            prev[node as usize] = last;
            last = node;
        }
        let facts = Facts::new(&ops, initial);
        Search {
            ops,
            facts,
            next,
            prev,
            node_op,
            node_is_call,
            ret_node,
            slots,
        }
    }

    fn head(&self) -> u32 {
        2 * self.ops.len() as u32
    }

    /// Whether op `i` must be linearized (it has a known reply) rather than being optional.
    fn required(&self, i: usize) -> bool {
        matches!(self.ops[i].outcome, Outcome::Ok(_))
    }

    /// The state after linearizing op `i` in `state`, if it can be linearized there. An
    /// indeterminate op is only linearized where it takes effect (leaving it out is the same as
    /// linearizing it after everything else) and where the [`Facts`] allow.
    fn step(&self, i: usize, state: ZnodeState) -> Option<ZnodeState> {
        let op = self.ops[i];
        if let Outcome::Ok(ret) = op.outcome {
            return state.apply(&op.call, Some(&ret));
        }
        let next = state.apply(&op.call, None)?;
        let facts = &self.facts;
        let allowed = next != state
            && !facts.claimed.contains(&next.version)
            && facts
                .observed
                .get(&next.version)
                .is_none_or(|v| *v == Some(next.value))
            && facts.only_versions[i]
                .as_ref()
                .is_none_or(|vs| vs.contains(&next.version));
        allowed.then_some(next)
    }

    /// Whether, after linearizing op `i` and reaching `version`, every op with a known reply
    /// still to be linearized can still see the version it needs (`needed` is the multiset of
    /// those versions, `i` still included if it has one).
    fn keeps_needed_versions(&self, i: usize, version: i32, needed: &BTreeMap<i32, u32>) -> bool {
        let mut it = needed.iter();
        let lowest = match it.next() {
            Some((&v, &count)) if self.facts.needs_version[i] == Some(v) && count == 1 => {
                it.next().map(|(&v, _)| v)
            }
            Some((&v, _)) => Some(v),
            None => None,
        };
        lowest.is_none_or(|lowest| version <= lowest)
    }

    fn lift(&mut self, call: u32) {
        let ret = self.ret_node[self.node_op[call as usize] as usize];
        for node in [call, ret] {
            let (p, n) = (self.prev[node as usize], self.next[node as usize]);
            self.next[p as usize] = n;
            if n != NIL {
                self.prev[n as usize] = p;
            }
        }
    }

    fn unlift(&mut self, call: u32) {
        let ret = self.ret_node[self.node_op[call as usize] as usize];
        for node in [ret, call] {
            let (p, n) = (self.prev[node as usize], self.next[node as usize]);
            self.next[p as usize] = node;
            if n != NIL {
                self.prev[n as usize] = node;
            }
        }
    }

    /// An op to linearize next, before any other, in a configuration with state `state`: the
    /// first op invoked before the first pending return whose known reply leaves the state as
    /// it is and fits it (a read of this state, a cas refused with `BadVersion` at another
    /// version).
    ///
    /// Linearizing it first never loses a linearization: if one exists from here, moving the op
    /// to the front keeps it valid. The state it sees is the same (the ops it jumps over never
    /// change what it returns, and removing it changes no state), and real time is still
    /// respected: any op that must precede it returned before it was invoked, so its return
    /// came before this op's call in the event list, and the search only gets past a return
    /// once that op is linearized. The other candidates are therefore not tried: their
    /// branches can only succeed if this one does. Without this, every subset of a dozen
    /// concurrent reads of one version would be a configuration of its own.
    fn forced(&self, state: ZnodeState) -> Option<u32> {
        let mut entry = self.next[self.head() as usize];
        while entry != NIL && self.node_is_call[entry as usize] {
            let i = self.node_op[entry as usize] as usize;
            if self.required(i) && self.step(i, state) == Some(state) {
                return Some(entry);
            }
            entry = self.next[entry as usize];
        }
        None
    }

    /// Runs the search. `Ok(None)`: linearizable; `Ok(Some(stuck))`: not linearizable;
    /// `Err(why)`: budget exhausted.
    fn run(
        &mut self,
        initial: ZnodeState,
        budget: Budget,
        deadline: Option<Instant>,
        steps: &mut u64,
    ) -> Result<Option<Stuck>, BudgetExhausted> {
        let n = self.ops.len();
        let max_steps = budget.max_steps_per_key.unwrap_or(u64::MAX);
        let max_bytes = budget.max_cache_bytes_per_key.unwrap_or(u64::MAX);
        let required_total = (0..n).filter(|&i| self.required(i)).count();
        let mut required_done = 0;
        let mut linearized = LinSet::new(self.slots.clone());
        let mut cache = Cache::default();
        // (call entry, state before it, whether it was forced) per linearized op.
        let mut stack: Vec<(u32, ZnodeState)> = Vec::new();
        let mut forced: Vec<bool> = Vec::new();
        let mut state = initial;
        let mut best: Option<Stuck> = None;
        // `best.stack[..best_valid] == stack[..best_valid]`: snapshots copy only the rest.
        let mut best_valid = 0;
        let mut needed: BTreeMap<i32, u32> = BTreeMap::new();
        for v in self.facts.needs_version.iter().flatten() {
            *needed.entry(*v).or_default() += 1;
        }
        let mut entry = self.next[self.head() as usize];
        // Whether the search has just entered a configuration (and should look for a forced op).
        let mut fresh = true;
        loop {
            // Every op with a known reply is linearized; the indeterminate ones left can all be
            // taken as happening after them (or never), as nothing observes them any more.
            if required_done == required_total {
                return Ok(None);
            }
            *steps += 1;
            if *steps > max_steps {
                return Err(BudgetExhausted::Steps);
            }
            if *steps & 1023 == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(BudgetExhausted::Time);
            }
            debug_assert!(entry != NIL, "the list always ends with a return entry");
            // The op to try next, if any, and whether it is forced; `None`: backtrack.
            let mut attempt = None;
            let mut doomed = false;
            if std::mem::take(&mut fresh) {
                if let Some(call) = self.forced(state) {
                    attempt = Some((call, state, true));
                }
            }
            if attempt.is_none() {
                let i = self.node_op[entry as usize] as usize;
                if !self.node_is_call[entry as usize] {
                    // A return: op `i` must have been linearized before it. Backtrack.
                    if best.as_ref().is_none_or(|b| stack.len() > b.stack.len()) {
                        let b = best.get_or_insert_with(Stuck::default);
                        b.stack.truncate(best_valid);
                        b.stack.extend_from_slice(&stack[best_valid..]);
                        best_valid = stack.len();
                        self.snapshot_stuck(b, state, entry);
                    }
                    doomed = true;
                } else {
                    match self.step(i, state) {
                        Some(next_state)
                            if self.keeps_needed_versions(i, next_state.version, &needed) =>
                        {
                            attempt = Some((entry, next_state, false));
                        }
                        _ => {
                            entry = self.next[entry as usize];
                            continue;
                        }
                    }
                }
            }
            if let Some((call, next_state, is_forced)) = attempt {
                let i = self.node_op[call as usize] as usize;
                linearized.set(i);
                if cache.bytes() >= max_bytes {
                    return Err(BudgetExhausted::Memory);
                }
                if cache.insert(&linearized, next_state) {
                    stack.push((call, state));
                    forced.push(is_forced);
                    state = next_state;
                    if self.required(i) {
                        required_done += 1;
                    }
                    if let Some(v) = self.facts.needs_version[i] {
                        let count = needed.get_mut(&v).expect("counted");
                        *count -= 1;
                        if *count == 0 {
                            needed.remove(&v);
                        }
                    }
                    self.lift(call);
                    entry = self.next[self.head() as usize];
                    fresh = true;
                    continue;
                }
                // Explored before, without success.
                linearized.clear(i);
                if !is_forced {
                    entry = self.next[call as usize];
                    continue;
                }
                // The forced op's branch failed, so does every other from here.
                doomed = true;
            }
            debug_assert!(doomed);
            // Backtrack: undo the last op; if it was forced, the configuration it was forced
            // in has failed as a whole, so undo the one before it too, and so on.
            loop {
                let Some((call, prev_state)) = stack.pop() else {
                    return Ok(best);
                };
                let was_forced = forced.pop().expect("one flag per stack entry");
                best_valid = best_valid.min(stack.len());
                let j = self.node_op[call as usize] as usize;
                state = prev_state;
                linearized.clear(j);
                if self.required(j) {
                    required_done -= 1;
                }
                if let Some(v) = self.facts.needs_version[j] {
                    *needed.entry(v).or_default() += 1;
                }
                self.unlift(call);
                if !was_forced {
                    entry = self.next[call as usize];
                    break;
                }
            }
        }
    }

    /// Records, besides the stack, the state and the ops around return entry `ret`, where the
    /// search is stuck.
    fn snapshot_stuck(&self, stuck: &mut Stuck, state: ZnodeState, ret: u32) {
        stuck.state = state;
        stuck.blocked = self.node_op[ret as usize];
        stuck.pending.clear();
        let mut node = self.next[self.head() as usize];
        while node != ret && node != NIL {
            let i = self.node_op[node as usize];
            if i != stuck.blocked {
                stuck.pending.push(i);
            }
            node = self.next[node as usize];
        }
    }

    /// Why op `i` could not be linearized next in `state`, after the ops in `done`; the index of
    /// the op the reason refers to, if any.
    fn pending_op(&self, i: u32, state: ZnodeState, done: &[bool]) -> (PendingOp, Option<usize>) {
        let i = i as usize;
        let mut related = None;
        let reason = match (self.step(i, state), self.required(i)) {
            (None, true) => PendingReason::Contradicts,
            (None, false) => PendingReason::CannotApply,
            (Some(next), _) => {
                let overtaken = (0..self.ops.len())
                    .filter(|&j| j != i && !done[j])
                    .filter_map(|j| self.facts.needs_version[j].map(|v| (v, j)))
                    .filter(|&(v, _)| v < next.version)
                    .min();
                match overtaken {
                    Some((version, j)) => {
                        related = Some(j);
                        PendingReason::SkipsVersion {
                            version,
                            needed_by: self.ops[j].id,
                        }
                    }
                    None => PendingReason::DeadEnd,
                }
            }
        };
        (
            PendingOp {
                op: self.ops[i].clone(),
                reason,
            },
            related,
        )
    }

    fn violation(&self, key: &str, initial: ZnodeState, stuck: Stuck) -> LinViolation {
        // (op index, state after it) for each op of the prefix.
        let prefix: Vec<(usize, ZnodeState)> = (0..stuck.stack.len())
            .map(|k| {
                let after = stuck.stack.get(k + 1).map_or(stuck.state, |&(_, s)| s);
                (self.node_op[stuck.stack[k].0 as usize] as usize, after)
            })
            .collect();
        let mut done = vec![false; self.ops.len()];
        for &(i, _) in &prefix {
            done[i] = true;
        }
        let mut shown: HashSet<usize> = stuck.pending.iter().map(|&i| i as usize).collect();
        shown.insert(stuck.blocked as usize);
        let mut related = Vec::new();
        let mut explain = |i: u32| {
            let (pending, refers_to) = self.pending_op(i, stuck.state, &done);
            if let Some(j) = refers_to {
                if shown.insert(j) {
                    related.push(self.ops[j].clone());
                }
            }
            pending
        };
        let blocked = explain(stuck.blocked);
        let pending = stuck.pending.iter().map(|&i| explain(i)).collect();
        let tail_start = prefix.len().saturating_sub(PREFIX_TAIL);
        LinViolation {
            key: key.to_string(),
            ops: self.ops.len(),
            initial,
            prefix: prefix.iter().map(|&(i, _)| self.ops[i].id).collect(),
            prefix_tail: prefix[tail_start..]
                .iter()
                .map(|&(i, state_after)| Step {
                    op: self.ops[i].clone(),
                    state_after,
                })
                .collect(),
            state: stuck.state,
            blocked,
            pending,
            related,
        }
    }
}

fn check_key(
    key: &str,
    ops: &[&Op],
    initial: ZnodeState,
    budget: Budget,
    deadline: Option<Instant>,
) -> KeyReport {
    let kept: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| match op.outcome {
            Outcome::Ok(_) => true,
            Outcome::Failed => false,
            Outcome::Unknown => op.call != Call::Read,
        })
        .collect();
    let dropped = ops.len() - kept.len();
    let n = kept.len();
    let mut steps = 0;
    if deadline.is_some_and(|d| Instant::now() >= d) {
        let result = KeyResult::Unknown(BudgetExhausted::Time);
        return KeyReport {
            ops: n,
            dropped,
            steps,
            result,
        };
    }
    let mut search = Search::new(kept, initial);
    let result = match search.run(initial, budget, deadline, &mut steps) {
        Ok(None) => KeyResult::Linearizable,
        Ok(Some(stuck)) => {
            KeyResult::NotLinearizable(Box::new(search.violation(key, initial, stuck)))
        }
        Err(why) => match find_regression(key, ops) {
            Some(regression) => KeyResult::VersionRegression(Box::new(regression)),
            None => KeyResult::Unknown(why),
        },
    };
    KeyReport {
        ops: n,
        dropped,
        steps,
        result,
    }
}

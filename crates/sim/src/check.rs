//! Checkers over a simulated history. Each is fed events as the simulator produces them and
//! records violations; none of them trusts the protocol under test.
//!
//! | checker | property |
//! |---|---|
//! | agreement | no two replicas deliver different commands (or tags) at one slot |
//! | order | each replica incarnation delivers slots 1, 2, 3, … without gap or repeat, after its snapshot |
//! | integrity | only submitted commands are delivered, each at one slot only |
//! | client-order | a session's commands on one connection are ordered as it submitted them |
//! | durability | at the end every replica holds every slot ever delivered anywhere |
//! | recovery | restarted from their disks alone, the replicas recover every slot ever delivered |
//! | crash-tolerance | zab.md §1.5: when a replica delivers m, a quorum has m in stable storage |
//! | leader | at most one leader per epoch |
//! | liveness | after the last fault heals, the cluster settles and serves within a bound |
//! | snapshot | a restored snapshot equals the global history prefix it claims |
//! | acknowledged | a reply names the slot the history holds its command at, and every command a client was told of is in the history at the end |
//! | divergence | replicas that applied the same commands have equal state-machine digests |
//! | group-messages | every message between groups that was sent is applied in its target group, and none is left unacknowledged (the register app) |
//! | codec | every message and storage op decodes with its own codec |
//!
//! [`History::up_to_commutation`] (the register workload's mode, for protocols that deliver
//! commuting commands out of order) replaces the one global slot map with one order per clique
//! of conflicting commands (`check/commute.rs`): agreement compares the orders of
//! non-commuting commands only, integrity is per replica incarnation, durability, recovery and
//! snapshot compare sets of commands and those orders; the other checkers are unchanged.

mod commute;
pub mod etcd_model;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use synod_core::{NodeId, TimeUs};

use crate::registers::Op;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Checker {
    Agreement,
    Order,
    Integrity,
    ClientOrder,
    Durability,
    Recovery,
    CrashTolerance,
    Leader,
    Liveness,
    Snapshot,
    /// A checker across groups ([`CrossCheck`], e.g. SconeKV's serializability) objected.
    CrossGroup,
    /// A message or a storage op that its own codec cannot read back.
    Codec,
    /// A client was told its command was delivered at a position where the history has
    /// something else, or was told of a command the history never got.
    Acknowledged,
    /// Two replicas that applied the same commands hold different states.
    Divergence,
    /// A state machine's message to another group was not delivered there, or is still
    /// unacknowledged at the end.
    GroupMessages,
    /// A ZooKeeper session saw its reads go back, or a read after a sync missed a write
    /// acknowledged before it.
    Session,
    /// An established leader had more than one configuration change in flight (docs/
    /// membership.md: one change at a time).
    Config,
    /// etcd: a reply's revision, or what it found or changed, is not what the model of the
    /// same log answers (gaps, doubles, a wrong Txn branch).
    Revisions,
    /// etcd: a read saw a state older than a write acknowledged before it began, or a state no
    /// revision had; or a write acknowledged before another began is ordered after it.
    Linearizable,
    /// etcd: a watch stream skipped, repeated or reordered a revision, or sent events the
    /// history does not have.
    Watch,
    /// The protocol panicked (a failed assertion is a found bug).
    Panic,
}

/// A checker over the deliveries of every group together (the hook for SconeKV's
/// serializability checker): it sees each delivery as it happens, after the per-group
/// checkers, and returns a description of what is wrong, if anything.
pub trait CrossCheck {
    fn delivered(&mut self, group: usize, node: NodeId, slot: u64, command: u64) -> Option<String>;
}

impl fmt::Display for Checker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Checker::Agreement => "agreement",
            Checker::Order => "total-order",
            Checker::Integrity => "integrity",
            Checker::ClientOrder => "client-order",
            Checker::Durability => "durability",
            Checker::Recovery => "recovery-from-disk",
            Checker::CrashTolerance => "crash-tolerance",
            Checker::Leader => "one-leader-per-epoch",
            Checker::Liveness => "liveness",
            Checker::Snapshot => "snapshot",
            Checker::CrossGroup => "cross-group",
            Checker::Codec => "codec",
            Checker::Acknowledged => "acknowledged",
            Checker::Divergence => "divergence",
            Checker::GroupMessages => "group-messages",
            Checker::Session => "session",
            Checker::Config => "one-change-in-flight",
            Checker::Revisions => "revisions",
            Checker::Linearizable => "linearizable",
            Checker::Watch => "watch",
            Checker::Panic => "panic",
        };
        f.write_str(s)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub checker: Checker,
    pub at_us: TimeUs,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at t={}us: {}", self.checker, self.at_us, self.detail)
    }
}

/// At most this many violations are kept per run (the first one is what matters).
const MAX_VIOLATIONS: usize = 16;

#[derive(Default)]
pub struct History {
    pub violations: Vec<Violation>,
    /// Checkers whose violations are not recorded.
    pub disabled: Vec<Checker>,
    /// slot → (tag, command id), from the first delivery anywhere.
    slots: Vec<(u64, u64)>,
    /// command id → slot.
    placed: HashMap<u64, u64>,
    /// command id → submitted, with (client, connection, its place among the connection's
    /// submissions). Place 0: outside any session. Looked up only (never iterated), so the
    /// hasher's randomness cannot reach a run.
    sessions: HashMap<u64, (u64, u64, u64)>,
    /// (client, connection) → the place and slot of its last command ordered so far.
    session_last: HashMap<(u64, u64), (u64, u64)>,
    /// (node, incarnation) → last delivered slot.
    cursor: HashMap<(NodeId, u64), u64>,
    leaders: BTreeMap<u64, NodeId>,
    /// Up to commutation: the per-clique orders instead of `slots` and `placed`.
    commute: Option<Box<commute::Commuting>>,
}

impl History {
    pub fn with_disabled(disabled: Vec<Checker>) -> Self {
        Self {
            disabled,
            ..Self::default()
        }
    }

    /// A history checked up to commutation (the register workload's mode): replicas may
    /// deliver commands that commute (`registers::commute`) in different orders. Submit with
    /// [`History::submitted_op`]; a command submitted without an operation conflicts with every
    /// other.
    pub fn up_to_commutation(disabled: Vec<Checker>) -> Self {
        Self {
            commute: Some(Box::default()),
            ..Self::with_disabled(disabled)
        }
    }

    /// Whether this history is checked up to commutation.
    pub fn commuting(&self) -> bool {
        self.commute.is_some()
    }

    pub fn violate(&mut self, checker: Checker, at_us: TimeUs, detail: String) {
        if self.violations.len() < MAX_VIOLATIONS && !self.disabled.contains(&checker) {
            self.violations.push(Violation {
                checker,
                at_us,
                detail,
            });
        }
    }

    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The highest slot delivered anywhere: the commands delivered anywhere (up to
    /// commutation, where slots name no command, their number).
    pub fn max_slot(&self) -> u64 {
        match &self.commute {
            Some(c) => c.distinct(),
            None => self.slots.len() as u64,
        }
    }

    /// Whether any replica delivered `id`.
    pub fn holds_command(&self, id: u64) -> bool {
        match &self.commute {
            Some(c) => c.delivered(id),
            None => self.placed.contains_key(&id),
        }
    }

    /// The slot `id` was first delivered at, anywhere (always `None` up to commutation).
    pub fn slot_of(&self, id: u64) -> Option<u64> {
        self.placed.get(&id).copied()
    }

    /// A client was answered that `id` was delivered at `slot`: the history must hold it there
    /// (up to commutation, it must have been delivered somewhere).
    pub fn acknowledged(&mut self, now: TimeUs, node: NodeId, id: u64, slot: u64) {
        let known = match &self.commute {
            Some(c) => {
                if c.delivered(id) {
                    return;
                }
                None
            }
            None => self.at(slot),
        };
        if known != Some(id) {
            self.violate(
                Checker::Acknowledged,
                now,
                format!(
                    "n{node} told a client command {id} was delivered at slot {slot}, where the \
                     history holds {known:?}"
                ),
            );
        }
    }

    /// The command delivered at `slot`, if any replica delivered it (always `None` up to
    /// commutation).
    pub fn at(&self, slot: u64) -> Option<u64> {
        slot.checked_sub(1)
            .and_then(|i| self.slots.get(i as usize))
            .map(|&(_, id)| id)
    }

    /// `id` was submitted (outside any session: no client order to check, unless a client's
    /// submission of it is, or will be, recorded with [`History::submitted_by`]).
    pub fn submitted(&mut self, id: u64) {
        self.sessions.entry(id).or_insert((0, 0, 0));
    }

    /// A client submitted `id` as the `place`-th command on its `connection`.
    pub fn submitted_by(&mut self, id: u64, (client, connection, place): (u64, u64, u64)) {
        self.sessions.insert(id, (client, connection, place));
    }

    /// A client submitted `id` (as in [`History::submitted_by`]), and it does `op` (the
    /// register workload): what the checkers up to commutation need to know what it conflicts
    /// with.
    pub fn submitted_op(&mut self, id: u64, session: (u64, u64, u64), op: Op) {
        self.submitted_by(id, session);
        if let Some(c) = &mut self.commute {
            c.submitted(id, op);
        }
    }

    /// The client-order check, at the first delivery of `id` at `slot`: no command the same
    /// connection submitted later was ordered before it (commands lost on the way may leave
    /// gaps; they may not be overtaken).
    fn ordered(&mut self, now: TimeUs, id: u64, slot: u64) {
        let Some(&(client, conn, place)) = self.sessions.get(&id) else {
            return;
        };
        if place == 0 {
            return;
        }
        let last = self.session_last.entry((client, conn)).or_insert((0, 0));
        if place < last.0 {
            let (later, at) = *last;
            self.violate(
                Checker::ClientOrder,
                now,
                format!(
                    "client {client}'s command {place} on connection {conn} was ordered at slot \
                     {slot}, after its command {later} at slot {at}"
                ),
            );
        } else {
            *last = (place, slot);
        }
    }

    /// A replica (re)started from a state that covers slots up to `base`.
    pub fn started(&mut self, node: NodeId, incarnation: u64, base: u64) {
        self.cursor.insert((node, incarnation), base);
        if let Some(c) = &mut self.commute {
            c.start(node, incarnation);
        }
    }

    /// A replica delivered `id` at `slot`. `durable_quorum` says whether a quorum of replicas
    /// holds it in stable storage at this moment.
    #[allow(clippy::too_many_arguments)]
    pub fn delivered(
        &mut self,
        now: TimeUs,
        node: NodeId,
        incarnation: u64,
        slot: u64,
        tag: u64,
        id: u64,
        durable_quorum: bool,
    ) {
        let cur = self.cursor.entry((node, incarnation)).or_insert(0);
        if slot != *cur + 1 {
            let expected = *cur + 1;
            *cur = slot.max(*cur);
            self.violate(
                Checker::Order,
                now,
                format!("n{node} delivered slot {slot}, expected {expected}"),
            );
        } else {
            *cur = slot;
        }
        if !self.sessions.contains_key(&id) {
            self.violate(
                Checker::Integrity,
                now,
                format!("n{node} delivered command {id}, which was never submitted"),
            );
        }
        if let Some(c) = &mut self.commute {
            let found = c.deliver(node, incarnation, tag, id);
            if found.duplicate {
                self.violate(
                    Checker::Integrity,
                    now,
                    format!(
                        "n{node} delivered command {id} twice in one incarnation (the second at \
                         slot {slot})"
                    ),
                );
            }
            for d in found.disagree {
                self.violate(Checker::Agreement, now, d);
            }
            if found.first {
                self.ordered(now, id, slot);
            }
        } else {
            self.in_total_order(now, node, slot, tag, id);
        }
        if !durable_quorum {
            self.violate(
                Checker::CrashTolerance,
                now,
                format!(
                    "n{node} delivered command {id} at slot {slot} while fewer than a quorum \
                     had it in stable storage"
                ),
            );
        }
    }

    /// Agreement and integrity in total order: one command per slot, one slot per command.
    fn in_total_order(&mut self, now: TimeUs, node: NodeId, slot: u64, tag: u64, id: u64) {
        let idx = (slot - 1) as usize;
        if idx < self.slots.len() {
            let (t, known) = self.slots[idx];
            if (t, known) != (tag, id) {
                self.violate(
                    Checker::Agreement,
                    now,
                    format!(
                        "n{node} delivered command {id} (tag {tag:#x}) at slot {slot}, \
                         where command {known} (tag {t:#x}) was delivered before"
                    ),
                );
            }
        } else if idx == self.slots.len() {
            self.slots.push((tag, id));
            self.ordered(now, id, slot);
            if let Some(&other) = self.placed.get(&id) {
                self.violate(
                    Checker::Integrity,
                    now,
                    format!("command {id} delivered at slot {slot} and at slot {other}"),
                );
            } else {
                self.placed.insert(id, slot);
            }
        } else {
            // A slot beyond the known history with a hole before it: the order checker has
            // already reported the gap at this replica; record what we can.
            self.violate(
                Checker::Agreement,
                now,
                format!(
                    "n{node} delivered slot {slot} before any replica delivered slot {}",
                    self.slots.len() + 1
                ),
            );
        }
    }

    /// A replica replaced its state with a snapshot of `ids` (slot 1..=ids.len()).
    pub fn restored(&mut self, now: TimeUs, node: NodeId, incarnation: u64, ids: &[u64]) {
        self.cursor.insert((node, incarnation), ids.len() as u64);
        if let Some(c) = &mut self.commute {
            for d in c.restore(node, incarnation, ids) {
                self.violate(Checker::Snapshot, now, d);
            }
            return;
        }
        for (i, &id) in ids.iter().enumerate() {
            let slot = i as u64 + 1;
            match self.at(slot) {
                Some(known) if known == id => {}
                known => {
                    self.violate(
                        Checker::Snapshot,
                        now,
                        format!(
                            "n{node} restored a snapshot with command {id} at slot {slot}, \
                             history has {known:?}"
                        ),
                    );
                    break;
                }
            }
        }
    }

    pub fn leading(&mut self, now: TimeUs, node: NodeId, epoch: u64) {
        match self.leaders.get(&epoch) {
            Some(&l) if l != node => self.violate(
                Checker::Leader,
                now,
                format!("n{node} and n{l} both established epoch {epoch}"),
            ),
            _ => {
                self.leaders.insert(epoch, node);
            }
        }
    }

    /// The end of a run: every replica holds the whole history delivered anywhere.
    pub fn final_state(&mut self, now: TimeUs, node: NodeId, applied_ids: &[u64]) {
        self.holds_history(Checker::Durability, now, node, applied_ids, "at the end");
    }

    /// After every replica restarted from its disk alone: each recovered the whole history.
    pub fn recovered(&mut self, now: TimeUs, node: NodeId, applied_ids: &[u64]) {
        self.holds_history(
            Checker::Recovery,
            now,
            node,
            applied_ids,
            "after every replica restarted from its disk",
        );
    }

    fn holds_history(
        &mut self,
        checker: Checker,
        now: TimeUs,
        node: NodeId,
        applied_ids: &[u64],
        when: &str,
    ) {
        if let Some(c) = &mut self.commute {
            for d in c.holds(node, applied_ids, when) {
                self.violate(checker.clone(), now, d);
            }
            return;
        }
        let max = self.max_slot();
        if (applied_ids.len() as u64) < max {
            self.violate(
                checker.clone(),
                now,
                format!(
                    "n{node} holds {} slots {when}, but slot {max} was delivered",
                    applied_ids.len()
                ),
            );
        }
        for (i, &id) in applied_ids.iter().enumerate() {
            let slot = i as u64 + 1;
            if self.at(slot).is_some_and(|known| known != id) {
                self.violate(
                    checker,
                    now,
                    format!(
                        "n{node} holds command {id} at slot {slot} {when}, history has another"
                    ),
                );
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        let mut h = History::default();
        for id in 1..=10 {
            h.submitted(id);
        }
        h.started(1, 0, 0);
        h.started(2, 0, 0);
        h
    }

    fn only(h: &History) -> Checker {
        assert_eq!(h.violations.len(), 1, "{:?}", h.violations);
        h.violations[0].checker.clone()
    }

    #[test]
    fn a_consistent_history_passes() {
        let mut h = history();
        for n in 1..=2 {
            for s in 1..=3 {
                h.delivered(s, n, 0, s, s, s, true);
            }
        }
        h.final_state(9, 1, &[1, 2, 3]);
        h.final_state(9, 2, &[1, 2, 3]);
        h.leading(1, 1, 1);
        h.leading(2, 1, 1);
        assert!(h.ok(), "{:?}", h.violations);
    }

    #[test]
    fn agreement_catches_two_commands_at_one_slot() {
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.delivered(2, 2, 0, 1, 1, 2, true);
        assert_eq!(only(&h), Checker::Agreement);
    }

    #[test]
    fn order_catches_a_gap_and_a_repeat() {
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.delivered(2, 1, 0, 3, 3, 3, true);
        assert!(h.violations.iter().any(|v| v.checker == Checker::Order));
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.delivered(2, 1, 0, 1, 1, 1, true);
        assert_eq!(only(&h), Checker::Order);
    }

    #[test]
    fn integrity_catches_unknown_and_duplicated_commands() {
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 99, true);
        assert_eq!(only(&h), Checker::Integrity);
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 5, true);
        h.delivered(2, 1, 0, 2, 2, 5, true);
        assert_eq!(only(&h), Checker::Integrity);
    }

    #[test]
    fn client_order_catches_a_session_overtaken_by_its_own_later_command() {
        let mut h = History::default();
        for (id, place) in [(1, 1), (2, 2), (3, 3)] {
            h.submitted_by(id, (7, 0, place));
        }
        h.submitted_by(4, (7, 1, 1)); // a new connection starts its own order
        h.started(1, 0, 0);
        // 2 is lost on the way: a gap is fine.
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.delivered(2, 1, 0, 2, 2, 3, true);
        h.delivered(3, 1, 0, 3, 3, 4, true);
        assert!(h.ok(), "{:?}", h.violations);
        // 2 arriving after 3 is an inversion.
        h.delivered(4, 1, 0, 4, 4, 2, true);
        assert_eq!(only(&h), Checker::ClientOrder);
    }

    #[test]
    fn crash_tolerance_catches_delivery_without_a_durable_quorum() {
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, false);
        assert_eq!(only(&h), Checker::CrashTolerance);
    }

    #[test]
    fn durability_catches_a_lost_slot() {
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.delivered(1, 1, 0, 2, 2, 2, true);
        h.final_state(9, 2, &[1]);
        assert_eq!(only(&h), Checker::Durability);
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.final_state(9, 2, &[3]);
        assert_eq!(only(&h), Checker::Durability);
    }

    #[test]
    fn recovery_catches_a_slot_lost_by_every_disk() {
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.delivered(1, 1, 0, 2, 2, 2, true);
        h.recovered(9, 1, &[1, 2]);
        assert!(h.ok());
        h.recovered(9, 2, &[1]);
        assert_eq!(only(&h), Checker::Recovery);
    }

    #[test]
    fn leader_catches_two_leaders_in_one_epoch() {
        let mut h = history();
        h.leading(1, 1, 4);
        h.leading(2, 2, 4);
        assert_eq!(only(&h), Checker::Leader);
    }

    #[test]
    fn snapshot_catches_a_wrong_restore() {
        let mut h = history();
        h.delivered(1, 1, 0, 1, 1, 1, true);
        h.delivered(1, 1, 0, 2, 2, 2, true);
        h.restored(3, 2, 1, &[1, 7]);
        assert_eq!(only(&h), Checker::Snapshot);
    }
}

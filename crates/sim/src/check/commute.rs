//! The checkers up to commutation, for the register workload (`Workload::registers`), where a
//! protocol may deliver commuting commands in different orders at different replicas (Mencius's
//! out-of-order commit, M13).
//!
//! Two commands *conflict* when they write the same register, come from the same client
//! session, or either is a barrier (or has no known operation): exactly when
//! [`crate::registers::commute`] says they do not commute. Two delivery sequences are
//! equivalent under commutation iff their projections onto every clique of a clique cover of
//! the conflict graph agree (the projection lemma of trace theory). The cover used here:
//! "register r's writes and every barrier" for each r, "client c's commands and every barrier"
//! for each c, and "the barriers".
//!
//! So for each clique there is one global projection, built like the total-order checker's
//! slot map (whoever reaches an index first names its command), and every replica incarnation's
//! projection must be a prefix of it: the same command at the same index. If that holds for
//! every incarnation, everything each replica delivered is a prefix of one common partial order
//! (a command's conflicting predecessors were all delivered before it, at every replica), and
//! its order is a linearization of it: no more, no less than equivalence up to commutation.
//!
//! A clique no command of which has been delivered anywhere holds only barriers: its projection
//! is the barriers' own, until its first write is delivered and it gets a copy of its own.

use crate::registers::Op;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use synod_core::NodeId;

/// A clique of the cover (besides the barriers' own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Clique {
    Register(u32),
    Client(u64),
}

impl fmt::Display for Clique {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Clique::Register(r) => write!(f, "register {r}"),
            Clique::Client(c) => write!(f, "client {c}'s session"),
        }
    }
}

/// A projection: command ids in order, each with the replica that delivered it there first.
type Projection = Vec<(u64, NodeId)>;

/// One delivery sequence's place in every projection: a replica incarnation, or a state being
/// compared (a snapshot, a final state).
#[derive(Default)]
struct Holder {
    /// Barriers delivered: its place in the barriers' projection, and in every clique it has
    /// no entry for (all it delivered of such a clique are the barriers).
    barriers: usize,
    at: HashMap<Clique, usize>,
    seen: HashSet<u64>,
}

/// The state of the checkers up to commutation (`History::up_to_commutation`).
#[derive(Default)]
pub(super) struct Commuting {
    /// Command id → its operation, from the submission (absent: conflicts with everything).
    ops: HashMap<u64, Op>,
    barriers: Projection,
    /// The global projection of each clique with a write delivered anywhere. A `BTreeMap`: a
    /// barrier walks them all, in an order that must not depend on a hasher.
    cliques: BTreeMap<Clique, Projection>,
    /// Command id → the tag of its first delivery anywhere.
    first: HashMap<u64, u64>,
    /// (node, incarnation) → its place; only the latest incarnation of a node is kept.
    holders: HashMap<(NodeId, u64), Holder>,
}

/// What one delivery found.
pub(super) struct Found {
    /// The first delivery of the command anywhere.
    pub first: bool,
    /// The command was already delivered by this incarnation.
    pub duplicate: bool,
    /// Disagreements with the global projections (and tags).
    pub disagree: Vec<String>,
}

impl Commuting {
    pub fn submitted(&mut self, id: u64, op: Op) {
        self.ops.insert(id, op);
    }

    /// Whether `id` was delivered anywhere.
    pub fn delivered(&self, id: u64) -> bool {
        self.first.contains_key(&id)
    }

    /// Commands delivered anywhere.
    pub fn distinct(&self) -> u64 {
        self.first.len() as u64
    }

    /// The cliques of a write; `None` for a barrier (or an unknown command: a barrier too).
    fn cliques_of(&self, id: u64) -> Option<[Clique; 2]> {
        match self.ops.get(&id).copied() {
            Some(Op::Write { register, client }) => {
                Some([Clique::Register(register), Clique::Client(client)])
            }
            _ => None,
        }
    }

    /// A replica incarnation starts from nothing (earlier incarnations of the node are done).
    pub fn start(&mut self, node: NodeId, incarnation: u64) {
        self.holders.retain(|&(n, _), _| n != node);
        self.holders.insert((node, incarnation), Holder::default());
    }

    /// An incarnation delivered `id` with `tag`.
    pub fn deliver(&mut self, node: NodeId, incarnation: u64, tag: u64, id: u64) -> Found {
        let mut h = self
            .holders
            .remove(&(node, incarnation))
            .unwrap_or_default();
        let mut found = Found {
            first: false,
            duplicate: !h.seen.insert(id),
            disagree: Vec::new(),
        };
        if !found.duplicate {
            match self.first.get(&id) {
                Some(&t) if t != tag => found.disagree.push(format!(
                    "n{node} delivered command {id} with tag {tag:#x}, first delivered with tag \
                     {t:#x}"
                )),
                Some(_) => {}
                None => {
                    self.first.insert(id, tag);
                    found.first = true;
                }
            }
            self.advance(&mut h, node, id, true, &mut found.disagree);
        }
        self.holders.insert((node, incarnation), h);
        found
    }

    /// An incarnation replaced its state with a snapshot of `ids`: what it disagrees with.
    pub fn restore(&mut self, node: NodeId, incarnation: u64, ids: &[u64]) -> Vec<String> {
        self.start(node, incarnation);
        let mut h = Holder::default();
        let bad = self.replay(&mut h, node, ids, "restored a snapshot with");
        self.holders.insert((node, incarnation), h);
        bad
    }

    /// Whether the state `ids` of `node` holds exactly the commands delivered anywhere, in an
    /// order equivalent to theirs: what is wrong, if anything.
    pub fn holds(&mut self, node: NodeId, ids: &[u64], when: &str) -> Vec<String> {
        let mut h = Holder::default();
        let mut bad = self.replay(&mut h, node, ids, "holds");
        let missing: Vec<u64> = self
            .first
            .keys()
            .filter(|id| !h.seen.contains(id))
            .copied()
            .collect();
        if let Some(least) = missing.iter().min() {
            bad.push(format!(
                "n{node} lacks {} of the {} commands delivered anywhere (the least: command \
                 {least} is missing)",
                missing.len(),
                self.distinct(),
            ));
        }
        bad.into_iter().map(|b| format!("{when}: {b}")).collect()
    }

    /// Compare a whole state with the global projections, extending none.
    fn replay(&mut self, h: &mut Holder, node: NodeId, ids: &[u64], verb: &str) -> Vec<String> {
        let mut bad = Vec::new();
        for &id in ids {
            if !h.seen.insert(id) {
                bad.push(format!("n{node} {verb} command {id} twice"));
            } else if !self.first.contains_key(&id) {
                bad.push(format!(
                    "n{node} {verb} command {id}, which no replica delivered"
                ));
            } else {
                self.advance(h, node, id, false, &mut bad);
            }
        }
        bad
    }

    /// Holder `h` (of `node`) delivers `id`: compare it with every global projection it is
    /// in, extending those it is the first to reach when `extend`.
    fn advance(
        &mut self,
        h: &mut Holder,
        node: NodeId,
        id: u64,
        extend: bool,
        bad: &mut Vec<String>,
    ) {
        match self.cliques_of(id) {
            Some(cliques) => {
                for k in cliques {
                    let j = h.at.get(&k).copied().unwrap_or(h.barriers);
                    if extend && !self.cliques.contains_key(&k) {
                        self.cliques.insert(k, self.barriers.clone());
                    }
                    let p = match self.cliques.get_mut(&k) {
                        Some(p) => p,
                        None => &mut self.barriers, // not extended: only read
                    };
                    place(p, j, id, node, extend, &k, bad);
                    h.at.insert(k, j + 1);
                }
            }
            None => {
                place(
                    &mut self.barriers,
                    h.barriers,
                    id,
                    node,
                    extend,
                    &"the barriers",
                    bad,
                );
                for (k, p) in &mut self.cliques {
                    let j = h.at.get(k).copied().unwrap_or(h.barriers);
                    place(p, j, id, node, extend, k, bad);
                    h.at.insert(*k, j + 1);
                }
                h.barriers += 1;
            }
        }
    }
}

/// `node` has `id` at index `j` of projection `p` (of `what`): the same command as there, or
/// the first to get there (appended when `extend`).
fn place(
    p: &mut Projection,
    j: usize,
    id: u64,
    node: NodeId,
    extend: bool,
    what: &dyn fmt::Display,
    bad: &mut Vec<String>,
) {
    let nth = j + 1;
    match p.get(j) {
        Some(&(known, _)) if known == id => {}
        Some(&(known, who)) => bad.push(format!(
            "n{node} and n{who} order the commands of {what} differently: command {nth} there \
             (barriers included) is command {id} at n{node} and command {known} at n{who}, \
             which do not commute"
        )),
        None if extend && j == p.len() => p.push((id, node)),
        None => bad.push(format!(
            "n{node} has command {id} as command {nth} of {what} (barriers included), but no \
             replica delivered command {nth} there"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Checker, History};
    use crate::registers::Op;

    const A: u64 = 10; // client sessions
    const B: u64 = 11;

    /// A history up to commutation with replicas n1 and n2 started, and commands 1..=7:
    /// 1 = A writes r0, 2 = B writes r1, 3 = B writes r0, 4 = A writes r1, 5 = a barrier
    /// (B's), 6 = A writes r2, 7 = A writes r0. A submitted 1, 4, 6, 7 in that order, B 2, 5, 3.
    fn history() -> History {
        let mut h = History::up_to_commutation(Vec::new());
        let w = |register, client| Op::Write { register, client };
        let ops = [
            (1, w(0, A), 1),
            (2, w(1, B), 1),
            (3, w(0, B), 3),
            (4, w(1, A), 2),
            (5, Op::Barrier { client: B }, 2),
            (6, w(2, A), 3),
            (7, w(0, A), 4),
        ];
        for (id, op, place) in ops {
            h.submitted_op(id, (op.client(), 0, place), op);
        }
        h.started(1, 0, 0);
        h.started(2, 0, 0);
        h
    }

    /// Node `n` delivers `ids` in order from its slot `from`.
    fn deliver(h: &mut History, n: u32, from: u64, ids: &[u64]) {
        for (i, &id) in ids.iter().enumerate() {
            let slot = from + i as u64;
            h.delivered(slot, n, 0, slot, 100 + id, id, true);
        }
    }

    fn checkers(h: &History) -> Vec<Checker> {
        h.violations.iter().map(|v| v.checker.clone()).collect()
    }

    #[test]
    fn commuting_commands_in_opposite_orders_pass() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 2]);
        deliver(&mut h, 2, 1, &[2, 1]);
        // A barrier after both, then more commuting pairs each way round.
        deliver(&mut h, 1, 3, &[5, 6, 3]);
        deliver(&mut h, 2, 3, &[5, 3, 6]);
        h.final_state(9, 1, &[1, 2, 5, 6, 3]);
        h.final_state(9, 2, &[2, 1, 5, 3, 6]);
        // A state equivalent to both, in a third order, restored from a snapshot and compared.
        h.restored(9, 3, 0, &[2, 1, 5, 3]);
        h.recovered(9, 3, &[1, 2, 5, 3, 6]);
        assert!(h.ok(), "{:?}", h.violations);
        assert_eq!(h.max_slot(), 5);
    }

    #[test]
    fn writes_to_one_register_in_opposite_orders_are_caught() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 3]); // both write r0
        deliver(&mut h, 2, 1, &[3]);
        assert_eq!(checkers(&h), vec![Checker::Agreement]);
        let d = &h.violations[0].detail;
        assert!(d.contains("register 0") && d.contains("n2 and n1"), "{d}");
    }

    #[test]
    fn one_sessions_commands_in_opposite_orders_are_caught() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 4]); // A's, on different registers
        deliver(&mut h, 2, 1, &[4, 1]);
        assert!(!h.ok());
        assert!(h.violations.iter().all(|v| v.checker == Checker::Agreement));
        let d = &h.violations[0].detail;
        assert!(d.contains("client 10's session"), "{d}");
    }

    #[test]
    fn an_overtaken_barrier_is_caught() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 2, 5, 6]);
        deliver(&mut h, 2, 1, &[1, 2, 6]); // 6 overtook the barrier
        assert!(!h.ok());
        assert!(h.violations.iter().all(|v| v.checker == Checker::Agreement));
        // And the other way round: a barrier first at one replica, after a write at another,
        // on a register no write to which had been delivered before.
        let mut h = history();
        deliver(&mut h, 1, 1, &[5]);
        deliver(&mut h, 2, 1, &[6]);
        assert!(!h.ok());
        assert!(h.violations.iter().all(|v| v.checker == Checker::Agreement));
    }

    #[test]
    fn a_replica_missing_a_command_at_the_end_is_caught() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 2]);
        deliver(&mut h, 2, 1, &[2]);
        h.final_state(9, 1, &[1, 2]);
        assert!(h.ok(), "{:?}", h.violations);
        h.final_state(9, 2, &[2]);
        assert_eq!(checkers(&h), vec![Checker::Durability]);
        assert!(h.violations[0].detail.contains("command 1 is missing"));
        // Recovery the same way, and a final state out of order (non-commuting) is caught too.
        h.recovered(9, 1, &[2]);
        assert_eq!(h.violations[1].checker, Checker::Recovery);
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 3]);
        h.final_state(9, 2, &[3, 1]);
        assert!(!h.ok());
        assert!(h
            .violations
            .iter()
            .all(|v| v.checker == Checker::Durability));
    }

    #[test]
    fn a_command_delivered_twice_by_one_replica_is_caught() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 2, 1]);
        assert_eq!(checkers(&h), vec![Checker::Integrity]);
        // Once per incarnation: a restarted replica delivers again from its start.
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 2]);
        h.started(1, 1, 0);
        h.delivered(5, 1, 1, 1, 101, 1, true);
        assert!(h.ok(), "{:?}", h.violations);
        // And only submitted commands (99 was not: it counts as a barrier).
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 99]);
        assert_eq!(checkers(&h), vec![Checker::Integrity]);
    }

    #[test]
    fn a_snapshot_out_of_order_is_caught() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 3]);
        h.restored(9, 2, 1, &[3, 1]);
        assert!(!h.ok());
        assert!(h.violations.iter().all(|v| v.checker == Checker::Snapshot));
    }

    /// Against brute force: replica n1 delivers every command in some order, n2 a prefix of
    /// another order, interleaved at random. The checkers must object iff some conflicting
    /// pair x before y at n1 has y at n2 without x before it.
    #[test]
    fn exactly_the_orders_equivalent_up_to_commutation_pass() {
        use rand_core::{RngCore, SeedableRng};
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(15);
        let (mut passed, mut caught) = (0, 0);
        for _ in 0..3_000 {
            let n = 2 + rng.next_u64() as usize % 7;
            let ops: Vec<Op> = (0..n)
                .map(|_| {
                    let client = rng.next_u64() % 3;
                    if rng.next_u64() % 10 == 0 {
                        Op::Barrier { client }
                    } else {
                        let register = (rng.next_u64() % 3) as u32;
                        Op::Write { register, client }
                    }
                })
                .collect();
            let mut h = History::up_to_commutation(Vec::new());
            for (i, &op) in ops.iter().enumerate() {
                h.submitted_op(i as u64 + 1, (op.client(), 0, 0), op); // no session order
            }
            h.started(1, 0, 0);
            h.started(2, 0, 0);
            let mut shuffled = || {
                let mut v: Vec<u64> = (1..=n as u64).collect();
                for i in (1..v.len()).rev() {
                    v.swap(i, rng.next_u64() as usize % (i + 1));
                }
                v
            };
            let a = shuffled();
            let mut b = shuffled();
            b.truncate(rng.next_u64() as usize % (n + 1));
            let conflict = |x: u64, y: u64| !ops[x as usize - 1].commutes_with(ops[y as usize - 1]);
            let pos = |v: &[u64], x: u64| v.iter().position(|&z| z == x);
            let expected_ok = (0..n).all(|i| {
                (i + 1..n).all(|j| {
                    let (x, y) = (a[i], a[j]);
                    !conflict(x, y)
                        || match (pos(&b, x), pos(&b, y)) {
                            (_, None) => true,
                            (Some(px), Some(py)) => px < py,
                            (None, Some(_)) => false,
                        }
                })
            });
            let (mut i, mut j) = (0, 0);
            while i < a.len() || j < b.len() {
                if j == b.len() || (i < a.len() && rng.next_u64() % 2 == 0) {
                    i += 1;
                    h.delivered(i as u64, 1, 0, i as u64, a[i - 1], a[i - 1], true);
                } else {
                    j += 1;
                    h.delivered(j as u64, 2, 0, j as u64, b[j - 1], b[j - 1], true);
                }
            }
            assert_eq!(
                h.ok(),
                expected_ok,
                "ops {ops:?} n1 {a:?} n2 {b:?}: {:?}",
                h.violations
            );
            if expected_ok {
                passed += 1;
            } else {
                caught += 1;
            }
        }
        assert!(
            passed > 300 && caught > 300,
            "passed {passed}, caught {caught}"
        );
    }

    #[test]
    fn tags_and_client_order_are_still_checked() {
        let mut h = history();
        deliver(&mut h, 1, 1, &[1]);
        h.delivered(2, 2, 0, 1, 7, 1, true); // command 1 under another tag
        assert_eq!(checkers(&h), vec![Checker::Agreement]);
        // A's 4th command (7) first delivered before its 2nd (4): every replica agrees, but
        // the session's order is broken.
        let mut h = history();
        deliver(&mut h, 1, 1, &[1, 7, 4]);
        assert_eq!(checkers(&h), vec![Checker::ClientOrder]);
    }
}

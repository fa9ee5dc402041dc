//! PRIME's failure detector (sconekv.md §2.4): the members form a ring sorted by node id; each
//! node is watched by its K **guardians** (the K members after it on the ring) and watches its
//! **protegees** (the K before it). A node heartbeats its guardians. A guardian that has not heard
//! a protegee for `suspect_after` **suspects** it and tells the protegee's other guardians; a
//! guardian that heard it recently answers **ALIVE**, which withdraws the suspicion everywhere it
//! lands; once **more than half** of the guardians suspect, the lowest-id suspecting guardian
//! decides the removal (its LEAVE goes through EpTO). If that guardian is itself gone, any
//! suspecting guardian decides after twice the bound, so a decision never waits on one node.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Member, NodeId, TimeUs};

/// The K members after `node` on the ring sorted by id (fewer in a small view), `node` excluded.
pub fn guardians(ring: &[Member], node: NodeId, k: usize) -> Vec<NodeId> {
    let others = ring
        .len()
        .saturating_sub(usize::from(ring.iter().any(|m| m.node == node)));
    let k = k.min(others);
    let start = ring.partition_point(|m| m.node <= node);
    (0..ring.len())
        .map(|i| ring[(start + i) % ring.len()].node)
        .filter(|&n| n != node)
        .take(k)
        .collect()
}

/// What the detector asks its node to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Send ⟨SUSPICION | suspect⟩ to `to` (another guardian of `suspect`).
    Suspicion { to: NodeId, suspect: Member },
    /// Send ⟨ALIVE | suspect⟩ to `to`: this guardian heard it recently.
    Alive { to: NodeId, suspect: Member },
    /// A majority of the suspect's guardians agree: broadcast its LEAVE.
    Decide(Member),
    /// Ask a silent protegee directly for a heartbeat: during churn a node's view may name
    /// other guardians than the guardian's view does, so it heartbeats others; a probe it
    /// answers withdraws the suspicion before a majority forms.
    Probe { to: NodeId },
}

#[derive(Clone, Debug)]
pub struct Detector {
    me: NodeId,
    k: usize,
    suspect_after_us: TimeUs,
    ring: Vec<Member>,
    /// When each protegee was last heard (or became a protegee, or was vouched for).
    last_heard: BTreeMap<NodeId, TimeUs>,
    /// When each protegee's last heartbeat arrived: only a real heartbeat refutes a suspicion
    /// (a guardian new to a protegee gives it a full bound before suspecting it, but must not
    /// vouch for it on that account, or churn would keep a dead node in the view forever).
    last_beat: BTreeMap<NodeId, TimeUs>,
    /// Per suspect: the guardians known to suspect it, and when this node first learnt of it.
    suspicions: BTreeMap<Member, (BTreeSet<NodeId>, TimeUs)>,
    /// Removals decided, and when: decided again after twice the bound if the suspect is still
    /// in the view (its LEAVE was lost).
    decided: BTreeMap<Member, TimeUs>,
    raised: u64,
}

impl Detector {
    pub fn new(me: NodeId, k: usize, suspect_after_us: TimeUs) -> Self {
        assert!(k >= 1 && suspect_after_us > 0);
        Detector {
            me,
            k,
            suspect_after_us,
            ring: Vec::new(),
            last_heard: BTreeMap::new(),
            last_beat: BTreeMap::new(),
            suspicions: BTreeMap::new(),
            decided: BTreeMap::new(),
            raised: 0,
        }
    }

    /// Suspicions this node raised (a metric).
    pub fn raised(&self) -> u64 {
        self.raised
    }

    /// Suspects this node currently knows of.
    pub fn suspects(&self) -> usize {
        self.suspicions.len()
    }

    /// The view changed: new guardians and protegees; a new protegee gets a full bound.
    pub fn on_view(&mut self, now: TimeUs, ring: &[Member]) {
        self.ring = ring.to_vec();
        let protegees = self.protegees();
        self.last_heard.retain(|p, _| protegees.contains(p));
        self.last_beat.retain(|p, _| protegees.contains(p));
        for p in protegees {
            self.last_heard.entry(p).or_insert(now);
        }
        let member = |m: &Member| ring.binary_search(m).is_ok();
        self.suspicions.retain(|m, _| member(m));
        self.decided.retain(|m, _| member(m));
    }

    /// The guardians this node heartbeats.
    pub fn my_guardians(&self) -> Vec<NodeId> {
        guardians(&self.ring, self.me, self.k)
    }

    /// The members this node watches: the K before it on the ring (it is their guardian).
    pub fn protegees(&self) -> BTreeSet<NodeId> {
        let n = self.ring.len();
        let Ok(at) = self.ring.binary_search_by_key(&self.me, |m| m.node) else {
            return BTreeSet::new();
        };
        (1..=self.k.min(n - 1))
            .map(|i| self.ring[(at + n - i) % n].node)
            .collect()
    }

    fn member(&self, node: NodeId) -> Option<Member> {
        let i = self.ring.binary_search_by_key(&node, |m| m.node).ok()?;
        Some(self.ring[i])
    }

    /// A heartbeat from `from`: it is alive; a suspicion of it is withdrawn and refuted.
    pub fn on_heartbeat(&mut self, now: TimeUs, from: NodeId, out: &mut Vec<Signal>) {
        let Some(slot) = self.last_heard.get_mut(&from) else {
            return;
        };
        *slot = now;
        self.last_beat.insert(from, now);
        let Some(m) = self.member(from) else { return };
        if let Some((who, _)) = self.suspicions.remove(&m) {
            for to in who.into_iter().filter(|&g| g != self.me) {
                out.push(Signal::Alive { to, suspect: m });
            }
        }
    }

    /// ⟨SUSPICION | suspect⟩ from guardian `from`.
    pub fn on_suspicion(
        &mut self,
        now: TimeUs,
        from: NodeId,
        suspect: Member,
        out: &mut Vec<Signal>,
    ) {
        if self.member(suspect.node) != Some(suspect) {
            return;
        }
        let recent = self
            .last_beat
            .get(&suspect.node)
            .is_some_and(|&t| now.saturating_sub(t) < self.suspect_after_us);
        if recent {
            out.push(Signal::Alive { to: from, suspect });
            return;
        }
        self.suspicions
            .entry(suspect)
            .or_insert_with(|| (BTreeSet::new(), now))
            .0
            .insert(from);
        self.maybe_decide(now, suspect, out);
    }

    /// ⟨ALIVE | suspect⟩: someone heard it; withdraw, and give it a new bound here.
    pub fn on_alive(&mut self, now: TimeUs, suspect: Member) {
        self.suspicions.remove(&suspect);
        if let Some(t) = self.last_heard.get_mut(&suspect.node) {
            *t = (*t).max(now);
        }
    }

    /// Check the protegees: suspect the silent ones (and repeat the suspicion, messages may be
    /// lost), decide where a majority agrees.
    pub fn check(&mut self, now: TimeUs, out: &mut Vec<Signal>) {
        let silent: Vec<NodeId> = self
            .last_heard
            .iter()
            .filter(|(_, &t)| now.saturating_sub(t) >= self.suspect_after_us)
            .map(|(&p, _)| p)
            .collect();
        let cut_off = self.cut_off(now);
        for p in silent {
            if cut_off {
                // Still ask: a probe answered brings the protegee back.
                out.push(Signal::Probe { to: p });
                continue;
            }
            let Some(m) = self.member(p) else { continue };
            let entry = self
                .suspicions
                .entry(m)
                .or_insert_with(|| (BTreeSet::new(), now));
            if entry.0.insert(self.me) {
                self.raised += 1;
            }
            out.push(Signal::Probe { to: p });
            for to in guardians(&self.ring, p, self.k) {
                if to != self.me {
                    out.push(Signal::Suspicion { to, suspect: m });
                }
            }
            self.maybe_decide(now, m, out);
        }
    }

    /// Whether this node hears fewer than half of its protegees (itself counted): then it is
    /// probably on the minority side of a partition, and neither suspects nor decides.
    fn cut_off(&self, now: TimeUs) -> bool {
        let alive = self
            .last_heard
            .values()
            .filter(|&&t| now.saturating_sub(t) < self.suspect_after_us)
            .count();
        2 * (alive + 1) < self.last_heard.len() + 1
    }

    fn maybe_decide(&mut self, now: TimeUs, suspect: Member, out: &mut Vec<Signal>) {
        if self
            .decided
            .get(&suspect)
            .is_some_and(|&t| now.saturating_sub(t) < 2 * self.suspect_after_us)
        {
            return;
        }
        let Some((who, since)) = self.suspicions.get(&suspect) else {
            return;
        };
        if !who.contains(&self.me) {
            return; // only a guardian that suspects it too decides
        }
        let gs = guardians(&self.ring, suspect.node, self.k);
        let agree: Vec<NodeId> = gs.iter().copied().filter(|g| who.contains(g)).collect();
        if agree.len() * 2 <= gs.len() {
            return;
        }
        // A guardian cut off with a minority hears few of its own protegees: it decides
        // nothing, or a partition would let the minority remove the majority's nodes one after
        // another (each removal shrinks the minority's ring until its own nodes become the
        // guardians of the others: found by the partition phase of the simulator).
        if self.cut_off(now) {
            return;
        }
        let first = agree.iter().min() == Some(&self.me);
        if first || now.saturating_sub(*since) >= 2 * self.suspect_after_us {
            self.decided.insert(suspect, now);
            out.push(Signal::Decide(suspect));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(n: u32) -> Vec<Member> {
        (1..=n).map(|i| Member::new(i, 1)).collect()
    }

    /// The protegees are exactly the nodes whose guardians include this one.
    #[test]
    fn protegees_are_the_inverse_of_guardians() {
        for n in [1u32, 2, 3, 5, 8, 20] {
            let r = ring(n);
            for k in [1usize, 3, 7] {
                for me in 1..=n {
                    let mut d = Detector::new(me, k, 1);
                    d.on_view(0, &r);
                    let slow: BTreeSet<NodeId> = (1..=n)
                        .filter(|&p| p != me && guardians(&r, p, k).contains(&me))
                        .collect();
                    assert_eq!(d.protegees(), slow, "n {n} k {k} me {me}");
                }
            }
        }
    }

    #[test]
    fn guardians_follow_on_the_ring_and_wrap() {
        let r = ring(10);
        assert_eq!(guardians(&r, 3, 3), vec![4, 5, 6]);
        assert_eq!(guardians(&r, 9, 3), vec![10, 1, 2]);
        assert_eq!(guardians(&r[..2], 1, 7), vec![2]);
        assert_eq!(guardians(&r[..1], 1, 7), Vec::<NodeId>::new());
        // A node not in the ring (a joiner) has guardians too: its would-be successors.
        let without_5: Vec<Member> = r.iter().copied().filter(|m| m.node != 5).collect();
        assert_eq!(guardians(&without_5, 5, 2), vec![6, 7]);
    }

    /// Three guardians of node 1 (k = 3): two suspecting is a majority, one is not; ALIVE from a
    /// guardian that heard it withdraws the suspicion.
    #[test]
    fn a_majority_of_guardians_decides_and_alive_refutes() {
        let r = ring(8);
        let bound = 1_000;
        let mut g2 = Detector::new(2, 3, bound);
        g2.on_view(0, &r);
        assert_eq!(g2.protegees(), BTreeSet::from([1, 7, 8]));
        let mut out = Vec::new();
        g2.on_heartbeat(1_500, 7, &mut out);
        g2.on_heartbeat(1_500, 8, &mut out);
        g2.check(2_000, &mut out);
        assert!(
            out.contains(&Signal::Probe { to: 1 }),
            "the suspect is probed: {out:?}"
        );
        let suspicions: Vec<_> = out
            .iter()
            .filter(|s| matches!(s, Signal::Suspicion { suspect, .. } if suspect.node == 1))
            .collect();
        assert_eq!(
            suspicions.len(),
            2,
            "told the other guardians (3 and 4): {out:?}"
        );
        assert!(
            !out.iter().any(|s| matches!(s, Signal::Decide(_))),
            "one of three is no majority"
        );
        out.clear();
        g2.on_suspicion(2_100, 3, Member::new(1, 1), &mut out);
        assert_eq!(
            out,
            vec![Signal::Decide(Member::new(1, 1))],
            "2 of 3, and 2 is the lowest"
        );
        // Guardian 3 suspects too, but 2 is lower: 3 waits (until twice the bound).
        let mut g3 = Detector::new(3, 3, bound);
        g3.on_view(0, &r);
        out.clear();
        g3.on_heartbeat(1_500, 2, &mut out);
        g3.on_heartbeat(1_500, 8, &mut out);
        g3.check(2_000, &mut out);
        g3.on_suspicion(2_000, 2, Member::new(1, 1), &mut out);
        assert!(!out.iter().any(|s| matches!(s, Signal::Decide(_))));
        out.clear();
        g3.on_heartbeat(4_000, 2, &mut out);
        g3.on_heartbeat(4_000, 8, &mut out);
        g3.check(4_100, &mut out);
        assert!(
            out.contains(&Signal::Decide(Member::new(1, 1))),
            "the fallback: {out:?}"
        );
        // Guardian 4 heard node 1 recently: it refutes.
        let mut g4 = Detector::new(4, 3, bound);
        g4.on_view(0, &r);
        out.clear();
        g4.on_heartbeat(1_900, 1, &mut out);
        g4.on_suspicion(2_000, 2, Member::new(1, 1), &mut out);
        assert_eq!(
            out,
            vec![Signal::Alive {
                to: 2,
                suspect: Member::new(1, 1)
            }]
        );
        g2.on_alive(2_000, Member::new(1, 1));
        assert_eq!(g2.suspects(), 0);
    }

    /// A guardian new to a protegee gives it a full bound, but cannot vouch for it: only a
    /// heartbeat it received refutes a suspicion (otherwise a ring that keeps changing keeps a
    /// dead node in the view: found by the churn phase of the simulator).
    #[test]
    fn only_a_heartbeat_refutes() {
        let r = ring(8);
        let mut g4 = Detector::new(4, 3, 1_000);
        g4.on_view(1_500, &r); // node 1 became a protegee just now
        let mut out = Vec::new();
        g4.on_suspicion(2_000, 2, Member::new(1, 1), &mut out);
        assert!(out.is_empty(), "no ALIVE without a heartbeat: {out:?}");
    }

    /// A guardian that hears fewer than half of its own protegees is probably cut off: it does
    /// not decide removals (a minority partition would otherwise remove the majority).
    #[test]
    fn a_cut_off_guardian_decides_nothing() {
        let r = ring(20);
        let mut g = Detector::new(10, 5, 1_000);
        g.on_view(0, &r);
        let mut out = Vec::new();
        // Only node 9 keeps heartbeating; 5, 6, 7 and 8 went silent.
        g.on_heartbeat(1_500, 9, &mut out);
        g.check(2_000, &mut out);
        out.clear();
        for from in [11, 12] {
            g.on_suspicion(2_000, from, Member::new(8, 1), &mut out);
        }
        assert!(
            !out.iter().any(|s| matches!(s, Signal::Decide(_))),
            "{out:?}"
        );
        // With most of its protegees heard, the same suspicion is decided.
        let mut h = Detector::new(10, 5, 1_000);
        h.on_view(0, &r);
        for p in [5, 6, 7, 9] {
            h.on_heartbeat(1_500, p, &mut out);
        }
        out.clear();
        h.check(2_000, &mut out);
        for from in [11, 12] {
            h.on_suspicion(2_000, from, Member::new(8, 1), &mut out);
        }
        assert!(out.contains(&Signal::Decide(Member::new(8, 1))), "{out:?}");
    }

    /// A detector that decided without a majority would remove live nodes: the check counts
    /// only the suspect's own guardians, so suspicions from elsewhere do not add up.
    #[test]
    fn suspicions_from_non_guardians_do_not_count() {
        let r = ring(8);
        let mut g2 = Detector::new(2, 3, 1_000);
        g2.on_view(0, &r);
        let mut out = Vec::new();
        g2.check(2_000, &mut out);
        out.clear();
        g2.on_suspicion(2_000, 7, Member::new(1, 1), &mut out);
        g2.on_suspicion(2_000, 8, Member::new(1, 1), &mut out);
        assert!(!out.iter().any(|s| matches!(s, Signal::Decide(_))));
    }
}

//! Revocation (mencius.md §3.3 Revoke, Rule 3, Optimization 3, §4.6): when a replica is
//! suspected, one elected revoker (the lowest-positioned replica not suspected) runs the three
//! Paxos phases over a block of the suspect's instances at a ballot of its own
//! (`round · n + position`, round ≥ 1; ballot 0 is the owner's). Phase 1 collects what the
//! acceptors accepted in the block, phase 2 proposes the highest-ballot value per instance and
//! a no-op everywhere else, phase 3 (DECIDE) tells everyone. Blocks are `[C_q, I_p + 2β]` once
//! `C_q < I_p + β` (Opt. 3). The failure detector decides only when this runs, never what is
//! chosen (M11).

use crate::msg::{Accepted, Block, Body, Range, Rec, DECIDED, MAX_BLOCKS};
use crate::{Bug, Mencius, MenciusActions};
use std::collections::BTreeMap;
use synod_core::{Command, StorageOp, TimeUs};

/// A revocation under way.
#[derive(Clone, Debug)]
pub(crate) struct Revocation {
    pub ballot: u64,
    pub range: Range,
    /// 1: collecting ACKs; 2: collecting ACCEPTEDs.
    pub phase: u8,
    pub acks: BTreeMap<usize, (Vec<Accepted>, Vec<Block>)>,
    pub accepted: u64,
    pub values: Vec<(u64, Vec<Command>)>,
    /// When it is given up and started again (randomised, so two revokers that disagree on
    /// who is elected do not duel in lockstep).
    pub retry_at: TimeUs,
}

/// The longest block one revocation covers, in instances.
const MAX_RANGE: u64 = 1 << 40;

fn overlaps(a: &Range, b: &Range, n: u64) -> bool {
    a.from % n == b.from % n && a.from <= b.to && a.to >= b.from
}

impl Mencius {
    /// The highest ballot this acceptor promised for instance `i` (0: only the owner's).
    pub(crate) fn promised(&self, i: u64) -> u64 {
        let n = self.n;
        self.hard
            .promises
            .iter()
            .filter(|b| b.range.covers(i, n))
            .map(|b| b.ballot)
            .max()
            .unwrap_or(0)
    }

    /// Whether this acceptor accepted a revocation's no-op for instance `i`.
    pub(crate) fn noop_accepted(&self, i: u64) -> bool {
        let n = self.n;
        self.hard.noops.iter().any(|b| b.range.covers(i, n))
    }

    fn max_promise(&self, r: &Range) -> u64 {
        let n = self.n;
        self.hard
            .promises
            .iter()
            .filter(|b| overlaps(&b.range, r, n))
            .map(|b| b.ballot)
            .max()
            .unwrap_or(0)
    }

    /// A well-formed block from `from`: one owner's instances, a ballot `from` owns.
    fn valid_block(&self, from: usize, ballot: u64, r: &Range) -> bool {
        let n = self.n;
        r.from % n == r.to % n
            && r.to - r.from <= MAX_RANGE
            && ballot >= n
            && (ballot % n) as usize == from
    }

    /// The replica elected to revoke `q`: the lowest position this replica does not suspect.
    fn revoker_for(&self, q: usize) -> Option<usize> {
        (0..self.n as usize).find(|&p| p != q && !self.suspected(p))
    }

    /// Rule 3 with Optimization 3, checked on every tick.
    pub(crate) fn revoke_timers(&mut self, out: &mut MenciusActions) {
        let dueling = self.opt.bug == Some(Bug::DuelingRevokers);
        // An instance that blocks the commit point for long is revoked even if its owner is
        // not suspected: a revocation whose revoker gave up leaves acceptors promised to a
        // ballot that never finishes, and the owner's resent SUGGEST cannot pass them.
        // Only when something waits behind it: in an idle cluster the commit point always
        // sits at some replica's next instance, and that is no reason to revoke it.
        let waiting = self
            .insts
            .range(self.expected + 1..)
            .any(|(_, x)| x.suggested || x.own || x.learned.is_some());
        let stuck_owner = (waiting
            && self.decided(self.expected).is_none()
            && self.now.saturating_sub(self.stuck.1) > 2 * self.opt.suspect_timeout_us)
            .then(|| self.owner(self.expected));
        for q in 0..self.n as usize {
            let stuck = stuck_owner == Some(q);
            if q == self.me && !stuck {
                continue;
            }
            if let Some(r) = self.revocations.get(&q) {
                if self.now < r.retry_at {
                    continue;
                }
                self.revocations.remove(&q);
            }
            // One elected revoker, also for a stuck instance of a live owner (the owner itself
            // never revokes: two revokers of one block preempt each other).
            let elected = q != self.me && self.revoker_for(q) == Some(self.me);
            if !(self.suspected(q) || stuck) || (!dueling && !elected) {
                continue;
            }
            if self.revoke_backoff.get(&q).is_some_and(|&t| self.now < t) {
                continue;
            }
            // C_q: the first instance of q not decided here.
            let beta = self.opt.beta;
            let limit = self.index.saturating_add(beta);
            let mut c = self.own_at_or_after(q, self.expected);
            while c < limit {
                if let Some(b) = self.decided_blocks.iter().find(|b| b.covers(c, self.n)) {
                    c = b.to + self.n;
                    continue;
                }
                if self.decided(c).is_none() {
                    break;
                }
                c += self.n;
            }
            if c >= limit {
                continue;
            }
            let end = self.index.saturating_add(2 * beta);
            let to = self.own_at_or_after(q, end + 1) - self.n;
            self.start_revocation(
                q,
                Range {
                    from: c,
                    to: to.max(c),
                },
                out,
            );
        }
    }

    fn start_revocation(&mut self, q: usize, range: Range, out: &mut MenciusActions) {
        let round = self.hard.round.max(self.round_seen) + 1;
        self.hard.round = round;
        self.save_hard(out);
        let ballot = round * self.n + self.me as u64;
        self.counters.revocations += 1;
        let t = self.opt.revoke_timeout_us;
        let retry_at = self.now + t + self.rng.below(t.max(1));
        self.revocations.insert(
            q,
            Revocation {
                ballot,
                range,
                phase: 1,
                acks: BTreeMap::new(),
                accepted: 0,
                values: Vec::new(),
                retry_at,
            },
        );
        self.broadcast(Body::Prepare { ballot, range }, 0, out);
        let me = self.me;
        self.on_prepare(me, ballot, range, out);
    }

    /// Phase 1 at an acceptor: promise (durably) and report what was accepted in the block.
    /// The owner, if alive, gives up suggesting in the block (its index moves past it).
    pub(crate) fn on_prepare(
        &mut self,
        from: usize,
        ballot: u64,
        range: Range,
        out: &mut MenciusActions,
    ) {
        if !self.valid_block(from, ballot, &range) {
            return;
        }
        if range.from < self.expected {
            // The block starts at an instance decided here: the revoker is behind. Tell it
            // what is decided (Sect. 4.6) instead of a promise; a log compacted below the
            // block would otherwise report its chosen values as never accepted.
            self.on_need(from, range.from, out);
            return;
        }
        let owner = (range.from % self.n) as usize;
        if owner == self.me {
            let next = self.own_after(self.me, range.to);
            self.raise_index(next, None, out);
        }
        let p = self.max_promise(&range);
        if ballot <= p || self.hard.promises.len() >= MAX_BLOCKS {
            self.send(
                from,
                Body::Nack {
                    ballot,
                    range,
                    promised: p,
                },
                0,
                out,
            );
            return;
        }
        self.hard.promises.push(Block { range, ballot });
        let s = self.save_hard(out);
        let n = self.n;
        let values: Vec<Accepted> = self
            .insts
            .range(range.from..=range.to)
            .filter(|(&i, _)| i % n == range.from % n)
            .filter_map(|(&i, x)| {
                x.accepted.as_ref().map(|(b, cs)| Accepted {
                    instance: i,
                    ballot: *b,
                    commands: cs.clone(),
                })
            })
            .collect();
        let noops: Vec<Block> = self
            .hard
            .noops
            .iter()
            .filter(|b| overlaps(&b.range, &range, n))
            .copied()
            .collect();
        self.send(
            from,
            Body::Ack {
                ballot,
                range,
                values,
                noops,
            },
            s,
            out,
        );
    }

    pub(crate) fn on_ack(
        &mut self,
        from: usize,
        ballot: u64,
        range: Range,
        values: Vec<Accepted>,
        noops: Vec<Block>,
        out: &mut MenciusActions,
    ) {
        let owner = (range.from % self.n) as usize;
        let quorum = self.quorum();
        let n = self.n;
        let Some(r) = self.revocations.get_mut(&owner) else {
            return;
        };
        if r.ballot != ballot || r.range != range || r.phase != 1 {
            return;
        }
        r.acks.insert(from, (values, noops));
        if r.acks.len() < quorum {
            return;
        }
        // The highest-ballot value per instance; a no-op accepted in a higher ballot wins.
        let mut best: BTreeMap<u64, (u64, Vec<Command>)> = BTreeMap::new();
        for (vs, _) in r.acks.values() {
            for a in vs {
                if !range.covers(a.instance, n) || a.commands.is_empty() {
                    continue;
                }
                let e = best
                    .entry(a.instance)
                    .or_insert((a.ballot, a.commands.clone()));
                if a.ballot > e.0 {
                    *e = (a.ballot, a.commands.clone());
                }
            }
        }
        let noop_ballot = |i: u64| {
            r.acks
                .values()
                .flat_map(|(_, bs)| bs.iter())
                .filter(|b| b.range.covers(i, n))
                .map(|b| b.ballot)
                .max()
                .unwrap_or(0)
        };
        let mut chosen: Vec<(u64, Vec<Command>)> = best
            .into_iter()
            .filter(|(i, (b, _))| noop_ballot(*i) <= *b)
            .map(|(i, (_, v))| (i, v))
            .collect();
        if self.opt.bug == Some(Bug::DuelingRevokers) {
            chosen.clear(); // overwrite whatever phase 1 found
        }
        r.phase = 2;
        r.values = chosen.clone();
        let body = Body::Propose {
            ballot,
            range,
            values: chosen.clone(),
        };
        self.broadcast(body, 0, out);
        let me = self.me;
        self.on_propose(me, ballot, range, chosen, out);
    }

    /// The promise or no-op block that stops a ballot-0 accept of instance `i`, if any.
    pub(crate) fn blocking(&self, i: u64) -> Option<Block> {
        let n = self.n;
        self.hard
            .promises
            .iter()
            .chain(self.hard.noops.iter())
            .filter(|b| b.range.covers(i, n))
            .max_by_key(|b| b.range.to)
            .copied()
    }

    pub(crate) fn on_nack(
        &mut self,
        _from: usize,
        ballot: u64,
        range: Range,
        promised: u64,
        out: &mut MenciusActions,
    ) {
        if ballot == 0 {
            // An own SUGGEST refused inside a revoked block: rejoin past it.
            if (range.from % self.n) as usize == self.me && range.to - range.from <= MAX_RANGE {
                let next = self.own_after(self.me, range.to);
                self.raise_index(next, None, out);
            }
            return;
        }
        self.round_seen = self.round_seen.max(promised / self.n);
        let owner = (range.from % self.n) as usize;
        if self
            .revocations
            .get(&owner)
            .is_some_and(|r| r.ballot == ballot)
        {
            self.revocations.remove(&owner);
            // Preempted by another revoker: wait a random while before trying again, so two
            // revokers that disagree on who is elected do not preempt each other forever.
            let t = self.opt.revoke_timeout_us.max(1);
            let at = self.now + self.rng.below(t);
            self.revoke_backoff.insert(owner, at);
        }
    }

    /// Phase 2 at an acceptor: accept the block unless promised higher; values replace the
    /// records at their instances, the rest is a no-op block in the hard state.
    pub(crate) fn on_propose(
        &mut self,
        from: usize,
        ballot: u64,
        range: Range,
        values: Vec<(u64, Vec<Command>)>,
        out: &mut MenciusActions,
    ) {
        if !self.valid_block(from, ballot, &range) {
            return;
        }
        if range.from < self.expected {
            self.on_need(from, range.from, out);
            return;
        }
        let p = self.max_promise(&range);
        if ballot < p || self.hard.noops.len() >= MAX_BLOCKS {
            self.send(
                from,
                Body::Nack {
                    ballot,
                    range,
                    promised: p,
                },
                0,
                out,
            );
            return;
        }
        let owner = (range.from % self.n) as usize;
        if owner == self.me {
            let next = self.own_after(self.me, range.to);
            self.raise_index(next, None, out);
        }
        let n = self.n;
        let mut recs = Vec::new();
        for (i, cs) in values {
            if !range.covers(i, n) || i < self.base {
                continue;
            }
            if self
                .insts
                .get(&i)
                .and_then(|x| x.accepted.as_ref())
                .is_some_and(|a| a.0 == DECIDED)
            {
                continue; // known decided: the record that says so stays
            }
            let x = self.insts.entry(i).or_default();
            x.accepted = Some((ballot, cs.clone()));
            x.suggested = true;
            recs.push(Rec {
                instance: i,
                ballot,
                own: x.own,
                commands: cs,
            });
        }
        let mut s = 0;
        if !recs.is_empty() {
            s = self.persist(StorageOp::Append(recs), out);
        }
        self.hard.noops.push(Block { range, ballot });
        if ballot > p {
            self.hard.promises.push(Block { range, ballot });
        }
        let h = self.save_hard(out);
        self.send(from, Body::Accepted { ballot, range }, s.max(h), out);
    }

    pub(crate) fn on_accepted(
        &mut self,
        from: usize,
        ballot: u64,
        range: Range,
        out: &mut MenciusActions,
    ) {
        let owner = (range.from % self.n) as usize;
        let quorum = self.quorum();
        let Some(r) = self.revocations.get_mut(&owner) else {
            return;
        };
        if r.ballot != ballot || r.range != range || r.phase != 2 {
            return;
        }
        r.accepted |= 1 << from;
        if (r.accepted.count_ones() as usize) < quorum {
            return;
        }
        let r = self.revocations.remove(&owner).expect("present");
        self.counters.revoked_instances += (range.to - range.from) / self.n + 1;
        self.broadcast(
            Body::Decide {
                range,
                values: r.values.clone(),
            },
            0,
            out,
        );
        self.learn_block(range, r.values, out);
    }

    /// A revoked block is decided: no-op everywhere but the listed values. The revoked owner
    /// moves its index past the block and suggests its requests again (Rule 4).
    pub(crate) fn learn_block(
        &mut self,
        range: Range,
        values: Vec<(u64, Vec<Command>)>,
        out: &mut MenciusActions,
    ) {
        let n = self.n;
        if range.from % n != range.to % n || range.to - range.from > MAX_RANGE {
            return;
        }
        let owner = (range.from % n) as usize;
        let listed: BTreeMap<u64, Vec<Command>> = values
            .into_iter()
            .filter(|(i, _)| range.covers(*i, n))
            .collect();
        // Instances held here and not listed: decided no-op (H4 checked by `learn`).
        let start = range.from.max(self.expected);
        let held: Vec<u64> = self
            .insts
            .range(start..range.to.saturating_add(1).max(start))
            .filter(|(&i, x)| {
                i % n == range.from % n
                    && !listed.contains_key(&i)
                    && (x.learned.is_some() || x.own)
            })
            .map(|(&i, _)| i)
            .collect();
        for i in held {
            self.learn(i, Vec::new(), out);
        }
        let mut recs = Vec::new();
        for (i, v) in listed {
            if i >= self.base {
                let x = self.insts.entry(i).or_default();
                if x.accepted.as_ref().is_none_or(|a| a.0 != DECIDED) {
                    x.accepted = Some((DECIDED, v.clone()));
                    recs.push(Rec {
                        instance: i,
                        ballot: DECIDED,
                        own: x.own,
                        commands: v.clone(),
                    });
                }
            }
            self.learn(i, v, out);
        }
        if !recs.is_empty() {
            self.persist(StorageOp::Append(recs), out);
        }
        if range.to >= self.expected && !self.decided_blocks.contains(&range) {
            self.decided_blocks.push(range);
        }
        let fresh = range.to >= self.base && !self.hard.decided.contains(&range);
        if fresh && self.hard.decided.len() < MAX_BLOCKS {
            // Durable, so that a restart does not revoke the block again (its values are in
            // the records; the rest needs no record).
            self.hard.decided.push(range);
            let next = self.own_after(self.me, range.to);
            if owner == self.me && next > self.index {
                self.hard.index = next;
            }
            self.save_hard(out);
        }
        if owner == self.me {
            let next = self.own_after(self.me, range.to);
            self.raise_index(next, None, out);
        }
    }
}

//! The failure-free path (mencius.md §3.4–3.6): Rule 1 (suggest at once to the own index),
//! Coordinated Paxos's ballot 0 (accept, learn), Rule 2 (skip on seeing a higher instance),
//! Optimizations 1 and 2 (skips inferred from ACCEPT and SUGGEST on an in-sync stream),
//! Accelerator 1 (explicit SKIP after α skips or τ), and Rule 4 (re-suggest a request whose
//! instance became a no-op).

use crate::msg::{Body, Rec};
use crate::{Bug, Mencius, MenciusActions};
use synod_core::{Command, Event, Reject, StorageOp};

impl Mencius {
    /// Suggest what waits, one instance per batch, while the window allows.
    pub(crate) fn flush_queue(&mut self, out: &mut MenciusActions) {
        while !self.queue.is_empty() && self.inflight.len() < self.opt.max_inflight {
            let k = self
                .queue
                .len()
                .min(self.opt.max_batch.clamp(1, crate::msg::MAX_BATCH));
            let batch: Vec<Command> = self.queue.drain(..k).collect();
            self.suggest(batch, out);
        }
    }

    /// Rule 1: suggest `commands` to instance I_p and move I_p to the next own instance. The
    /// record (value and, through it, the index) is durable before SUGGEST leaves (M3, H8).
    pub fn suggest(&mut self, commands: Vec<Command>, out: &mut MenciusActions) {
        let i = self.index;
        assert_eq!(self.owner(i), self.me, "the index is an own instance");
        assert!(
            !self
                .insts
                .get(&i)
                .is_some_and(|x| x.own || x.learned.is_some()),
            "instance {i} suggested twice (H1)"
        );
        let s = self.persist(
            StorageOp::Append(vec![Rec {
                instance: i,
                ballot: 0,
                own: true,
                commands: commands.clone(),
            }]),
            out,
        );
        let x = self.insts.entry(i).or_default();
        x.accepted = Some((0, commands.clone()));
        x.own = true;
        x.suggested = true;
        x.seq = s;
        x.acks = 0;
        x.suggested_at = self.now;
        self.inflight.insert(i);
        for c in &commands {
            self.note_own_id(c.id, i);
        }
        self.counters.suggested += 1;
        let next = i + self.n;
        self.index = next;
        self.floor = next;
        self.floor_seq = s;
        let body = Body::Suggest {
            instance: i,
            commands,
        };
        for p in self.peers().collect::<Vec<_>>() {
            self.send(p, body.clone(), s, out);
            // Opt. 2: this SUGGEST accounts for every own instance below it.
            self.told[p] = self.told[p].max(i + 1);
            self.skip_since[p] = None;
        }
    }

    /// A SUGGEST (ballot 0) from the owner `q` of `i`, or a value a SYNC reported (`in_sync`
    /// false). H3: whatever becomes of the value, the skips it implies and Rule 2 apply.
    pub(crate) fn on_suggest(
        &mut self,
        q: usize,
        i: u64,
        commands: Option<Vec<Command>>,
        in_sync: bool,
        out: &mut MenciusActions,
    ) {
        if self.owner(i) != q || q == self.me {
            return; // only the owner suggests at ballot 0
        }
        if self.opt.bug == Some(Bug::OverwriteLearned)
            && self.insts.get(&i).is_some_and(|x| x.learned.is_some())
        {
            return; // H3 literally: "OnMessage PROPOSE … when learned = ⊥"
        }
        if in_sync {
            self.infer_skips(q, i);
            self.raise_est(q, i + self.n);
        }
        if i < self.base {
            return;
        }
        let x = self.insts.entry(i).or_default();
        x.suggested = true;
        let mut accepted_seq = None;
        if let Some(commands) = commands {
            let learned = x.learned.is_some();
            let fresh = x.accepted.is_none();
            if !learned && fresh && self.promised(i) == 0 && !self.noop_accepted(i) {
                let s = self.persist(
                    StorageOp::Append(vec![Rec {
                        instance: i,
                        ballot: 0,
                        own: false,
                        commands: commands.clone(),
                    }]),
                    out,
                );
                let x = self.insts.entry(i).or_default();
                x.accepted = Some((0, commands));
                x.seq = s;
                accepted_seq = Some(s);
                self.send(q, Body::Accept { instance: i }, s, out);
            } else if !learned && self.insts[&i].accepted.as_ref().is_some_and(|a| a.0 == 0) {
                // Accepted before: the owner re-sent it (a lost ACCEPT); accept again.
                let s = self.insts[&i].seq.max(self.floor_seq);
                accepted_seq = Some(s);
                self.send(q, Body::Accept { instance: i }, s, out);
            } else if !learned {
                // Refused: a revocation holds the instance. Tell the owner which block, so a
                // replica that rejoins moves its index past it (Sect. 6) instead of walking
                // through the revoked block one refused SUGGEST at a time.
                if let Some(b) = self.blocking(i) {
                    let body = Body::Nack {
                        ballot: 0,
                        range: b.range,
                        promised: b.ballot,
                    };
                    self.send(q, body, 0, out);
                }
            }
        }
        // Rule 2 (with H1: never backwards): skip every own instance below i not yet used.
        if i > self.index {
            let next = self.own_after(self.me, i);
            self.raise_index(next, accepted_seq, out);
        }
    }

    /// The ACCEPT of a peer for an own suggestion (and, Opt. 1, its promise of skips).
    pub(crate) fn on_accept(&mut self, q: usize, i: u64, in_sync: bool, out: &mut MenciusActions) {
        if in_sync {
            // H3: the promise counts even when the instance is already decided.
            self.infer_skips(q, i);
            self.raise_est(q, self.own_after(q, i));
        }
        if self.owner(i) != self.me || !self.inflight.contains(&i) {
            return;
        }
        if let Some(x) = self.insts.get_mut(&i) {
            if x.accepted.as_ref().is_some_and(|a| a.0 == 0) {
                x.acks |= 1 << q;
            }
        }
        self.check_chosen(i, out);
    }

    /// A quorum accepted an own suggestion: it is chosen; LEARN (phase 3) goes to everyone.
    pub(crate) fn check_chosen(&mut self, i: u64, out: &mut MenciusActions) {
        let Some(x) = self.insts.get(&i) else {
            return;
        };
        if x.learned.is_some() || (x.acks.count_ones() as usize) < self.quorum() {
            return;
        }
        let v = x
            .accepted
            .as_ref()
            .expect("acks count an accepted value")
            .1
            .clone();
        self.learn(i, v, out);
        self.broadcast(Body::Learn { instance: i }, 0, out);
    }

    /// LEARN from the owner: its ballot-0 value is chosen. Without that value here (the
    /// SUGGEST was lost), catch-up will bring it.
    pub(crate) fn on_learn(&mut self, q: usize, i: u64, out: &mut MenciusActions) {
        if self.owner(i) != q || i < self.expected {
            return;
        }
        let v = self
            .insts
            .get(&i)
            .and_then(|x| x.accepted.as_ref())
            .filter(|a| a.0 == 0)
            .map(|a| a.1.clone());
        if let Some(v) = v {
            self.learn(i, v, out);
        }
    }

    /// Instance `i` is decided with `v` (empty: no-op). A learned value is never replaced
    /// (H4): a different outcome for a decided instance is a broken protocol.
    pub(crate) fn learn(&mut self, i: u64, v: Vec<Command>, _out: &mut MenciusActions) {
        if i < self.expected {
            return;
        }
        let me = self.me;
        let owner = self.owner(i);
        let x = self.insts.entry(i).or_default();
        match &x.learned {
            Some(old) if *old == v => return,
            Some(old) => {
                if self.opt.bug == Some(Bug::OverwriteLearned) {
                    x.learned = Some(v.clone());
                } else {
                    panic!(
                        "instance {i} decided twice: {} commands, then {} (H4)",
                        old.len(),
                        v.len()
                    );
                }
            }
            None => x.learned = Some(v.clone()),
        }
        if owner == me && i >= self.index {
            // Decided elsewhere (a revocation this replica missed): never suggest there.
            let next = self.own_after(me, i);
            self.raise_index(next, None, _out);
        }
        let x = self.insts.entry(i).or_default();
        if owner == me && self.inflight.remove(&i) {
            let mine = x.accepted.as_ref().map(|a| a.1.clone()).unwrap_or_default();
            if v.is_empty() && !mine.is_empty() {
                self.orphans.insert(i, mine);
            } else if !v.is_empty() {
                self.own_valued = self.own_valued.max(i);
            }
        }
    }

    fn raise_est(&mut self, q: usize, to: u64) {
        if self.opt.bug == Some(Bug::StaleSkip) {
            self.est[q] = to; // H2 literally: may go back
        } else {
            self.est[q] = self.est[q].max(to);
        }
    }

    /// Opt. 1 / Opt. 2 / an explicit SKIP from `q` on an in-sync stream: every instance of `q`
    /// below `upto` that it did not suggest is a no-op (decided lazily: [`Mencius::decided`]).
    pub(crate) fn infer_skips(&mut self, q: usize, upto: u64) {
        let from = self.est[q];
        if upto <= from {
            return;
        }
        let n = self.n;
        let literal = self.opt.bug == Some(Bug::StaleSkip);
        for (&j, x) in self.insts.range_mut(from..upto) {
            if j % n != q as u64 {
                continue;
            }
            if literal {
                // The pseudo-code: learned(j) <- no-op for the whole range.
                x.learned = Some(Vec::new());
                continue;
            }
            if x.suggested {
                continue;
            }
            if let Some(v) = &x.learned {
                assert!(
                    v.is_empty() || self.opt.bug == Some(Bug::OverwriteLearned),
                    "n{}: instance {j} was learned with a value, and its owner n{} skipped it (H4)",
                    self.cluster.me,
                    self.cluster.members[q]
                );
                if self.opt.bug == Some(Bug::OverwriteLearned) {
                    x.learned = Some(Vec::new());
                }
            }
        }
        self.counters.skips_inferred += (upto - from) / n;
        self.est[q] = upto.max(from);
        if literal {
            self.est[q] = upto;
        }
    }

    /// Own instances were skipped (the index moved): peers are owed them (Accelerator 1).
    pub(crate) fn note_skips(&mut self) {
        let now = self.now;
        for p in self.peers().collect::<Vec<_>>() {
            if self.told[p] < self.floor && self.skip_since[p].is_none() {
                self.skip_since[p] = Some(now);
            }
        }
    }

    /// Accelerator 1: send the skips owed to a peer once more than α are outstanding or the
    /// oldest has waited τ (`count_only`: the α test alone, after every step).
    pub(crate) fn accelerate(&mut self, out: &mut MenciusActions, count_only: bool) {
        for p in self.peers().collect::<Vec<_>>() {
            if self.told[p] >= self.floor {
                self.skip_since[p] = None;
                continue;
            }
            let owed = (self.floor - self.told[p]) / self.n;
            let waited = self.skip_since[p].is_some_and(|t| self.now >= t + self.opt.tau_us);
            if owed > self.opt.alpha || (!count_only && waited) {
                self.send_skip(p, out);
            }
        }
    }

    /// An explicit SKIP: every own instance below the durable index not yet suggested is a
    /// skip (it doubles as the heartbeat).
    pub(crate) fn send_skip(&mut self, p: usize, out: &mut MenciusActions) {
        let upto = self.floor;
        if self.told[p] < upto {
            self.counters.skips_sent += 1;
        }
        self.send(p, Body::Skip { upto }, self.floor_seq, out);
        self.told[p] = self.told[p].max(upto);
        self.skip_since[p] = None;
    }

    /// Rule 4 with per-session order kept: an own suggestion decided as a no-op (revoked) is
    /// suggested again, unless a later own instance holds a value (pending or chosen): then
    /// re-suggesting would put it after a later command of the same client, so it is refused
    /// instead, a gap the client sees as a lost request.
    pub(crate) fn rule4(&mut self, out: &mut MenciusActions) {
        if self.orphans.is_empty() {
            return;
        }
        let later = self
            .inflight
            .iter()
            .next_back()
            .copied()
            .unwrap_or(0)
            .max(self.own_valued);
        let orphans = std::mem::take(&mut self.orphans);
        let mut again: Vec<Command> = Vec::new();
        for (i, mut cs) in orphans {
            // Suggested again already (a restart forgot that this instance was revoked and
            // decided it again): the later copy is the one that counts.
            cs.retain(|c| self.own_ids.get(c.id).is_none_or(|&k| k <= i));
            if later > i {
                for c in cs {
                    self.counters.rejected += 1;
                    out.events.push(Event::Rejected {
                        id: c.id,
                        reason: Reject::Busy,
                    });
                }
            } else {
                self.counters.resuggested += cs.len() as u64;
                again.extend(cs);
            }
        }
        for c in again.into_iter().rev() {
            self.queue.push_front(c);
        }
        self.flush_queue(out);
    }

    /// Remember the latest own instance that carries command `id` (bounded).
    pub(crate) fn note_own_id(&mut self, id: u64, i: u64) {
        self.own_ids.set(id, i);
    }

    /// Own suggestions undecided for too long are sent again (their ACCEPTs or LEARNs were
    /// lost with a connection); acceptors answer again, idempotently.
    pub(crate) fn resend_suggestions(&mut self, out: &mut MenciusActions) {
        let stale: Vec<u64> = self
            .inflight
            .iter()
            .copied()
            .filter(|i| {
                self.insts
                    .get(i)
                    .is_some_and(|x| self.now >= x.suggested_at + self.opt.resuggest_us)
            })
            .take(64)
            .collect();
        for i in stale {
            let x = self.insts.get_mut(&i).expect("inflight");
            x.suggested_at = self.now;
            let (acks, seq) = (x.acks, x.seq);
            let Some((0, commands)) = x.accepted.clone() else {
                continue;
            };
            for p in self.peers().collect::<Vec<_>>() {
                if acks & (1 << p) == 0 {
                    self.send(
                        p,
                        Body::Suggest {
                            instance: i,
                            commands: commands.clone(),
                        },
                        seq,
                        out,
                    );
                }
            }
        }
    }
}

//! The thesis's broadcast variants at the follower (zab.md §3–6): acks to the other followers,
//! the followers' own commit rule, ZabCT's coin, and switching to and from Zab.
//!
//! Per proposal, as [T] writes it: every proposal starts a timer C_m and owes one coin toss,
//! tossed once the proposal is durable here (F1); timer D restarts with every proposal and, on
//! expiry, tosses again only for a proposal that is neither acked by us nor committable (F4).

use crate::{coin, FStage, Msg, Options, Phase, Variant, Zab, ZabActions, Zxid};
use synod_core::{quorum, Dest, Envelope, Event, NodeId, TimeUs};

/// ZabCT recomputes p from λ and d over windows of this length (Algorithm 1 every second).
pub(crate) const COIN_WINDOW_US: TimeUs = 1_000_000;

/// The thesis's δ (its data imply 10⁻³; erratum 4) and grid (step 0.01).
const DELTA: f64 = 0.001;
const GRID_STEPS: u32 = 100;

impl Zab {
    /// F1, on a proposal a variant follower has just logged (not yet durably): its timer C_m
    /// starts, it owes a toss, timer D restarts, and it counts toward λ.
    pub(crate) fn variant_on_proposal(&mut self, last: Zxid) {
        let now = self.now;
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        f.uncommitted.push_back((last, now));
        f.untossed.push_back(last);
        f.timer_d = now;
        f.coin.proposals += 1;
    }

    /// F1 once proposals are durable here: one coin toss for each (Head for any of them
    /// broadcasts a cumulative ack for everything durable: later proposals' acks imply the
    /// earlier ones'), then the followers' own commit rule.
    pub(crate) fn variant_on_durable(&mut self, out: &mut ZabActions) {
        let durable = self.log.durable().zxid;
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        let mut tosses = 0u32;
        while f.untossed.front().is_some_and(|z| *z <= durable) {
            f.untossed.pop_front();
            tosses += 1;
        }
        if tosses > 0 && self.toss(tosses) {
            self.variant_ack(out);
        }
        self.follower_commit(out);
    }

    /// `tosses` tosses of this follower's coin: did any show Head? Without a coin (or while
    /// the epoch runs Zab, where every ack is sent) it is always Head.
    fn toss(&mut self, tosses: u32) -> bool {
        let Phase::Following(f) = &self.phase else {
            return false;
        };
        if f.zab_mode || self.opts.variant.coin(self.cluster.size()).is_none() {
            return true;
        }
        let p = f.coin.p;
        let mut heads = false;
        for _ in 0..tosses {
            // Every toss draws, Head or not, so runs stay reproducible whatever came before.
            heads |= self.rng.chance(p);
        }
        heads
    }

    /// Send a cumulative ack for everything durable here that we have not acked: to the leader
    /// and (ack-all variants, outside Zab mode) to every follower. It carries our vote (prot)
    /// and the mode we run, which acknowledges the leader's last decision.
    pub(crate) fn variant_ack(&mut self, out: &mut ZabActions) {
        let durable = self.log.durable().zxid;
        let broadcast = self.opts.variant.broadcast_acks();
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if durable <= f.acked {
            return;
        }
        f.acked = durable;
        let (leader, epoch, zab_mode) = (f.leader, f.epoch, f.zab_mode);
        let msg = self.ack(epoch, durable);
        if broadcast && !zab_mode {
            out.send.push(Envelope {
                to: Dest::All,
                msg,
                after_durable: 0,
            });
        } else {
            self.send(out, leader, msg);
        }
    }

    /// Variants, F-commit: the highest zxid that `threshold` followers (this one included, for
    /// what is durable here) are known to have logged is committed; deliver up to it.
    pub(crate) fn follower_commit(&mut self, out: &mut ZabActions) {
        let Some(k) = self.opts.variant.follower_threshold(self.cluster.size()) else {
            return;
        };
        let own = self.log.durable().zxid;
        let last = self.log.last();
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if f.stage < FStage::Synced {
            return;
        }
        let mut acks: Vec<Zxid> = f.peer_acks.values().copied().collect();
        acks.push(own);
        let Some(z) = quorum::kth_largest(&mut acks, k) else {
            return;
        };
        if z <= f.commit.zxid {
            return;
        }
        let at = if z >= last.zxid {
            Some(last)
        } else {
            self.log.point_of(z)
        };
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if let Some(at) = at {
            f.advance_commit(at);
            let commit = f.commit;
            self.deliver(commit, out);
        }
    }

    /// Leader: switch the epoch's broadcast mode and tell every follower with a commit
    /// carrying the decision (re-sent at every heartbeat to a follower that has not yet
    /// reported the new mode). Deliveries continue throughout: a follower delivers up to the
    /// larger of the leader's commit point and its own threshold commit point, and each is safe
    /// on its own, so proposals in flight need no fence in either direction.
    pub(crate) fn switch_mode(&mut self, zab: bool, out: &mut ZabActions) {
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.zab_mode == zab {
            return;
        }
        l.zab_mode = zab;
        if zab {
            // The way back needs fresh votes, cast in Zab mode.
            for p in l.peers.values_mut() {
                p.vote = None;
            }
        }
        let (epoch, at) = (l.epoch, l.commit);
        let peers: Vec<NodeId> = l.peers.keys().copied().collect();
        out.events.push(Event::Mode { fallback: zab });
        for p in peers {
            self.send(out, p, Msg::Commit { epoch, at, zab });
        }
    }

    /// Leader, at each heartbeat: membership-driven switching (too few followers synchronised
    /// for the variant: Zab at once), the return on a unanimous vote of all N − 1 followers,
    /// and the decision re-sent to followers that still report the other mode.
    pub(crate) fn leader_mode_duties(&mut self, out: &mut ZabActions) {
        let variant = self.opts.variant;
        if !variant.switches() {
            return;
        }
        let n = self.cluster.size();
        let Phase::Leading(l) = &self.phase else {
            return;
        };
        let synced = l.peers.values().filter(|p| p.synced).count();
        // Back on a unanimous vote of the followers present, once there are enough of them for
        // the variant (all N − 1 for ZabCt and ZabCT; f + 1 for ZabAA, zab.md §6.2, §7).
        let unanimous = synced >= variant.followers_needed(n).max(1)
            && l.peers
                .values()
                .filter(|p| p.synced)
                .all(|p| p.vote == Some(false));
        let zab_mode = l.zab_mode;
        if !zab_mode && self.live_followers(synced) < variant.followers_needed(n) {
            self.switch_mode(true, out);
        } else if zab_mode && unanimous {
            self.switch_mode(false, out);
        }
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        let (epoch, at, zab) = (l.epoch, l.commit, l.zab_mode);
        let behind: Vec<NodeId> = l
            .peers
            .iter()
            .filter(|(_, p)| p.synced && p.mode != zab)
            .map(|(&id, _)| id)
            .collect();
        for p in behind {
            self.send(out, p, Msg::Commit { epoch, at, zab });
        }
    }

    /// The variant follower's timers: the coin's window (λ, d → p), the switching vote
    /// (membership, timer C_m, an infeasible p, and the way back), enforced tossing (F4) and
    /// the deterministic fallback.
    pub(crate) fn variant_timers(&mut self, out: &mut ZabActions) {
        let now = self.now;
        let durable = self.log.durable().zxid;
        let n = self.cluster.size();
        let opts = &self.opts;
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if opts.variant == Variant::Ct && now.saturating_sub(f.coin.window_start) >= COIN_WINDOW_US
        {
            recompute_p(opts, n, now, &mut f.coin);
        }
        let waited = f.oldest_uncommitted().map_or(0, |t| now.saturating_sub(t));
        let p_ok = coin_ok(opts, &f.coin);
        let vote_before = f.wants_zab;
        if opts.variant.switches() {
            let suspected = f.live.is_some_and(|l| l < opts.variant.followers_needed(n));
            f.wants_zab = if f.zab_mode {
                // Back to the variant once every follower has been present long enough and p
                // can be computed (a unanimous vote decides, at the leader).
                !(p_ok
                    && !suspected
                    && f.full_since
                        .is_some_and(|t| now.saturating_sub(t) >= opts.switch_back_after_us))
            } else {
                // A suspected follower, timer C_m (a proposal uncommitted too long), or p
                // infeasible: vote Zab (zab.md §6.1, §6.2).
                f.wants_zab
                    || suspected
                    || waited >= opts.switch_after_us
                    || (opts.variant == Variant::Ct && f.coin.infeasible)
            };
        }
        let vote_changed = f.wants_zab != vote_before;
        let coin = opts.variant.coin(n).is_some() && !f.zab_mode;
        // F4, enforced coin tossing: only for a proposal neither acked by us nor committable.
        let timer_d_expired = coin && now.saturating_sub(f.timer_d) >= opts.enforced_toss_us;
        let owed = durable > f.acked.max(committable(opts, n, f));
        if timer_d_expired {
            f.timer_d = now;
        }
        // The deterministic fallback (zab.md §10 item 8): a proposal uncommitted this long is
        // acked without a coin.
        let overdue = waited >= opts.ack_timeout_us
            && now.saturating_sub(f.last_forced) >= opts.ack_timeout_us;
        if overdue {
            f.last_forced = now;
        }
        let (leader, epoch) = (f.leader, f.epoch);
        if overdue || (timer_d_expired && owed && self.toss(1)) {
            self.variant_ack(out);
        } else if vote_changed {
            // A new vote goes to the leader at once, on an ack (the prot field).
            let msg = self.ack(epoch, durable);
            self.send(out, leader, msg);
        }
    }

    /// The earliest time one of [`Zab::variant_timers`]'s conditions can change.
    pub(crate) fn variant_deadline(&self) -> Option<TimeUs> {
        let Phase::Following(f) = &self.phase else {
            return None;
        };
        if f.stage < FStage::Synced || self.opts.variant == Variant::Zab {
            return None;
        }
        let o = &self.opts;
        let n = self.cluster.size();
        let mut d: Option<TimeUs> = None;
        let mut at = |t: TimeUs| d = Some(d.map_or(t, |d: TimeUs| d.min(t)));
        if o.variant == Variant::Ct {
            at(f.coin.window_start + COIN_WINDOW_US);
        }
        if let Some(t) = f.oldest_uncommitted() {
            at(t.max(f.last_forced) + o.ack_timeout_us);
            if o.variant.switches() && !f.zab_mode && !f.wants_zab {
                at(t + o.switch_after_us);
            }
        }
        if o.variant.switches() {
            let suspected = f.live.is_some_and(|l| l < o.variant.followers_needed(n));
            if !f.zab_mode && !f.wants_zab && suspected {
                at(self.now);
            }
            if f.zab_mode && f.wants_zab && coin_ok(o, &f.coin) {
                if let Some(t) = f.full_since {
                    at(t + o.switch_back_after_us);
                }
            }
        }
        let coin = o.variant.coin(n).is_some() && !f.zab_mode;
        if coin && self.log.durable().zxid > f.acked.max(committable(o, n, f)) {
            at(f.timer_d + o.enforced_toss_us);
        }
        d
    }

    /// The coin's starting p: ZabCt's 0.5, a fixed choice, or ZabCT_u's P₂ with all present.
    pub(crate) fn initial_p(&self) -> f64 {
        match (self.opts.variant, self.opts.coin) {
            (Variant::Ct, coin::Choice::Fixed(p)) => p,
            (v, _) => v.coin(self.cluster.size()).unwrap_or(1.0),
        }
    }
}

impl crate::Coin {
    /// F1's measurement of d (zab.md §5.9): the leader echoes our last ack stamp with how long
    /// it held it, so half of (now − stamp − hold) is a one-way delay in microseconds of our
    /// own clock, never compared with another's.
    pub(crate) fn sample_d(&mut self, now: TimeUs, (stamp, hold): (u64, u64)) {
        if stamp == 0 || stamp > now {
            return;
        }
        self.d_sum_us += now.saturating_sub(stamp).saturating_sub(hold) as f64 / 2.0;
        self.d_samples += 1;
    }
}

/// The end of a coin window: λ and the mean d over it, then Algorithm 1 and the policy. In
/// Zab mode the follower keeps computing, so it can vote to return (zab.md §6.2).
fn recompute_p(opts: &Options, cluster_size: usize, now: TimeUs, c: &mut crate::Coin) {
    let elapsed_s = now.saturating_sub(c.window_start) as f64 / 1e6;
    c.lambda = c.proposals as f64 / elapsed_s;
    if c.d_samples > 0 {
        c.d_us = Some(c.d_sum_us / c.d_samples as f64);
    }
    c.window_start = now;
    c.proposals = 0;
    c.d_sum_us = 0.0;
    c.d_samples = 0;
    let coin::Choice::Adaptive { policy, theta } = opts.coin else {
        return;
    };
    let Some(d_us) = c.d_us else {
        return;
    };
    if c.lambda <= 0.0 {
        return; // nothing was proposed: nothing to measure
    }
    let followers = cluster_size as u32 - 1;
    let inputs = coin::Inputs {
        followers,
        needed: followers.div_ceil(2).max(1),
        lambda: c.lambda,
        theta: theta.unwrap_or(c.lambda),
        d_s: d_us / 1e6,
        timer_d_s: opts.enforced_toss_us as f64 / 1e6,
        delta: DELTA,
        steps: GRID_STEPS,
    };
    match coin::choose_p(&inputs, policy) {
        Some(p) => {
            c.p = p;
            c.infeasible = false;
            c.feasible_streak += 1;
        }
        None => {
            // ZabCT cannot beat Zab here: vote Zab (zab.md §6.2 (i)).
            c.infeasible = true;
            c.feasible_streak = 0;
        }
    }
}

/// The highest proposal F4 counts as committable: what we committed when our threshold implies
/// the leader's (f + 1 followers: ZabCT, zab.md §3.7's timing facts), else only what the leader
/// said it committed. A ZabCt follower at N = 3 delivers on its own log, but the leader still
/// needs a follower's ack: without this its window would wait for a heartbeat.
fn committable(o: &Options, cluster_size: usize, f: &crate::Follower) -> Zxid {
    let implies_leader = o
        .variant
        .follower_threshold(cluster_size)
        .is_some_and(|k| k > cluster_size / 2);
    if implies_leader {
        f.commit.zxid
    } else {
        f.leader_commit
    }
}

/// ZabCT's coin allows a return to the variant: p has been computable for two windows in a row
/// ("several consecutive iterations").
fn coin_ok(o: &Options, c: &crate::Coin) -> bool {
    o.variant != Variant::Ct
        || matches!(o.coin, coin::Choice::Fixed(_))
        || (!c.infeasible && c.feasible_streak >= 2)
}

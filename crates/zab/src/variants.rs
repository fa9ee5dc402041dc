//! The thesis's broadcast variants at the follower (zab.md §3–6): acks to the other followers,
//! the followers' own commit rule, ZabCT's coin, and switching to and from Zab.

use crate::{coin, Coin, FStage, Options, Phase, Variant, Zab, ZabActions, Zxid};
use synod_core::{quorum, Dest, Envelope, Event, NodeId, TimeUs};

/// ZabCT recomputes p from λ and d over windows of this length (Algorithm 1 every second).
pub(crate) const COIN_WINDOW_US: TimeUs = 1_000_000;

impl Zab {
    /// Variants, F1–F3: send (or, with a coin, maybe send) a cumulative ack for everything durably
    /// logged here, to the leader and (ack-all variants) to every follower. `forced` skips the
    /// coin (the deterministic fallback).
    pub(crate) fn variant_ack(&mut self, forced: bool, out: &mut ZabActions) {
        let durable = self.log.durable().zxid;
        let n = self.cluster.size();
        let variant = self.opts.variant;
        let now = self.now;
        let (zab_mode, current_p) = match &self.phase {
            Phase::Following(f) => (f.zab_mode, f.coin.p),
            _ => (false, 1.0),
        };
        let heads = match variant.coin(n) {
            Some(_) if !forced && !zab_mode => self.rng.chance(current_p),
            _ => true,
        };
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if durable <= f.acked {
            return;
        }
        let zab = f.wants_zab;
        f.last_toss = now;
        if !heads {
            return;
        }
        f.acked = durable;
        let (leader, epoch) = (f.leader, f.epoch);
        let msg = self.ack(epoch, durable, zab);
        if variant.broadcast_acks() && !zab_mode {
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
            f.commit = f.commit.max(at);
            if f.commit.zxid >= own {
                f.uncommitted_since = None;
            }
            let commit = f.commit;
            self.deliver(commit, out);
        }
    }

    /// Leader: switch the epoch's broadcast mode and tell every follower at once with a commit
    /// carrying the decision. Deliveries continue throughout: a follower delivers up to the larger
    /// of the leader's commit point and its own threshold commit point, and each is safe on its
    /// own, so proposals in flight need no fence in either direction.
    pub(crate) fn switch_mode(&mut self, zab: bool, out: &mut ZabActions) {
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.zab_mode == zab {
            return;
        }
        l.zab_mode = zab;
        let (epoch, at) = (l.epoch, l.commit);
        let peers: Vec<NodeId> = l.peers.keys().copied().collect();
        out.events.push(Event::Mode { fallback: zab });
        for p in peers {
            self.send(out, p, crate::Msg::Commit { epoch, at, zab });
        }
    }

    /// The variant follower's timers: the coin's window (λ, d → p), the switching vote
    /// (timer C_m and the switch back), enforced tossing (F4) and the deterministic fallback.
    pub(crate) fn variant_timers(&mut self, out: &mut ZabActions) {
        let now = self.now;
        let durable = self.log.durable().zxid;
        let n = self.cluster.size();
        let opts = &self.opts;
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if f.commit.zxid >= durable {
            f.uncommitted_since = None;
        }
        let waited = f.uncommitted_since.map_or(0, |t| now.saturating_sub(t));
        if opts.variant == Variant::Ct
            && opts.adaptive_coin
            && now.saturating_sub(f.coin.window_start) >= COIN_WINDOW_US
        {
            let elapsed_s = now.saturating_sub(f.coin.window_start) as f64 / 1e6;
            let lambda = f.coin.proposals as f64 / elapsed_s;
            f.coin.window_start = now;
            f.coin.proposals = 0;
            if lambda > 0.0 && f.coin.d_us > 0.0 {
                let followers = n as u32 - 1;
                let inputs = coin::Inputs {
                    followers,
                    needed: followers.div_ceil(2).max(1),
                    lambda,
                    theta: lambda,
                    d_s: f.coin.d_us / 1e6,
                    timer_d_s: opts.enforced_toss_us as f64 / 1e6,
                    delta: 0.001,
                    steps: 100,
                };
                match coin::choose_p(&inputs, coin::Policy::Upper) {
                    Some(p) => {
                        f.coin.p = p;
                        f.coin.infeasible = false;
                        f.coin.feasible_streak += 1;
                    }
                    None => {
                        // ZabCT cannot beat Zab here: vote Zab (zab.md §6.2 (i)).
                        f.coin.infeasible = true;
                        f.coin.feasible_streak = 0;
                    }
                }
            }
        }
        let p_ok = coin_ok(opts, &f.coin);
        if opts.variant.switches() {
            f.wants_zab = if f.zab_mode {
                // Back to the variant once every follower has been present long enough (a
                // unanimous vote decides, at the leader).
                !(p_ok
                    && f.full_since
                        .is_some_and(|t| now.saturating_sub(t) >= opts.switch_back_after_us))
            } else {
                // timer(C_m): a proposal stays uncommitted too long, or p cannot be computed —
                // vote Zab.
                f.wants_zab || waited >= opts.switch_after_us || f.coin.infeasible
            };
        }
        // F4, enforced coin tossing; and the deterministic fallback for proposals that stay
        // uncommitted.
        let overdue = waited >= opts.ack_timeout_us
            && now.saturating_sub(f.last_forced) >= opts.ack_timeout_us;
        let toss = now.saturating_sub(f.last_toss) >= opts.enforced_toss_us;
        if overdue {
            f.last_forced = now;
            self.variant_ack(true, out);
        } else if toss {
            self.variant_ack(false, out);
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
        let mut d: Option<TimeUs> = None;
        let mut at = |t: TimeUs| d = Some(d.map_or(t, |d: TimeUs| d.min(t)));
        if o.variant == Variant::Ct && o.adaptive_coin {
            at(f.coin.window_start + COIN_WINDOW_US);
        }
        if let Some(t) = f.uncommitted_since {
            // The uncommitted mark clears at the next check once the commit point catches up.
            if f.commit.zxid >= self.log.durable().zxid {
                at(self.now);
            }
            // The fallback fires once the mark is ack_timeout old and the last forced ack too.
            at(t.max(f.last_forced) + o.ack_timeout_us);
            if o.variant.switches() && !f.zab_mode && !f.wants_zab {
                at(t + o.switch_after_us);
            }
        }
        if o.variant.switches() && f.zab_mode && f.wants_zab && coin_ok(o, &f.coin) {
            if let Some(t) = f.full_since {
                at(t + o.switch_back_after_us);
            }
        }
        if self.log.durable().zxid > f.acked {
            at(f.last_toss + o.enforced_toss_us);
        }
        d
    }
}

/// ZabCT's coin allows a return to the variant: p has been computable for two windows in a row.
fn coin_ok(o: &Options, c: &Coin) -> bool {
    o.variant != Variant::Ct || !o.adaptive_coin || (!c.infeasible && c.feasible_streak >= 2)
}

//! Failure detection and timers (zab.md §2.7): heartbeats, SC1 (a follower that no longer hears
//! its leader), SC2 (a leader that no longer hears a quorum), discovery that takes too long,
//! election resends; and, for the driver, the time the core next needs waking.
//!
//! The driver wakes the core at [`Zab::next_deadline`] (it may wake it earlier); every check
//! here compares the time the core was given with the deadline it set, so an early wake changes
//! nothing.

use crate::{FStage, LStage, Phase, Variant, Zab, ZabActions};
use synod_core::{NodeId, Snapshot, TimeUs};

impl Zab {
    pub fn on_timeout(&mut self, out: &mut ZabActions) {
        let now = self.now;
        let me = self.cluster.me;
        let m = self.membership();
        match &mut self.phase {
            Phase::Looking(el) => {
                if el.decide_at.is_some_and(|t| now >= t) {
                    self.decide(out);
                } else if now >= el.next_send {
                    self.recheck_votes();
                    self.broadcast_vote(out);
                }
            }
            Phase::Following(f) => {
                if now.saturating_sub(f.last_heard) > self.opts.follower_timeout_us {
                    // SC1: the leader went silent.
                    self.become_looking(out);
                } else if f.stage >= FStage::Synced && self.opts.variant != Variant::Zab {
                    self.variant_timers(out);
                } else if f.stage == FStage::Info && now >= f.next_info {
                    // The leader may still have been LOOKING when we first asked.
                    f.next_info = now + self.opts.heartbeat_us;
                    let leader = f.leader;
                    self.send_follower_info(leader, out);
                }
            }
            Phase::Leading(l) => {
                if l.stage != LStage::Broadcast {
                    if now.saturating_sub(l.started) > self.opts.discovery_timeout_us {
                        self.become_looking(out);
                    }
                    return;
                }
                let timeout = self.opts.leader_timeout_us;
                l.peers
                    .retain(|_, p| now.saturating_sub(p.last_heard) <= timeout);
                let heard = m.is_quorum(|p| p == me || l.peers.get(&p).is_some_and(|x| x.synced));
                if !heard {
                    // SC2: no quorum behind us any more.
                    self.become_looking(out);
                    return;
                }
                let synced = l.peers.values().filter(|p| p.synced).count();
                if now >= l.next_ping {
                    l.next_ping = now + self.opts.heartbeat_us;
                    let (epoch, commit) = (l.epoch, l.commit);
                    let last = self.log.last().zxid;
                    let peers: Vec<NodeId> = l.peers.keys().copied().collect();
                    let live = self.live_followers(synced).min(u16::MAX as usize) as u16;
                    for p in peers {
                        self.send(
                            out,
                            p,
                            crate::Msg::Ping {
                                epoch,
                                commit,
                                last,
                                live,
                            },
                        );
                    }
                    // Switching (zab.md §6) at the heartbeat's pace: membership, the unanimous
                    // return, and decisions re-sent until acknowledged.
                    self.leader_mode_duties(out);
                }
            }
        }
    }

    /// The followers the leader counts as present for membership-driven switching: those
    /// synchronised, or all N − 1 while the epoch is younger than a follower timeout (the last
    /// followers may still be joining; one that never does is suspected once it has had the
    /// time any follower has to notice a silent leader).
    pub(crate) fn live_followers(&self, synced: usize) -> usize {
        match &self.phase {
            Phase::Leading(l) if self.now < l.started + self.opts.follower_timeout_us => {
                self.cluster.size() - 1
            }
            _ => synced,
        }
    }

    /// When [`Zab::on_timeout`] next has something to do: the earliest of the phase's timers.
    pub fn next_deadline(&self) -> TimeUs {
        let o = &self.opts;
        match &self.phase {
            Phase::Looking(el) => el.decide_at.unwrap_or(el.next_send).min(el.next_send),
            Phase::Following(f) => {
                let silent = f.last_heard + o.follower_timeout_us + 1;
                let mut d = silent;
                if f.stage == FStage::Info {
                    d = d.min(f.next_info);
                }
                if let Some(v) = self.variant_deadline() {
                    d = d.min(v);
                }
                d
            }
            Phase::Leading(l) if l.stage != LStage::Broadcast => {
                l.started + o.discovery_timeout_us + 1
            }
            Phase::Leading(l) => {
                let expiry = l
                    .peers
                    .values()
                    .map(|p| p.last_heard + o.leader_timeout_us + 1)
                    .min();
                expiry.map_or(l.next_ping, |e| e.min(l.next_ping))
            }
        }
    }

    pub(crate) fn on_disconnected(&mut self, peer: NodeId, out: &mut ZabActions) {
        match &mut self.phase {
            Phase::Following(f) if f.leader == peer => self.become_looking(out),
            Phase::Leading(l) => {
                l.peers.remove(&peer);
                l.infos.remove(&peer);
                l.recovering.remove(&peer);
                l.ack_epochs.remove(&peer);
            }
            _ => {}
        }
    }

    pub(crate) fn on_compact(&mut self, snapshot: Snapshot, out: &mut ZabActions) {
        if snapshot.at.slot > self.applied {
            return;
        }
        self.log
            .compact(snapshot, self.opts.log_retain, &mut out.persist);
    }
}

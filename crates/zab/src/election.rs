//! Fast leader election (zab.md §2.2): votes ⟨current epoch, last zxid, id⟩, rounds, and the
//! finalize wait before a vote with a quorum decides.

use crate::recovery::vouched_epoch;
use crate::{Bug, Election, Msg, PeerState, Phase, Settled, Vote, Zab, ZabActions, Zxid};
use std::collections::BTreeMap;
use std::sync::Arc;
use synod_core::{Config, Dest, Envelope, Event, Membership, NodeId, Reject, View};

/// The order of votes: most recent history first, then the preferred leader, then the highest
/// id.
fn rank(v: Vote, preferred: Option<NodeId>) -> (u32, Zxid, bool, NodeId) {
    (v.epoch, v.zxid, Some(v.leader) == preferred, v.leader)
}

impl Zab {
    pub(crate) fn my_vote(&self) -> Vote {
        if self.opts.bug == Some(Bug::ElectAnyone) {
            return Vote {
                epoch: 0,
                zxid: Zxid::ZERO,
                leader: self.cluster.me,
            };
        }
        Vote {
            epoch: self.log.hard().current_epoch,
            zxid: self.log.last().zxid,
            leader: self.cluster.me,
        }
    }

    pub(crate) fn reset_election(&mut self) {
        self.round += 1;
        let vote = self.my_vote();
        let mut recv = BTreeMap::new();
        recv.insert(self.cluster.me, vote);
        // A cluster of one voter (ZooKeeper's standalone mode) is its own quorum: no vote will
        // come to count, so its own decides after the finalize wait.
        let me = self.cluster.me;
        let alone = self.is_voter()
            && self.is_quorum(|p| p == me)
            && self.suspended_until_above.is_none()
            && !self.recovering();
        self.phase = Phase::Looking(Election {
            vote,
            recv,
            settled: BTreeMap::new(),
            next_send: self.now,
            resend_us: self.opts.election_resend_us,
            decide_at: alone.then_some(self.now + self.opts.finalize_wait_us),
        });
    }

    /// SC1/SC2, a failed discovery or an inconsistency: go back to election (LOOKING). A
    /// leader's commands that never reached its log are refused, so their clients hear at once
    /// (and retry elsewhere) instead of waiting out their timeout.
    pub fn become_looking(&mut self, out: &mut ZabActions) {
        if let Phase::Leading(l) = &mut self.phase {
            for c in l.queued.drain(..) {
                out.events.push(Event::Rejected {
                    id: c.id,
                    reason: Reject::NoLeader,
                });
            }
        }
        self.reset_election();
        out.events.push(Event::View(View::electing(
            self.log.hard().current_epoch as u64,
        )));
        self.broadcast_vote(out);
    }

    pub(crate) fn broadcast_vote(&mut self, out: &mut ZabActions) {
        // A replica that no configuration in force names as a voter abstains too (reconfig.rs).
        let abstain = self.suspended_until_above.is_some() || self.recovering() || !self.is_voter();
        let Phase::Looking(el) = &mut self.phase else {
            return;
        };
        let vote = if abstain {
            // A1.1: a recovered leader neither votes nor stands; nor does a replica recovering
            // from lost state (recovery.rs). It still announces itself with an abstaining vote
            // (for no one, lower than any real vote) so that settled peers tell it who leads,
            // and it joins a leader of a later epoch (A1.1) or one that a quorum of other
            // replicas vouches for (recovery).
            Vote::default()
        } else {
            el.vote
        };
        el.next_send = self.now + el.resend_us;
        el.resend_us = (el.resend_us * 2).min(self.opts.election_resend_max_us);
        let msg = Msg::Notification {
            round: self.round,
            vote,
            state: PeerState::Looking,
            accepted: 0,
            configs: self.notified_configs(),
        };
        out.send.push(Envelope {
            to: Dest::All,
            msg,
            after_durable: 0,
        });
    }

    /// The vote a settled (following or leading) replica reports to a LOOKING peer, with the
    /// epoch it accepted from (or proposed as) that leader. A recovering follower vouches for
    /// nothing (`accepted` 0): its own promises are what it lost.
    fn settled_notification(&self) -> Option<Msg> {
        let (leader, state, accepted) = match &self.phase {
            Phase::Following(f) => (f.leader, PeerState::Following, f.epoch),
            Phase::Leading(l) => (self.cluster.me, PeerState::Leading, l.epoch),
            Phase::Looking(_) => return None,
        };
        Some(Msg::Notification {
            round: self.round,
            vote: Vote {
                epoch: self.log.hard().current_epoch,
                zxid: self.log.last().zxid,
                leader,
            },
            state,
            accepted: if self.recovering() { 0 } else { accepted },
            configs: self.notified_configs(),
        })
    }

    /// The configurations a notification carries: none while the group keeps the one it was
    /// born with.
    fn notified_configs(&self) -> Vec<Arc<Config>> {
        let m = self.membership();
        if m.versions() == [0] {
            return Vec::new();
        }
        std::iter::once(m.committed).chain(m.pending).collect()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn on_notification(
        &mut self,
        from: NodeId,
        round: u64,
        vote: Vote,
        state: PeerState,
        accepted: u32,
        configs: Vec<Arc<Config>>,
        out: &mut ZabActions,
    ) {
        // A configuration the sender knows committed (it delivered its entry) is committed:
        // if its entry is in our log, our configurations count it so (a replica restarted
        // behind its log would otherwise wait for the majorities of configurations long
        // replaced, whose removed voters no longer vote).
        if let Some(slot) = configs
            .first()
            .and_then(|c| self.log.config_slot(c.version))
        {
            self.config_floor = self.config_floor.max(slot);
        }
        if !matches!(self.phase, Phase::Looking(_)) {
            // Tell a LOOKING peer whom we follow, so it can join without a new election.
            if state == PeerState::Looking {
                if let Some(n) = self.settled_notification() {
                    self.send(out, from, n);
                }
            }
            return;
        }
        if self.suspended_until_above.is_some_and(|e| vote.epoch > e) {
            // A1.1: a vote naming a later epoch proves our successor was installed; rejoin.
            self.suspended_until_above = None;
            if let Phase::Looking(el) = &mut self.phase {
                el.vote = Vote {
                    epoch: self.log.hard().current_epoch,
                    zxid: self.log.last().zxid,
                    leader: self.cluster.me,
                };
                el.recv.insert(self.cluster.me, el.vote);
            }
        }
        let me = self.cluster.me;
        let membership = self.membership();
        let voter = membership.is_voter(me);
        let recovering = self.recovering();
        let my_initial = self.my_vote();
        let preferred = self.opts.preferred_leader;
        // The finalize wait, longer while a preferred leader never heard from may still come.
        let finalize_wait_us = match preferred {
            Some(p) if !self.heard_preferred && p != me && membership.is_voter(p) => {
                self.opts.finalize_wait_us.max(self.opts.preferred_wait_us)
            }
            _ => self.opts.finalize_wait_us,
        };
        let mut rebroadcast = false;
        let mut reply = false;
        let mut join = None;
        let mut unheard = Vec::new();
        {
            let Phase::Looking(el) = &mut self.phase else {
                unreachable!()
            };
            match state {
                // A suspended (A1.1) or recovering replica neither adopts nor counts votes, so
                // it never decides an election by itself.
                PeerState::Looking if self.suspended_until_above.is_some() || recovering => {}
                // Nor does a replica that does not vote (a learner, or one no configuration in
                // force names).
                PeerState::Looking if !voter => {}
                // An abstaining vote (a suspended replica, A1.1) is neither adopted nor counted,
                // nor is a vote for a replica that does not vote here.
                PeerState::Looking if vote.leader == 0 || !membership.is_voter(vote.leader) => {}
                PeerState::Looking => {
                    if round > self.round {
                        self.round = round;
                        el.recv.clear();
                        el.vote = if rank(vote, preferred) > rank(my_initial, preferred) {
                            vote
                        } else {
                            my_initial
                        };
                        el.recv.insert(me, el.vote);
                        el.decide_at = None;
                        rebroadcast = true;
                    } else if round < self.round {
                        reply = true;
                    } else if rank(vote, preferred) > rank(el.vote, preferred) {
                        el.vote = vote;
                        el.recv.insert(me, vote);
                        el.decide_at = None;
                        rebroadcast = true;
                    }
                    if round == self.round {
                        el.recv.insert(from, vote);
                        let agree = membership.is_quorum(|p| el.recv.get(&p) == Some(&el.vote));
                        if agree {
                            if el.decide_at.is_none() {
                                let wait = if Some(el.vote.leader) == preferred {
                                    self.opts.finalize_wait_us
                                } else {
                                    finalize_wait_us
                                };
                                el.decide_at = Some(self.now + wait);
                            }
                        } else {
                            el.decide_at = None;
                        }
                    }
                }
                PeerState::Following | PeerState::Leading => {
                    let leader = vote.leader;
                    let mut reported = configs.into_iter();
                    let reported = reported.next().map(|committed| Membership {
                        committed,
                        pending: reported.collect(),
                    });
                    el.settled.insert(
                        from,
                        Settled {
                            leader,
                            leading: state == PeerState::Leading,
                            accepted,
                            membership: reported,
                        },
                    );
                    // Whose majority to trust: the leader's configurations when it reports newer
                    // ones than ours (our disk was wiped, or we were added since we last heard),
                    // else our own (reconfig.rs).
                    let trusted = match el.settled.get(&leader).and_then(|s| s.membership.clone()) {
                        Some(m) if m.latest().version > membership.latest().version => m,
                        _ => membership.clone(),
                    };
                    // Members of the leader's newer configurations that ours does not name never
                    // receive our notifications (the host sends them to our members): ask each
                    // one not heard from yet, or a replica that needs their word (a recovering
                    // one needs a quorum of others, sim seed 1729 at N = 5) waits forever.
                    let ours = membership.members();
                    unheard = trusted
                        .members()
                        .into_iter()
                        .filter(|&p| p != me && !ours.contains(&p) && !el.settled.contains_key(&p))
                        .collect();
                    if recovering {
                        // Recovery after lost state: only a fresh quorum of OTHER replicas that
                        // accepted the leader's epoch lets us follow it (recovery.rs).
                        if let Some(e) = vouched_epoch(&el.settled, me, leader, &trusted) {
                            join = Some((leader, e));
                        }
                    } else {
                        let leader_says_so = el
                            .settled
                            .get(&leader)
                            .is_some_and(|s| s.leader == leader && s.leading);
                        let support = trusted.is_quorum(|p| {
                            p == me || el.settled.get(&p).is_some_and(|s| s.leader == leader)
                        });
                        let late_enough = self.suspended_until_above.is_none_or(|e| vote.epoch > e);
                        if leader != me && leader_says_so && support && late_enough {
                            join = Some((leader, 0));
                        }
                    }
                }
            }
        }
        if let Some((leader, vouched)) = join {
            self.suspended_until_above = None;
            self.start_following(leader, vouched, out);
            return;
        }
        if !unheard.is_empty() {
            if let Phase::Looking(el) = &self.phase {
                let abstain = self.suspended_until_above.is_some() || recovering || !voter;
                let msg = Msg::Notification {
                    round: self.round,
                    vote: if abstain { Vote::default() } else { el.vote },
                    state: PeerState::Looking,
                    accepted: 0,
                    configs: self.notified_configs(),
                };
                for p in unheard {
                    self.send(out, p, msg.clone());
                }
            }
        }
        if rebroadcast {
            if let Phase::Looking(el) = &mut self.phase {
                el.resend_us = self.opts.election_resend_us;
            }
            self.broadcast_vote(out);
        } else if reply {
            if let Phase::Looking(el) = &self.phase {
                let msg = Msg::Notification {
                    round: self.round,
                    vote: el.vote,
                    state: PeerState::Looking,
                    accepted: 0,
                    configs: self.notified_configs(),
                };
                self.send(out, from, msg);
            }
        }
    }

    /// The configurations in force may have changed during the election (a peer reported one
    /// committed: reconfig.rs): a vote the votes already received now make a quorum for decides
    /// after the finalize wait, as if the last of them had just arrived. Without it a replica
    /// left the only voter, hearing no other vote, would wait forever (sim seed 642 at N = 3).
    pub(crate) fn recheck_votes(&mut self) {
        if self.suspended_until_above.is_some() || self.recovering() || !self.is_voter() {
            return;
        }
        let membership = self.membership();
        let wait = self.opts.finalize_wait_us;
        let now = self.now;
        let Phase::Looking(el) = &mut self.phase else {
            return;
        };
        if el.decide_at.is_none() && membership.is_quorum(|p| el.recv.get(&p) == Some(&el.vote)) {
            el.decide_at = Some(now + wait);
        }
    }

    /// The vote has held a quorum for the finalize wait: follow or lead.
    pub fn decide(&mut self, out: &mut ZabActions) {
        let Phase::Looking(el) = &self.phase else {
            return;
        };
        assert!(
            !self.recovering(),
            "a replica recovering from lost state decided an election"
        );
        let leader = el.vote.leader;
        if leader == self.cluster.me {
            self.start_leading(out);
        } else {
            self.start_following(leader, 0, out);
        }
    }
}

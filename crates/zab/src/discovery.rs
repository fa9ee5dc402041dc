//! Discovery (zab.md §2.4): the prospective leader collects FOLLOWERINFO from a quorum, picks
//! an epoch above every accepted epoch, and proposes it with NEWEPOCH; followers accept it
//! durably and answer ACKEPOCH with a summary of their log.

use crate::{
    Coin, FStage, Follower, Hard, LStage, Leader, Msg, Phase, Point, Zab, ZabActions, Zxid,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use synod_core::NodeId;

impl Zab {
    /// Follow `leader`: FOLLOWERINFO. A recovering replica passes the epoch a quorum of other
    /// replicas vouched for (recovery.rs); 0 otherwise.
    pub(crate) fn start_following(&mut self, leader: NodeId, vouched: u32, out: &mut ZabActions) {
        assert!(
            !self.recovering() || vouched > 0,
            "a recovering replica follows only a leader vouched for by a quorum of others"
        );
        self.phase = Phase::Following(Follower {
            leader,
            epoch: 0,
            vouched,
            stage: FStage::Info,
            last_heard: self.now,
            next_info: self.now + self.opts.heartbeat_us,
            commit: Point::default(),
            acked: Zxid::ZERO,
            peer_acks: BTreeMap::new(),
            uncommitted: VecDeque::new(),
            untossed: VecDeque::new(),
            timer_d: self.now,
            leader_commit: Zxid::ZERO,
            zab_mode: false,
            wants_zab: false,
            live: None,
            full_since: None,
            last_forced: self.now,
            coin: Coin {
                p: self.initial_p(),
                window_start: self.now,
                proposals: 0,
                d_sum_us: 0.0,
                d_samples: 0,
                d_us: None,
                lambda: 0.0,
                feasible_streak: 0,
                infeasible: false,
            },
        });
        self.send_follower_info(leader, out);
    }

    pub(crate) fn send_follower_info(&self, leader: NodeId, out: &mut ZabActions) {
        let hard = self.log.hard();
        let msg = Msg::FollowerInfo {
            accepted_epoch: hard.accepted_epoch,
            accepted_leader: hard.accepted_leader,
            recovering: hard.recovering,
        };
        self.send(out, leader, msg);
    }

    pub(crate) fn start_leading(&mut self, out: &mut ZabActions) {
        assert!(
            !self.recovering(),
            "a replica recovering from lost state stands for leader"
        );
        let mut infos = BTreeMap::new();
        infos.insert(self.cluster.me, self.log.hard().accepted_epoch);
        self.phase = Phase::Leading(Leader {
            epoch: 0,
            stage: LStage::Discovery,
            started: self.now,
            infos,
            forwards: Default::default(),
            recovering: BTreeSet::new(),
            ack_epochs: BTreeMap::new(),
            peers: BTreeMap::new(),
            epoch_seq: 0,
            ready_seq: 0,
            commit: Point::default(),
            next_counter: 1,
            next_ping: self.now,
            queued: VecDeque::new(),
            inflight: VecDeque::new(),
            elected_with: (self.log.hard().current_epoch, self.log.last().zxid),
            zab_mode: false,
        });
        self.try_new_epoch(out);
    }

    /// Leader, discovery: FOLLOWERINFO from a prospective follower. A recovering follower's
    /// accepted epoch still raises the epoch we pick (it may be a promise it kept), but it never
    /// counts toward the discovery quorum (recovery.rs).
    pub fn on_follower_info(
        &mut self,
        from: NodeId,
        accepted_epoch: u32,
        accepted_leader: NodeId,
        recovering: bool,
        out: &mut ZabActions,
    ) {
        let me = self.cluster.me;
        // Only replicas the configurations in force name (voters and learners) follow: a
        // removed or not yet added replica is refused, and keeps looking (reconfig.rs).
        if !self.membership().is_member(from) {
            return;
        }
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.stage != LStage::Discovery
            && (accepted_epoch > l.epoch || (accepted_epoch == l.epoch && accepted_leader != me))
        {
            // It accepted our epoch number from another candidate, so it will (rightly) never
            // ack ours: a replica acks one leader per epoch. Step down so that the next
            // election picks an epoch above it, rather than leave it out for good.
            self.become_looking(out);
            return;
        }
        // A follower that reconnects starts over.
        l.peers.remove(&from);
        l.ack_epochs.remove(&from);
        l.infos.insert(from, accepted_epoch);
        if recovering {
            l.recovering.insert(from);
        } else {
            l.recovering.remove(&from);
        }
        if l.stage == LStage::Discovery {
            self.try_new_epoch(out);
        } else {
            let (epoch, seq) = (l.epoch, l.epoch_seq);
            self.send_after(out, from, Msg::NewEpoch { epoch }, seq);
        }
    }

    /// With FOLLOWERINFO from a quorum of replicas that are not recovering (ourselves
    /// included), pick an epoch above every accepted epoch and propose it.
    fn try_new_epoch(&mut self, out: &mut ZabActions) {
        let me = self.cluster.me;
        let m = self.membership();
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        assert!(!l.recovering.contains(&me), "the leader is not recovering");
        let counted = m.is_quorum(|p| l.infos.contains_key(&p) && !l.recovering.contains(&p));
        if l.stage != LStage::Discovery || !counted {
            return;
        }
        let epoch = l.infos.values().copied().max().unwrap_or(0) + 1;
        l.epoch = epoch;
        l.stage = LStage::AwaitAckEpoch;
        let followers: Vec<NodeId> = l.infos.keys().copied().filter(|&p| p != me).collect();
        let hard = Hard {
            accepted_epoch: epoch,
            accepted_leader: me,
            ..self.log.hard().clone()
        };
        let seq = self.log.set_hard(hard, &mut out.persist);
        if let Phase::Leading(l) = &mut self.phase {
            l.epoch_seq = seq;
        }
        for p in followers {
            self.send_after(out, p, Msg::NewEpoch { epoch }, seq);
        }
        self.try_start_sync(out);
    }

    /// Follower, discovery: accept the new epoch durably, then ACKEPOCH with our log summary.
    pub fn on_new_epoch(&mut self, from: NodeId, epoch: u32, out: &mut ZabActions) {
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if from != f.leader || f.stage != FStage::Info {
            return;
        }
        let hard = self.log.hard();
        let ok = epoch > hard.accepted_epoch
            || (epoch == hard.accepted_epoch && hard.accepted_leader == from);
        // A recovering follower joined on a quorum's word that this leader's epoch is at least
        // `vouched`; an older epoch is one its lost promise may have refused (recovery.rs).
        let vouched = !hard.recovering || epoch >= f.vouched;
        if !ok || !vouched {
            self.become_looking(out);
            return;
        }
        f.epoch = epoch;
        f.stage = FStage::AwaitSync;
        f.last_heard = self.now;
        let seq = if epoch > hard.accepted_epoch {
            let h = Hard {
                accepted_epoch: epoch,
                accepted_leader: from,
                ..hard
            };
            self.log.set_hard(h, &mut out.persist)
        } else {
            self.log.hard_seq()
        };
        let msg = Msg::AckEpoch {
            epoch,
            current_epoch: hard.current_epoch,
            summary: self.log.summary(self.opts.max_summary_epochs),
        };
        self.send_after(out, from, msg, seq);
    }

    /// With ACKEPOCH from a quorum (ourselves included, recovering followers not), make the
    /// epoch current durably and synchronise every follower that acknowledged it, recovering
    /// ones too.
    pub(crate) fn try_start_sync(&mut self, out: &mut ZabActions) {
        let me = self.cluster.me;
        let m = self.membership();
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        let counted = m.is_quorum(|p| {
            p == me || (l.ack_epochs.contains_key(&p) && !l.recovering.contains(&p))
        });
        if l.stage != LStage::AwaitAckEpoch || !counted {
            return;
        }
        l.stage = LStage::AwaitNewLeaderAcks;
        let epoch = l.epoch;
        let acked = std::mem::take(&mut l.ack_epochs);
        let hard = Hard {
            current_epoch: epoch,
            led_epoch: epoch,
            ..self.log.hard().clone()
        };
        let seq = self.log.set_hard(hard, &mut out.persist);
        if let Phase::Leading(l) = &mut self.phase {
            l.ready_seq = seq;
        }
        for (p, summary) in acked {
            self.sync_follower(p, &summary, out);
        }
        self.try_establish(out);
    }
}

//! Reconfiguration (ZooKeeper 3.5's dynamic reconfiguration; docs/protocols/zab.md,
//! "Reconfiguration"): a new configuration is proposed as one log entry, committed, and in
//! force from the moment it is logged.
//!
//! * **The entry.** [`Zab::on_reconfigure`]: the established leader checks the request (the
//!   version it was computed from, one change in flight, a majority of the new voters connected
//!   and caught up) and proposes one entry carrying the command and the configuration, whose
//!   version is the entry's zxid ([`Zab::propose_config`]). Followers log it like any proposal
//!   ([`Zab::on_propose_config`]).
//! * **Joint quorums while it is pending.** Every replica derives its configurations from its
//!   own log ([`crate::log::Log::membership`]): the newest configuration at or before what it
//!   delivered is committed, any logged after it is pending, and every quorum (an election, a
//!   discovery, an establishment, a commit, the leader's SC2) needs a majority of the voters of
//!   each. So the old and the new voters cannot decide apart, whatever the change (one voter or
//!   many), and a truncation that removes the entry undoes it.
//! * **Activation.** Once the entry is committed the new configuration alone is in force; the
//!   leader stops talking to replicas it no longer names and, if it no longer votes, steps down.
//! * **Learners.** Replicas named as learners (ZooKeeper's observers) are synchronised and
//!   receive every proposal and commit, never count, and never vote or stand. A replica named
//!   by no configuration in force abstains from elections and is refused as a follower.
//! * **The new leader's rule.** Raft's single-server changes need a new leader to commit an entry
//!   of its own term first (Ongaro, 2015). Here a leader takes a change only once established,
//!   and establishment commits its whole history under its new epoch with a quorum of every
//!   configuration in force (NEWLEADER acknowledged), which is that commit.
//!
//! Only `Variant::Zab` changes its configuration: the variants' followers count acks against
//! the group's size (zab.md §3–6), and a change is refused there (`ConfigReject::Unsupported`).

use crate::{Bug, Entry, FStage, LStage, Msg, Phase, Variant, Zab, ZabActions, Zxid};
use std::sync::Arc;
use synod_core::{Change, Command, Config, ConfigReject, Event, NodeId, Reject};

impl Zab {
    /// A client's configuration change, at this replica.
    pub(crate) fn on_reconfigure(
        &mut self,
        command: Command,
        change: Change,
        out: &mut ZabActions,
    ) {
        match self.check_change(&change) {
            Ok(()) => self.propose_config(command, change, out),
            Err(r) => out.events.push(Event::Rejected {
                id: command.id,
                reason: Reject::Config(r),
            }),
        }
    }

    fn check_change(&self, change: &Change) -> Result<(), ConfigReject> {
        if self.opts.variant != Variant::Zab {
            return Err(ConfigReject::Unsupported);
        }
        let Phase::Leading(l) = &self.phase else {
            return Err(ConfigReject::NotLeader);
        };
        if l.stage != LStage::Broadcast {
            return Err(ConfigReject::NotLeader);
        }
        let m = self.membership();
        let latest = m.latest();
        if let Some(v) = change.expect_version {
            if v != latest.version {
                return Err(ConfigReject::Stale {
                    current: latest.version,
                });
            }
        }
        let pending = !m.pending.is_empty() || self.log.last_config_slot() > Some(l.commit.slot);
        if pending && self.opts.bug != Some(Bug::TwoChangesInFlight) {
            return Err(ConfigReject::InFlight);
        }
        let new = Config::new(0, change.voters.clone(), change.learners.clone())
            .map_err(ConfigReject::Invalid)?;
        if new.same_members(latest) {
            return Err(ConfigReject::Unchanged);
        }
        // A majority of the new voters must be synchronised and hold what is committed, or the
        // group could not commit the change (ZooKeeper's NEWCONFIGNOQUORUM).
        let me = self.cluster.me;
        let current = |p: NodeId| {
            p == me
                || l.peers
                    .get(&p)
                    .is_some_and(|x| x.synced && x.ack >= l.commit.zxid)
        };
        if !new.majority(current) {
            return Err(ConfigReject::NoQuorum);
        }
        Ok(())
    }

    /// L1 for a configuration: one entry, alone in its proposal.
    fn propose_config(&mut self, command: Command, change: Change, out: &mut ZabActions) {
        let last = self.log.last();
        let Phase::Leading(l) = &mut self.phase else {
            unreachable!("checked: an established leader")
        };
        if l.next_counter == u32::MAX {
            // The epoch's counter is exhausted: elect again (a new epoch, a fresh counter).
            out.events.push(Event::Rejected {
                id: command.id,
                reason: Reject::NoLeader,
            });
            self.become_looking(out);
            return;
        }
        let zxid = Zxid::new(l.epoch, l.next_counter);
        l.next_counter += 1;
        l.inflight.push_back(zxid);
        let config = Config::new(zxid.as_u64(), change.voters, change.learners)
            .expect("checked by check_change");
        let entry = Entry {
            zxid,
            slot: last.slot + 1,
            command,
            config: Some(Arc::new(config)),
        };
        let epoch = l.epoch;
        let peers: Vec<NodeId> = l.peers.keys().copied().collect();
        for p in peers {
            let msg = Msg::ProposeConfig {
                epoch,
                entry: entry.clone(),
            };
            self.send(out, p, msg);
        }
        self.log.append(vec![entry], &mut out.persist);
    }

    /// F1 for a configuration: it must continue our log exactly, as any proposal.
    pub(crate) fn on_propose_config(
        &mut self,
        from: NodeId,
        epoch: u32,
        entry: Entry,
        out: &mut ZabActions,
    ) {
        let last = self.log.last();
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage < FStage::Syncing {
            self.become_looking(out);
            return;
        }
        let expected = if last.zxid.epoch == epoch {
            Zxid::new(epoch, last.zxid.counter.saturating_add(1))
        } else {
            Zxid::new(epoch, 1)
        };
        if entry.zxid != expected || entry.slot != last.slot + 1 || entry.config.is_none() {
            self.become_looking(out);
            return;
        }
        self.log.append(vec![entry], &mut out.persist);
    }

    /// The leader's commit moved: once a configuration is committed, stop talking to the
    /// replicas it no longer names, and step down if we no longer vote.
    pub(crate) fn after_commit_config(&mut self, out: &mut ZabActions) {
        let m = self.membership();
        let me = self.cluster.me;
        if let Phase::Leading(l) = &mut self.phase {
            l.peers.retain(|&p, _| m.is_member(p));
            l.infos.retain(|&p, _| p == me || m.is_member(p));
        }
        if !m.is_voter(me) {
            self.become_looking(out);
        }
    }
}

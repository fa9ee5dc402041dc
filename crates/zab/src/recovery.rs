//! Recovery after lost state (docs/protocols/zab.md, "Recovery after lost state").
//!
//! The driver restores a replica with `DurableState::lost` when its disk lost something the
//! replica may have acknowledged: a record failed its checksum and the log was cut there, or the
//! disk came back empty. Zab's safety rests on promises kept on disk, and such a replica may
//! have broken two of them:
//!
//! * **Its log.** It may have acked a committed proposal and then lost it. If it voted in an
//!   election, or weighed in a leader's discovery, with the shorter log, it could help choose a
//!   leader whose initial history lacks that committed entry, which the new epoch then
//!   overwrites.
//! * **Its acceptedEpoch promise.** It may have acked NEWEPOCH e′ (so the leader of e′ counted on
//!   it to refuse every older epoch, and chose its history from a quorum that included it) and
//!   then lost that promise. If it then followed a leader of an older epoch e < e′ and acked its
//!   proposals, that leader could commit an entry that e′'s initial history lacks.
//!
//! So a recovering replica neither votes, stands, promises nor counts until it has been
//! synchronised by an established leader of an epoch that a quorum of **other** replicas vouches
//! for:
//!
//! 1. `Zab::restore` sets `Hard::recovering` and writes it before any message leaves
//!    ([`mark_if_lost`], [`Zab::gate_on_mark`]), so that a crash during recovery does not forget
//!    it; a hard state restored with the mark set stays recovering.
//! 2. In LOOKING it announces only abstaining votes and ignores other votes, so it never leads
//!    and never helps elect (`Zab::broadcast_vote`, `Zab::on_notification`, election.rs). It
//!    follows leader L only when fresh notifications (received in this incarnation, hence sent
//!    after the crash, since a restart breaks every connection) from a quorum of replicas other
//!    than itself say that they accepted L's epoch e, L's own LEADING notification among them
//!    ([`vouched_epoch`]). A report counts only once the sender has accepted e from L (a follower
//!    past NEWEPOCH) or proposed it (the leader past discovery): a follower still waiting for
//!    NEWEPOCH may yet refuse e.
//! 3. Its FOLLOWERINFO says it is recovering. The leader counts neither its FOLLOWERINFO nor its
//!    ACKEPOCH toward a discovery quorum and never lets its history weigh (no ahead-check), but
//!    synchronises it as usual (discovery.rs, sync.rs). It refuses a NEWEPOCH below the vouched
//!    epoch.
//! 4. After the sync and NEWLEADER it writes its current epoch with `recovering = false` behind
//!    the sync's log writes, and ACKNEWLEADER waits for that write (`Zab::on_new_leader`). From
//!    then on it is an ordinary follower: its log equals the leader's initial history, which was
//!    chosen by a quorum that excluded it.
//!
//! Why a quorum of others: any quorum Q that relied on the lost promise e′ contains the
//! recovering replica R and q − 1 others, and q − 1 + q > n − 1, so Q \ {R} meets every quorum of
//! the other n − 1 replicas. The leader of e′ is in Q \ {R} and wrote `accepted_epoch = e′`
//! before its NEWEPOCH left, so before R's promise, so before R's crash: if it vouches, it
//! vouches for an epoch of at least e′, never an older one (cf. Viewstamped Replication
//! Revisited §4.3; Alagappan et al., "Protocol-Aware Recovery for Consensus-Based Storage",
//! FAST 2018). docs/protocols/zab.md discusses the remaining assumption for n ≥ 5.

use crate::log::{Log, Ops};
use crate::{Hard, Msg, PeerState, Settled, Vote, Zab, ZabActions};
use std::collections::BTreeMap;
use synod_core::{Membership, NodeId};

/// At restore: when the disk lost state, mark the hard state recovering and issue the write
/// that makes the mark durable. Returns that op (handed to the driver at the first step) and
/// its seq, or nothing and 0. A hard state restored with the mark already set needs no write.
pub(crate) fn mark_if_lost(log: &mut Log, lost: bool) -> (Ops, u64) {
    let mut ops = Ops::new();
    if !lost {
        return (ops, 0);
    }
    let hard = Hard {
        recovering: true,
        ..log.hard().clone()
    };
    let seq = log.set_hard(hard, &mut ops);
    (ops, seq)
}

/// The epoch a quorum of other replicas vouches for with `leader` at its head, if they do:
/// `leader` itself reports LEADING with an epoch e it proposed, and a quorum of the
/// configurations in force (the leader included) report that they accepted e from it.
/// `settled` holds only what arrived in this election round, from peers (never from `me`).
/// A replica whose disk came back empty knows only the configuration the group was born with.
pub(crate) fn vouched_epoch(
    settled: &BTreeMap<NodeId, Settled>,
    me: NodeId,
    leader: NodeId,
    membership: &Membership,
) -> Option<u32> {
    assert!(
        !settled.contains_key(&me),
        "a replica's own report never vouches for it"
    );
    let head = settled.get(&leader)?;
    if !head.leading || head.leader != leader || head.accepted == 0 || leader == me {
        return None;
    }
    let e = head.accepted;
    let support = membership.is_quorum(|p| {
        settled
            .get(&p)
            .is_some_and(|s| s.leader == leader && s.accepted == e)
    });
    support.then_some(e)
}

impl Zab {
    /// This replica lost durable state and has not been synchronised since (`Hard::recovering`,
    /// durable or being written).
    pub fn recovering(&self) -> bool {
        self.log.hard().recovering
    }

    /// Until the recovering mark written at restore is durable, every message waits for it: a
    /// crash before that write must not leave a trace of this incarnation that a restart
    /// without the mark could contradict.
    pub(crate) fn gate_on_mark(&self, out: &mut ZabActions, first_send: usize) {
        if self.mark_seq == 0 || self.log.durable_seq() >= self.mark_seq {
            return;
        }
        for e in &mut out.send[first_send..] {
            e.after_durable = e.after_durable.max(self.mark_seq);
        }
    }

    /// Invariant: what a recovering replica sends never counts. It sends no ack (ACKNEWLEADER
    /// leaves only once the mark is cleared, in the same step), no leader message, only
    /// abstaining votes, FOLLOWING reports that vouch for nothing, and FOLLOWERINFO that says it
    /// is recovering.
    pub(crate) fn check_recovering_sends(&self, out: &ZabActions, first_send: usize) {
        if !self.recovering() {
            return;
        }
        for e in &out.send[first_send..] {
            let ok = match &e.msg {
                Msg::Notification {
                    vote,
                    state,
                    accepted,
                    ..
                } => match state {
                    PeerState::Looking => *vote == Vote::default() && *accepted == 0,
                    PeerState::Following => *accepted == 0,
                    PeerState::Leading => false,
                },
                Msg::FollowerInfo { recovering, .. } => *recovering,
                // ACKEPOCH is sent, but the leader does not count it (its FOLLOWERINFO said
                // recovering); a forward needs a serving follower, which is never recovering.
                Msg::AckEpoch { .. } | Msg::Forward { .. } => true,
                Msg::Ack { .. }
                | Msg::AckNewLeader { .. }
                | Msg::NewEpoch { .. }
                | Msg::Sync { .. }
                | Msg::Entries { .. }
                | Msg::NewLeader { .. }
                | Msg::UpToDate { .. }
                | Msg::Proposal { .. }
                | Msg::ProposeConfig { .. }
                | Msg::Commit { .. }
                | Msg::Ping { .. } => false,
            };
            assert!(
                ok,
                "replica {} is recovering from lost state and sent {:?}",
                self.cluster.me, e.msg
            );
        }
    }
}

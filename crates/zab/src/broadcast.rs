//! Broadcast (zab.md §2.6): L1 propose, F1 log then ack, L2 commit on a quorum of acks, F2 and
//! L3 deliver in order. A proposal carries a batch: every command the driver handed over at
//! once (or a follower forwarded at once), each with its own zxid and slot, logged with one
//! write, sent with one message per follower and acknowledged with one cumulative ack.

use crate::{Bug, Entry, FStage, LStage, Msg, Phase, Point, Variant, Zab, ZabActions, Zxid};
use synod_core::{quorum, Apply, Command, Event, NodeId, Reject};

impl Zab {
    pub(crate) fn on_submit(&mut self, commands: Vec<Command>, out: &mut ZabActions) {
        match &mut self.phase {
            Phase::Leading(_) => {
                let refused = self.leader_take(commands, out);
                reject(out, refused, Reject::Busy);
            }
            Phase::Following(f) if f.stage == FStage::Broadcast => {
                let (leader, epoch) = (f.leader, f.epoch);
                if self.opts.bug == Some(Bug::ForwardTwice) {
                    // The bug is the follower's: the same commands forwarded as two forwards.
                    let (nonce, seq) = self.forwarding.number();
                    let again = Msg::Forward {
                        epoch,
                        nonce,
                        seq,
                        commands: commands.clone(),
                    };
                    self.send(out, leader, again);
                }
                let (nonce, seq) = self.forwarding.number();
                self.send(
                    out,
                    leader,
                    Msg::Forward {
                        epoch,
                        nonce,
                        seq,
                        commands,
                    },
                );
            }
            _ => reject(out, commands, Reject::NoLeader),
        }
    }

    /// Leader: take commands to order, submitted here or forwarded. They wait in the queue
    /// while the epoch is not established or the window of batches in flight is full, and are
    /// proposed as soon as it has room. Returns the commands beyond the bounds (the queue's, and
    /// `max_inflight` commands logged or queued and not yet committed): a slow quorum pushes
    /// back on clients.
    fn leader_take(&mut self, mut commands: Vec<Command>, out: &mut ZabActions) -> Vec<Command> {
        let last = self.log.last().slot;
        let (max_queued, max_inflight) = (self.opts.max_queued, self.opts.max_inflight);
        let Phase::Leading(l) = &mut self.phase else {
            return commands;
        };
        let room = if l.stage == LStage::Broadcast {
            let uncommitted = last - l.commit.slot + l.queued.len() as u64;
            max_inflight.saturating_sub(uncommitted) as usize
        } else {
            max_queued.saturating_sub(l.queued.len())
        };
        let refused = commands.split_off(room.min(commands.len()));
        l.queued.extend(commands);
        self.propose_queued(out);
        refused
    }

    /// Propose what waits in the queue while the window has room, each batch at most
    /// `max_batch` commands.
    pub(crate) fn propose_queued(&mut self, out: &mut ZabActions) {
        let (window, max_batch) = (self.window(), self.opts.max_batch.max(1));
        loop {
            let Phase::Leading(l) = &mut self.phase else {
                return;
            };
            if l.stage != LStage::Broadcast || l.queued.is_empty() || l.inflight.len() >= window {
                return;
            }
            let n = l.queued.len().min(max_batch);
            if l.next_counter as u64 + n as u64 > u32::MAX as u64 {
                // The epoch's zxid counter is exhausted (2^32 proposals): as ZooKeeper does,
                // elect again, which starts a new epoch with a fresh counter.
                self.become_looking(out);
                return;
            }
            let batch: Vec<Command> = l.queued.drain(..n).collect();
            self.propose(batch, out);
        }
    }

    /// Batches kept proposed and uncommitted. A coin variant keeps at least
    /// `COIN_MIN_WINDOW`: its leader commits a batch on a later proposal's Head as often as on
    /// its own (implicit acks, zab.md §3.3), so with one batch in flight every batch whose tosses
    /// all came up Tail would wait for timer D (ZabCt at N = 3 under one client: 73 commands/s
    /// instead of 1700 in the simulator).
    fn window(&self) -> usize {
        let w = self.opts.window.max(1);
        if self.opts.variant.coin(self.cluster.size()).is_some() {
            w.max(COIN_MIN_WINDOW)
        } else {
            w
        }
    }

    /// L1: assign the next zxids to a batch, log it and send it to every follower as one
    /// proposal. The leader's own write runs in parallel with the sends; its own ack counts once
    /// the write is durable.
    pub fn propose(&mut self, commands: Vec<Command>, out: &mut ZabActions) {
        assert!(
            !commands.is_empty(),
            "a proposal carries at least one command"
        );
        let last = self.log.last();
        let Phase::Leading(l) = &mut self.phase else {
            unreachable!("only a leader proposes")
        };
        assert!(
            l.next_counter as u64 + commands.len() as u64 <= u32::MAX as u64,
            "zxid counter of epoch {} exhausted",
            l.epoch
        );
        let first = Point {
            zxid: Zxid::new(l.epoch, l.next_counter),
            slot: last.slot + 1,
        };
        l.next_counter += commands.len() as u32;
        l.inflight.push_back(Zxid::new(l.epoch, l.next_counter - 1));
        let epoch = l.epoch;
        let now = self.now;
        // Each proposal echoes the peer's last ack stamp with how long we held it (ZabCT's d).
        let peers: Vec<(NodeId, (u64, u64))> = l
            .peers
            .iter_mut()
            .map(|(&id, p)| {
                let echo = match p.echo {
                    (0, _) => (0, 0),
                    (stamp, at) => (stamp, now.saturating_sub(at)),
                };
                p.echo = (0, 0);
                (id, echo)
            })
            .collect();
        let entries = batch_entries(first, &commands);
        let proposal = |echo| Msg::Proposal {
            epoch,
            first,
            commands: commands.clone(),
            echo,
        };
        if self.opts.variant.leader_first() {
            // [P]'s ZabAA: the proposal counts as the leader's ack, so it leaves only once the
            // leader's own write is durable.
            let seq = self.log.append(entries, &mut out.persist);
            for (p, echo) in peers {
                self.send_after(out, p, proposal(echo), seq);
            }
        } else {
            // L1: the leader's write runs in parallel with the sends.
            for (p, echo) in peers {
                self.send(out, p, proposal(echo));
            }
            self.log.append(entries, &mut out.persist);
        }
        if self.opts.bug == Some(Bug::CommitOnOwnAck) {
            self.advance_commit(out);
        }
    }

    /// F1: a proposal must continue our log exactly; anything else means we missed something,
    /// and we resynchronise rather than deliver.
    pub fn on_proposal(
        &mut self,
        from: NodeId,
        epoch: u32,
        first: Point,
        commands: Vec<Command>,
        echo: (u64, u64),
        out: &mut ZabActions,
    ) {
        let bug = self.opts.bug;
        let last = self.log.last();
        let now = self.now;
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        // ZabCT's input d: half the round trip of an ack stamp minus the leader's hold time.
        f.coin.sample_d(now, echo);
        if f.stage < FStage::Syncing {
            self.become_looking(out);
            return;
        }
        let expected = if last.zxid.epoch == epoch {
            Zxid::new(epoch, last.zxid.counter + 1)
        } else {
            Zxid::new(epoch, 1)
        };
        let fits = first.zxid == expected
            && first.slot == last.slot + 1
            && !commands.is_empty()
            && (first.zxid.counter as u64 + commands.len() as u64) <= u32::MAX as u64;
        if !fits {
            self.become_looking(out);
            return;
        }
        let stage = f.stage;
        let entries = batch_entries(first, &commands);
        let zxid = entries.last().expect("non-empty").zxid;
        self.log.append(entries, &mut out.persist);
        if self.opts.variant != Variant::Zab && stage >= FStage::Synced {
            self.variant_on_proposal(zxid);
        }
        if bug == Some(Bug::AckBeforeDurable) && stage >= FStage::Synced {
            self.log.pretend_durable();
            let ack = self.ack(epoch, zxid);
            self.send(out, from, ack);
        }
    }

    pub(crate) fn on_durable(&mut self, upto: u64, out: &mut ZabActions) {
        if !self.log.on_durable(upto) && !matches!(self.phase, Phase::Leading(_)) {
            return;
        }
        let durable = self.log.durable().zxid;
        let variant = self.opts.variant;
        match &mut self.phase {
            Phase::Following(f) if f.stage >= FStage::Synced && variant != Variant::Zab => {
                self.variant_on_durable(out);
            }
            Phase::Following(f) if f.stage >= FStage::Synced && durable > f.acked => {
                f.acked = durable;
                let (leader, epoch) = (f.leader, f.epoch);
                let ack = self.ack(epoch, durable);
                self.send(out, leader, ack);
            }
            Phase::Leading(l) if l.stage == LStage::Broadcast => self.advance_commit(out),
            Phase::Leading(_) => self.try_establish(out),
            _ => {}
        }
    }

    pub fn on_ack(
        &mut self,
        from: NodeId,
        epoch: u32,
        zxid: Zxid,
        (zab, mode): (bool, bool),
        stamp: u64,
        out: &mut ZabActions,
    ) {
        let now = self.now;
        if let Phase::Following(f) = &mut self.phase {
            // Variants: another follower's (cumulative) ack.
            if f.epoch == epoch && from != f.leader && f.stage >= FStage::Synced {
                let a = f.peer_acks.entry(from).or_insert(Zxid::ZERO);
                if zxid > *a {
                    *a = zxid;
                    self.follower_commit(out);
                }
            }
            return;
        }
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if epoch != l.epoch {
            return;
        }
        let Some(p) = l.peers.get_mut(&from) else {
            return;
        };
        p.last_heard = now;
        if stamp > 0 {
            p.echo = (stamp, now);
        }
        if p.synced {
            p.vote = Some(zab);
            p.mode = mode;
            if zab && !l.zab_mode && self.opts.variant.switches() && l.stage == LStage::Broadcast {
                // zab.md §6: one vote for Zab switches everyone (2PC-like).
                self.switch_mode(true, out);
            }
        }
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        let Some(p) = l.peers.get_mut(&from) else {
            return;
        };
        if !p.synced || zxid <= p.ack {
            return;
        }
        p.ack = zxid;
        if l.stage == LStage::Broadcast {
            self.advance_commit(out);
        }
    }

    /// L2: the highest zxid a quorum has durably logged (acks are cumulative) is committed: a
    /// majority of the voters of every configuration in force (reconfig.rs). Committing a
    /// configuration changes the quorum, so the rule runs again with the new one.
    pub fn advance_commit(&mut self, out: &mut ZabActions) {
        loop {
            let before = self.membership();
            if !self.commit_once(&before, out) {
                return;
            }
            if self.membership().versions() == before.versions() {
                return;
            }
            self.after_commit_config(out);
        }
    }

    /// One round of L2 with the configurations `m`: true when the commit point moved.
    fn commit_once(&mut self, m: &synod_core::Membership, out: &mut ZabActions) -> bool {
        let me = self.cluster.me;
        let own = if self.opts.bug == Some(Bug::CommitOnOwnAck) {
            self.log.last().zxid
        } else {
            self.log.durable().zxid
        };
        let bug = self.opts.bug;
        let Phase::Leading(l) = &mut self.phase else {
            return false;
        };
        if l.stage != LStage::Broadcast {
            return false;
        }
        let ack_of = |p: NodeId| -> Option<Zxid> {
            if p == me {
                Some(own)
            } else {
                l.peers.get(&p).filter(|x| x.synced).map(|x| x.ack)
            }
        };
        let reached = match bug {
            Some(Bug::CommitOnOwnAck) => Some(own),
            Some(Bug::LearnersCount) => {
                // Every synchronised replica counts, voter or not.
                let mut acks: Vec<Zxid> = l
                    .peers
                    .values()
                    .filter(|p| p.synced)
                    .map(|p| p.ack)
                    .collect();
                acks.push(own);
                quorum::kth_largest(&mut acks, quorum::majority(m.latest().voters.len()))
            }
            _ => m.quorum_value(ack_of),
        };
        let Some(z) = reached else {
            return false;
        };
        if z <= l.commit.zxid {
            return false;
        }
        let at = self
            .log
            .point_of(z)
            .expect("acked zxids are in the leader's log");
        l.commit = at;
        while l.inflight.front().is_some_and(|z| *z <= at.zxid) {
            l.inflight.pop_front();
        }
        let epoch = l.epoch;
        let zab = l.zab_mode || self.opts.variant.leader_commits();
        if zab {
            let peers: Vec<NodeId> = l.peers.keys().copied().collect();
            for p in peers {
                self.send(out, p, Msg::Commit { epoch, at, zab });
            }
        }
        self.deliver(at, out);
        // The window has room again: what waited goes out as one batch.
        self.propose_queued(out);
        true
    }

    pub fn on_commit(
        &mut self,
        from: NodeId,
        epoch: u32,
        at: Point,
        zab: bool,
        out: &mut ZabActions,
    ) {
        let switches = self.opts.variant.switches();
        let now = self.now;
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if switches && f.zab_mode != zab {
            // The leader's decision (prot of its commit): run Zab, or return to the variant
            // (with p reset: 0.5 for ZabCt, the last computed for ZabCT; zab.md §6). Our next
            // ack reports the mode, which stops the leader re-sending its decision.
            f.zab_mode = zab;
            // Entering Zab our vote is Zab until the return rule says otherwise (a vote for the
            // variant from before the switch must not bring the epoch straight back).
            f.wants_zab = zab;
            if !zab {
                for (_, t) in f.uncommitted.iter_mut() {
                    *t = now;
                }
            }
            let (leader, epoch, synced) = (f.leader, f.epoch, f.stage >= FStage::Synced);
            if !zab && self.opts.variant == Variant::CtRestricted {
                let p = self.initial_p();
                if let Phase::Following(f) = &mut self.phase {
                    f.coin.p = p;
                }
            }
            // Only a synchronised follower acks (before ACKNEWLEADER its log is not the
            // leader's; a recovering replica must not ack at all, recovery.rs): the others
            // report the mode with their first ack.
            if synced {
                let durable = self.log.durable().zxid;
                let ack = self.ack(epoch, durable);
                self.send(out, leader, ack);
            }
        }
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        f.leader_committed(at);
        if f.stage >= FStage::Synced {
            let commit = f.commit;
            self.deliver(commit, out);
        }
    }

    /// abdeliver every logged entry up to `commit`, in slot order.
    pub fn deliver(&mut self, commit: Point, out: &mut ZabActions) {
        let upto = commit.slot.min(self.log.last().slot);
        if let Some(e) = self.log.get(commit.slot) {
            assert_eq!(e.zxid, commit.zxid, "a commit names an entry of our log");
        }
        while self.applied < upto {
            let e = self
                .log
                .get(self.applied + 1)
                .expect("committed entries above the snapshot are in the log");
            out.apply.push(Apply::Command {
                at: e.point().position(),
                command: e.command.clone(),
            });
            self.applied += 1;
            if let Some(c) = e.config.clone() {
                // Delivered, so committed: the hard state keeps it (reconfig.rs).
                self.log.config_committed(&c, &mut out.persist);
            }
        }
    }

    /// A follower's cumulative ack, stamped with our clock (echoed back for ZabCT's d), with
    /// our vote on the broadcast mode and the mode we run.
    pub(crate) fn ack(&self, epoch: u32, zxid: Zxid) -> Msg {
        let (zab, mode) = match &self.phase {
            Phase::Following(f) => (f.wants_zab, f.zab_mode),
            _ => (false, false),
        };
        Msg::Ack {
            epoch,
            zxid,
            zab,
            mode,
            stamp: self.now,
        }
    }

    pub fn on_ping(
        &mut self,
        from: NodeId,
        epoch: u32,
        commit: Point,
        last: Zxid,
        live: u16,
        out: &mut ZabActions,
    ) {
        let now = self.now;
        // Present enough for the variant to run: all N − 1 for ZabCt and ZabCT, f + 1 for ZabAA.
        let followers = self
            .opts
            .variant
            .followers_needed(self.cluster.size())
            .max(1);
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage < FStage::Synced {
            return;
        }
        f.live = Some(live as usize);
        if live as usize >= followers {
            f.full_since.get_or_insert(now);
        } else {
            f.full_since = None;
        }
        f.leader_committed(commit);
        let commit = f.commit;
        if last > self.log.last().zxid {
            // FIFO: every proposal up to `last` was sent before this ping, so we lost one.
            self.become_looking(out);
            return;
        }
        // The heartbeat reply is a cumulative ack that also carries our vote.
        let ack = self.ack(epoch, self.log.durable().zxid);
        self.send(out, from, ack);
        let synced_only = matches!(&self.phase, Phase::Following(f) if f.stage == FStage::Synced);
        if synced_only {
            // Only an established leader pings, so this heartbeat says what a lost UPTODATE
            // would have said (a one-way partition can drop it while later messages pass;
            // sim seed 6 stayed synchronised and never served): serve.
            self.start_serving(from, epoch, commit, out);
        } else {
            self.deliver(commit, out);
        }
    }

    /// Leader: a follower forwarded its clients' commands; they join the queue and leave in the
    /// next batch.
    /// Leader: commands a follower forwarded. Each forward is taken once, in the order the
    /// follower sent them: one forwarded to an earlier epoch's leader, or not numbered above
    /// the last one taken from this follower's incarnation, is a replay (a reconnecting
    /// transport may deliver a broken connection's messages late, or twice) and is dropped —
    /// taking it would order its commands twice. Dropping loses nothing a client was told of:
    /// it retries after its timeout.
    pub fn on_forward(
        &mut self,
        from: NodeId,
        (epoch, nonce, seq): (u32, u64, u64),
        commands: Vec<Command>,
        out: &mut ZabActions,
    ) {
        let now = self.now;
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if epoch != l.epoch {
            return;
        }
        if !l.forwards.fresh(from, (nonce, seq)) {
            return;
        }
        if let Some(p) = l.peers.get_mut(&from) {
            p.last_heard = now;
        }
        // Beyond the bounds commands are dropped: the forwarding replica's client sees no
        // delivery and retries, as after any lost connection.
        let _dropped = self.leader_take(commands, out);
    }
}

/// The log entries of a batch proposed from `first`: consecutive zxids and slots.
fn batch_entries(first: Point, commands: &[Command]) -> Vec<Entry> {
    commands
        .iter()
        .enumerate()
        .map(|(i, c)| Entry {
            zxid: Zxid::new(first.zxid.epoch, first.zxid.counter + i as u32),
            slot: first.slot + i as u64,
            command: c.clone(),
            config: None,
        })
        .collect()
}

/// The smallest window of a coin variant (see `Zab::window`).
const COIN_MIN_WINDOW: usize = 16;

fn reject(out: &mut ZabActions, commands: Vec<Command>, reason: Reject) {
    for c in commands {
        out.events.push(Event::Rejected { id: c.id, reason });
    }
}

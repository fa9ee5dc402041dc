//! The host: every group of one node, as quinn-proto's `Endpoint` holds many connections.
//! Bytes from peers, client submissions, storage and snapshot completions and the time go in;
//! frames per peer, storage ops, replies, snapshot jobs, views and the next deadline come out
//! ([`Outputs`]). No sockets, threads, files or clocks: the server drives it with tokio, the
//! simulator on virtual time.

use crate::group::{Cx, GroupRunner, Scratch};
use crate::output::{
    Applied, Observed, Outputs, PeerKind, SnapshotJob, SubmitError, SubmitResult, Transmit,
};
use crate::telemetry::Telemetry;
use bytes::Bytes;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use synod_core::{
    BatchLimits, Command, GroupId, GroupMessage, NodeId, Position, Reject, Snapshot, TimeUs, View,
};
use tracing::{debug, warn};

/// Bugs planted in the host, to prove that the simulator catches them. Never set outside tests
/// and `synod sim --plant`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostBug {
    #[default]
    None,
    /// A command routed from another group to a replica that does not lead its group (on this
    /// node or a peer) is dropped instead of being handed to the core (which would forward it
    /// to its leader).
    DropRoutedAtFollower,
    /// The state machine's unacknowledged messages to other groups are never sent again (not
    /// when a replica becomes leader, nor periodically).
    NoResend,
    /// Storage ops are reported durable to the core as soon as they are issued, before the
    /// driver wrote them.
    DurableBeforeWrite,
    /// A client is answered as soon as its command is handed to the core, before it is
    /// ordered, written or applied.
    ReplyBeforeDurable,
}

impl HostBug {
    pub const ALL: [(&'static str, HostBug); 4] = [
        ("drop-routed-at-follower", HostBug::DropRoutedAtFollower),
        ("no-resend", HostBug::NoResend),
        ("durable-before-write", HostBug::DurableBeforeWrite),
        ("reply-before-durable", HostBug::ReplyBeforeDurable),
    ];

    pub fn named(name: &str) -> Option<HostBug> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, b)| b)
    }
}

#[derive(Clone, Debug)]
pub struct HostConfig {
    pub me: NodeId,
    /// The members of every group of the cluster, those this node does not run included
    /// (where messages to them go).
    pub routes: BTreeMap<GroupId, Vec<NodeId>>,
    /// Bounds on one batch handed to a core.
    pub limits: BatchLimits,
    /// Commands of one group queued or waiting for their delivery here, at most.
    pub max_pending: usize,
    /// A client waiting longer than this is answered [`SubmitError::Timeout`].
    pub request_timeout_us: u64,
    /// How often a leader sends its machine's unacknowledged messages to other groups again.
    pub resend_every_us: u64,
    /// Command ids are `id_base + 1`, `+ 2`, …: unique per process start (the server puts the
    /// node id and random bits in it, the simulator the node and its incarnation).
    pub id_base: u64,
    /// Record every submission, delivery, restore and view in [`Outputs::observed`].
    pub observe: bool,
    pub bug: HostBug,
}

impl HostConfig {
    pub fn new(me: NodeId) -> Self {
        HostConfig {
            me,
            routes: BTreeMap::new(),
            limits: BatchLimits::default(),
            max_pending: 100_000,
            request_timeout_us: 10_000_000,
            resend_every_us: 1_000_000,
            id_base: (me as u64 & 0xFF) << 56,
            observe: false,
            bug: HostBug::None,
        }
    }
}

/// One group as `/v1/status` shows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GroupStatus {
    pub id: GroupId,
    pub protocol: String,
    pub machine: String,
    pub members: Vec<NodeId>,
    pub role: String,
    pub leader: Option<NodeId>,
    pub epoch: u64,
    pub applied_slot: u64,
    pub applied_tag: u64,
    pub digest: u64,
    pub snapshot_slot: u64,
    pub pending_requests: usize,
    pub queued: usize,
    pub outbox_held: usize,
    /// The configurations in force (docs/membership.md), for a family that changes them
    /// online: the committed one's version, voters and learners, and the versions pending.
    pub config: Option<ConfigStatus>,
}

/// A group's configurations in force, as `/v1/status` and `synod member list` show them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConfigStatus {
    pub version: u64,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// Configurations logged and not yet known committed here, by version.
    pub pending: Vec<u64>,
}

impl From<&synod_core::Membership> for ConfigStatus {
    fn from(m: &synod_core::Membership) -> Self {
        ConfigStatus {
            version: m.committed.version,
            voters: m.committed.voters.clone(),
            learners: m.committed.learners.clone(),
            pending: m.pending.iter().map(|c| c.version).collect(),
        }
    }
}

/// A client waiting for its command.
struct Waiter<T> {
    token: T,
    since: TimeUs,
}

/// A group with what the host keeps for it.
struct Slot<T> {
    runner: Box<dyn GroupRunner>,
    /// Commands waiting to be handed to the core, in submission order.
    queue: VecDeque<Command>,
    /// Clients waiting for their command's delivery here, by command id.
    waiters: HashMap<u64, Waiter<T>>,
    /// When each waiter gives up (submission order is deadline order: one timeout for all).
    expiry: VecDeque<(TimeUs, u64)>,
    /// The view last published.
    view: View,
    /// The group stopped (fail-stop): it is stepped no more.
    stopped: bool,
}

impl<T> Slot<T> {
    /// Refuse every client waiting here (the group stopped, or the node shuts down), and drop
    /// what waits for the core.
    fn refuse_all(&mut self, replies: &mut Vec<(T, SubmitResult)>) {
        for (_, w) in self.waiters.drain() {
            replies.push((w.token, Err(SubmitError::ShuttingDown)));
        }
        self.expiry.clear();
        self.queue.clear();
    }
}

pub struct Host<T> {
    cfg: HostConfig,
    groups: BTreeMap<GroupId, Slot<T>>,
    out: Outputs<T>,
    scratch: Scratch,
    telemetry: Box<dyn Telemetry>,
    next_id: u64,
    /// Rotates the member a message to a remote group goes to.
    route_turn: usize,
    next_resend: TimeUs,
    shutting_down: bool,
    now: TimeUs,
}

impl<T> Host<T> {
    /// A host running `groups` (one per id), started at `now`.
    pub fn new(
        cfg: HostConfig,
        groups: Vec<Box<dyn GroupRunner>>,
        telemetry: Box<dyn Telemetry>,
        now: TimeUs,
    ) -> Self {
        let groups: BTreeMap<GroupId, Slot<T>> = groups
            .into_iter()
            .map(|runner| {
                let view = runner.view();
                (
                    runner.id(),
                    Slot {
                        runner,
                        queue: VecDeque::new(),
                        waiters: HashMap::new(),
                        expiry: VecDeque::new(),
                        view,
                        stopped: false,
                    },
                )
            })
            .collect();
        let mut out = Outputs::default();
        for (&id, s) in &groups {
            out.views.push((id, s.view));
        }
        let mut host = Host {
            next_id: cfg.id_base,
            next_resend: now + cfg.resend_every_us,
            cfg,
            groups,
            out,
            scratch: Scratch::default(),
            telemetry,
            route_turn: 0,
            shutting_down: false,
            now,
        };
        // Every core boots (Input::Start) before anything else reaches it.
        let mut cur = None;
        while let Some(id) = host.next_group(cur) {
            cur = Some(id);
            host.step(id, now, |r, cx| r.start(now, cx));
        }
        host
    }

    pub fn me(&self) -> NodeId {
        self.cfg.me
    }

    /// What the host produced since the last call: carry it out, then clear it (the host
    /// reuses the buffers).
    pub fn outputs(&mut self) -> &mut Outputs<T> {
        &mut self.out
    }

    pub fn group_ids(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.keys().copied()
    }

    pub fn runs(&self, group: GroupId) -> bool {
        self.groups.contains_key(&group)
    }

    /// The group's view as last published.
    pub fn view(&self, group: GroupId) -> Option<View> {
        self.groups.get(&group).map(|s| s.view)
    }

    pub fn telemetry(&mut self) -> &mut dyn Telemetry {
        &mut *self.telemetry
    }

    fn clock(&mut self, now: TimeUs) -> TimeUs {
        // A driver's clock never goes back; a host that is told otherwise keeps its own time.
        self.now = self.now.max(now);
        self.now
    }

    /// Run `f` on group `id`'s runner with the host's context, then act on what it produced.
    fn step(&mut self, id: GroupId, now: TimeUs, f: impl FnOnce(&mut dyn GroupRunner, &mut Cx)) {
        let mut issued = self.out.wal.len();
        self.step_once(id, now, f);
        if self.cfg.bug != HostBug::DurableBeforeWrite {
            return;
        }
        // The planted bug: the core hears its writes are durable before the driver saw them.
        loop {
            let upto = self.out.wal[issued.min(self.out.wal.len())..]
                .iter()
                .filter(|(_, op)| op.group == id)
                .map(|(seq, _)| *seq)
                .max();
            let Some(upto) = upto else { break };
            issued = self.out.wal.len();
            self.step_once(id, now, |r, cx| r.durable(now, upto, cx));
        }
    }

    fn step_once(
        &mut self,
        id: GroupId,
        now: TimeUs,
        f: impl FnOnce(&mut dyn GroupRunner, &mut Cx),
    ) {
        let Some(slot) = self.groups.get_mut(&id) else {
            return;
        };
        if slot.stopped {
            return;
        }
        self.scratch.clear();
        {
            let mut cx = Cx {
                transmit: &mut self.out.transmit,
                wal: &mut self.out.wal,
                observed: self.cfg.observe.then_some(&mut self.out.observed),
                scratch: &mut self.scratch,
                telemetry: &mut *self.telemetry,
            };
            f(&mut *slot.runner, &mut cx);
        }
        self.after_step(id, now);
    }

    /// Answer the clients of what a step delivered or refused, route the machine's messages,
    /// publish a changed view, and start a snapshot when one is due.
    fn after_step(&mut self, id: GroupId, now: TimeUs) {
        let me = self.cfg.me;
        let mut scratch = std::mem::take(&mut self.scratch);
        let slot = self.groups.get_mut(&id).expect("stepped group");
        for a in scratch.applied.drain(..) {
            if let Some(w) = slot.waiters.remove(&a.id) {
                self.telemetry.committed(id, now.saturating_sub(w.since));
                self.out.replies.push((w.token, Ok(a)));
            }
        }
        for (cmd, reason) in scratch.rejected.drain(..) {
            if let Some(w) = slot.waiters.remove(&cmd) {
                let e = match reason {
                    Reject::NoLeader => SubmitError::NoLeader,
                    Reject::Busy => SubmitError::Busy,
                    Reject::Config(r) => SubmitError::Config(r),
                };
                self.out.replies.push((w.token, Err(e)));
            }
        }
        if let Some(fatal) = scratch.fatal.take() {
            slot.stopped = true;
            slot.refuse_all(&mut self.out.replies);
            self.out.fatal.get_or_insert(fatal);
        }
        let view = slot.runner.view();
        let mut newly_leading = false;
        if view != slot.view {
            newly_leading = view.leader == Some(me) && slot.view.leader != Some(me);
            slot.view = view;
            self.out.views.push((id, view));
        }
        if !slot.stopped {
            if let Some((at, make)) = slot.runner.snapshot_due() {
                self.out.snapshots.push(SnapshotJob {
                    group: id,
                    at,
                    make,
                });
            }
        }
        let mut messages = std::mem::take(&mut scratch.messages);
        if newly_leading && self.cfg.bug != HostBug::NoResend {
            // A new leader sends its machine's unacknowledged messages again at once.
            slot.runner.pending(&mut messages);
        }
        self.scratch = scratch;
        for m in messages.drain(..) {
            self.route(id, m, now);
        }
        self.scratch.messages = messages;
    }

    /// Send a state machine's message to its group: only from the sending group's leader
    /// (every replica of the group emits the same messages).
    fn route(&mut self, from: GroupId, msg: GroupMessage, now: TimeUs) {
        let me = self.cfg.me;
        if self.groups.get(&from).map(|s| s.view.leader) != Some(Some(me)) {
            return;
        }
        self.telemetry.group_message(from);
        // A local replica that a change removed from the target group knows no leader of it any
        // more: send to the members it last knew instead, as to a group not run here (sim
        // `--kv --faults all,reconfig` seed 1: a two-phase commit waited forever on a message
        // handed to a removed replica).
        let removed_from = self.removed_from(msg.to);
        if let (Some(local), None) = (self.groups.get(&msg.to), &removed_from) {
            if self.cfg.bug == HostBug::DropRoutedAtFollower && local.view.leader != Some(me) {
                return;
            }
            let _ = self.enqueue(msg.to, msg.payload, None, now);
            return;
        }
        let members = match &removed_from {
            Some(m) => Some(m),
            None => self.cfg.routes.get(&msg.to),
        };
        let Some(members) = members.filter(|m| !m.is_empty()) else {
            warn!(
                from,
                to = msg.to,
                "a state machine addressed a group that no node runs"
            );
            return;
        };
        self.route_turn = self.route_turn.wrapping_add(1);
        let to = members[self.route_turn % members.len()];
        self.out.transmit.push(Transmit {
            to,
            group: msg.to,
            kind: PeerKind::Submit,
            data: msg.payload,
        });
    }

    /// The members of group `id` as its local replica last knew them, if a change removed this
    /// node from it (such a replica knows no leader of the group any more).
    fn removed_from(&self, id: GroupId) -> Option<Vec<NodeId>> {
        let m = self.groups.get(&id)?.runner.membership()?.members();
        (!m.contains(&self.cfg.me)).then_some(m)
    }

    /// Queue a command for group `id` (the caller checked it runs here). Refused when the
    /// group has `max_pending` commands queued or waiting.
    fn enqueue(
        &mut self,
        id: GroupId,
        payload: Bytes,
        token: Option<T>,
        now: TimeUs,
    ) -> Result<u64, SubmitError> {
        let slot = self.groups.get_mut(&id).expect("a group of this host");
        if slot.stopped {
            if let Some(t) = token {
                self.out.replies.push((t, Err(SubmitError::ShuttingDown)));
            }
            return Err(SubmitError::ShuttingDown);
        }
        if slot.waiters.len() + slot.queue.len() >= self.cfg.max_pending {
            self.telemetry.rejected(id);
            if let Some(t) = token {
                self.out.replies.push((t, Err(SubmitError::Busy)));
            }
            return Err(SubmitError::Busy);
        }
        self.next_id += 1;
        let cmd = self.next_id;
        if let Some(token) = token {
            slot.waiters.insert(cmd, Waiter { token, since: now });
            slot.expiry
                .push_back((now + self.cfg.request_timeout_us, cmd));
        }
        self.telemetry.submitted(id);
        if self.cfg.observe {
            self.out
                .observed
                .push(Observed::Submitted { group: id, id: cmd });
        }
        slot.queue.push_back(Command { id: cmd, payload });
        Ok(cmd)
    }

    // ---- inputs ----

    /// A client submits `payload` to `group`; `token` comes back in [`Outputs::replies`] once
    /// the command is delivered here (or refused, or timed out). Returns the command's id, or
    /// why it was refused at once (its token is answered in the replies too). Queued commands
    /// reach the core at the next [`Host::flush`].
    pub fn submit(
        &mut self,
        now: TimeUs,
        group: GroupId,
        payload: Bytes,
        token: T,
    ) -> Result<u64, SubmitError> {
        let now = self.clock(now);
        if self.shutting_down {
            self.out
                .replies
                .push((token, Err(SubmitError::ShuttingDown)));
            return Err(SubmitError::ShuttingDown);
        }
        if !self.groups.contains_key(&group) {
            self.out
                .replies
                .push((token, Err(SubmitError::NoSuchGroup)));
            return Err(SubmitError::NoSuchGroup);
        }
        self.enqueue(group, payload, Some(token), now)
    }

    /// A client asks `group` to change its configuration (docs/membership.md): `payload` is the
    /// command the state machine receives when the change is delivered; `token` comes back in
    /// [`Outputs::replies`] then, or with the core's refusal ([`SubmitError::Config`]). The core
    /// takes it at once (a change is never batched with other commands).
    pub fn reconfigure(
        &mut self,
        now: TimeUs,
        group: GroupId,
        payload: Bytes,
        change: synod_core::Change,
        token: T,
    ) -> Result<u64, SubmitError> {
        // Queued as a submission (the same refusals), then taken out and handed over alone.
        let id = self.submit(now, group, payload, token)?;
        let now = self.clock(now);
        let slot = self.groups.get_mut(&group).expect("submit found the group");
        let command = slot.queue.pop_back().expect("just queued");
        debug_assert_eq!(command.id, id);
        self.step(group, now, |r, cx| r.reconfigure(now, command, change, cx));
        Ok(id)
    }

    /// Bytes of a peer's frame of `group`: a message, decoded by the group's codec, or a
    /// command routed to the group by another node's host. An undecodable message resets the
    /// peer (the group hears it disconnected, as after a broken connection).
    pub fn receive(
        &mut self,
        now: TimeUs,
        from: NodeId,
        group: GroupId,
        kind: PeerKind,
        data: Bytes,
    ) {
        let now = self.clock(now);
        if !self.groups.contains_key(&group) {
            debug!(
                from,
                group, "a frame of a group this node does not run; dropped"
            );
            return;
        }
        match kind {
            PeerKind::Submit => {
                // Forwarded to a replica a change has since removed, which knows no leader
                // of the group: dropped, not queued forever. The sender re-sends every second
                // to the next member it knows (no second hop: stale knowledge on both sides
                // could bounce a message around).
                if self.removed_from(group).is_some() {
                    return;
                }
                let leads = self.groups[&group].view.leader == Some(self.cfg.me);
                if self.cfg.bug == HostBug::DropRoutedAtFollower && !leads {
                    return;
                }
                let _ = self.enqueue(group, data, None, now);
            }
            PeerKind::Message => {
                let mut refused = None;
                self.step(group, now, |r, cx| {
                    if let Err(e) = r.message(now, from, data, cx) {
                        cx.telemetry.undecodable(group, from);
                        refused = Some(e);
                    }
                });
                if let Some(e) = refused {
                    warn!(
                        from,
                        group, "a peer sent an undecodable message ({e}); resetting it"
                    );
                    self.out
                        .resets
                        .push((from, format!("group {group}: undecodable message: {e}")));
                    self.disconnected(now, from);
                }
            }
        }
    }

    /// The group after `after` (the first with `None`), in id order: how the host walks its
    /// groups while stepping them (no list of ids to allocate).
    fn next_group(&self, after: Option<GroupId>) -> Option<GroupId> {
        use std::ops::Bound::{Excluded, Unbounded};
        match after {
            None => self.groups.keys().next().copied(),
            Some(a) => self
                .groups
                .range((Excluded(a), Unbounded))
                .next()
                .map(|(&id, _)| id),
        }
    }

    /// The connection with `peer` broke: messages in flight may be lost.
    pub fn disconnected(&mut self, now: TimeUs, peer: NodeId) {
        let now = self.clock(now);
        let mut cur = None;
        while let Some(id) = self.next_group(cur) {
            cur = Some(id);
            self.step(id, now, |r, cx| r.disconnected(now, peer, cx));
        }
    }

    /// Storage reports every op of each group up to its sequence number durable.
    pub fn durable(&mut self, now: TimeUs, upto: &[(GroupId, u64)]) {
        let now = self.clock(now);
        for &(id, seq) in upto {
            self.step(id, now, |r, cx| r.durable(now, seq, cx));
        }
    }

    /// The snapshot of a [`SnapshotJob`] is taken and stored durably.
    pub fn snapshot_done(&mut self, now: TimeUs, group: GroupId, snapshot: Snapshot) {
        let now = self.clock(now);
        let Some(slot) = self.groups.get_mut(&group) else {
            return;
        };
        slot.runner.snapshot_finished(Some(snapshot.at));
        self.telemetry.snapshot_taken(group, snapshot.at.slot);
        self.step(group, now, |r, cx| r.compact(now, snapshot, cx));
    }

    pub fn snapshot_failed(&mut self, group: GroupId, error: &str) {
        if let Some(slot) = self.groups.get_mut(&group) {
            warn!(group, "snapshot failed: {error}");
            slot.runner.snapshot_finished(None);
        }
    }

    /// Hand every group's queued commands to its core, in batches within the limits. A driver
    /// calls it once it has taken every input waiting, so that commands that arrived together
    /// form one batch.
    pub fn flush(&mut self, now: TimeUs) {
        let now = self.clock(now);
        let mut cur = None;
        while let Some(id) = self.next_group(cur) {
            cur = Some(id);
            while let Some(slot) = self
                .groups
                .get_mut(&id)
                .filter(|s| !s.queue.is_empty() && !s.stopped)
            {
                let batch = self.cfg.limits.take(&mut slot.queue);
                self.telemetry.batch(id, batch.len());
                if self.cfg.bug == HostBug::ReplyBeforeDurable {
                    for c in &batch {
                        if let Some(w) = slot.waiters.remove(&c.id) {
                            self.out.replies.push((
                                w.token,
                                Ok(Applied {
                                    id: c.id,
                                    at: Position::default(),
                                    result: Bytes::new(),
                                }),
                            ));
                        }
                    }
                }
                self.step(id, now, |r, cx| r.submit(now, batch, cx));
            }
        }
    }

    /// Commands are queued for a core: the driver calls [`Host::flush`] once it has taken the
    /// inputs waiting (a routed command queues too, not only a client's).
    pub fn has_queued(&self) -> bool {
        self.groups
            .values()
            .any(|s| !s.queue.is_empty() && !s.stopped)
    }

    /// When the host next needs [`Host::timeout`]: the earliest of every core's deadline, the
    /// first client to give up, and the next resend of messages between groups.
    pub fn deadline(&self) -> Option<TimeUs> {
        let cores = self
            .groups
            .values()
            .filter(|s| !s.stopped)
            .filter_map(|s| s.runner.deadline());
        let expiry = self
            .groups
            .values()
            .filter_map(|s| s.expiry.front().map(|&(t, _)| t));
        let resend = (!self.groups.is_empty()).then_some(self.next_resend);
        cores.chain(expiry).chain(resend).min()
    }

    /// Time passed: wake the cores whose deadline came, answer the clients that waited too
    /// long, and send the machines' unacknowledged messages again when it is time.
    pub fn timeout(&mut self, now: TimeUs) {
        let now = self.clock(now);
        let mut cur = None;
        while let Some(id) = self.next_group(cur) {
            cur = Some(id);
            let s = &self.groups[&id];
            if !s.stopped && s.runner.deadline().is_some_and(|d| d <= now) {
                self.step(id, now, |r, cx| r.wake(now, cx));
            }
        }
        for slot in self.groups.values_mut() {
            while let Some(&(at, cmd)) = slot.expiry.front() {
                if at > now {
                    break;
                }
                slot.expiry.pop_front();
                if let Some(w) = slot.waiters.remove(&cmd) {
                    self.out.replies.push((w.token, Err(SubmitError::Timeout)));
                }
            }
            // Commands answered before their turn leave stale expiries behind.
            if slot.waiters.is_empty() {
                slot.expiry.clear();
            }
        }
        if now >= self.next_resend {
            self.next_resend = now + self.cfg.resend_every_us;
            if self.cfg.bug != HostBug::NoResend {
                self.resend(now);
            }
        }
    }

    /// Every group this replica leads sends its machine's unacknowledged messages again.
    fn resend(&mut self, now: TimeUs) {
        let me = self.cfg.me;
        let mut out = Vec::new();
        for (&id, s) in &self.groups {
            if s.view.leader == Some(me) && !s.stopped {
                let mut msgs = Vec::new();
                s.runner.pending(&mut msgs);
                out.extend(msgs.into_iter().map(|m| (id, m)));
            }
        }
        for (from, m) in out {
            self.route(from, m, now);
        }
    }

    /// Stop taking commands: every waiting client is answered [`SubmitError::ShuttingDown`];
    /// the driver keeps running the host until [`Host::all_durable`].
    pub fn shutdown(&mut self) {
        self.shutting_down = true;
        for slot in self.groups.values_mut() {
            slot.refuse_all(&mut self.out.replies);
        }
    }

    /// Every storage op any group issued is durable.
    pub fn all_durable(&self) -> bool {
        self.groups.values().all(|s| s.runner.all_durable())
    }

    /// Every group as the admin port shows it.
    pub fn status(&self) -> Vec<GroupStatus> {
        self.groups
            .iter()
            .map(|(&id, s)| {
                let (applied, digest) = s.runner.applied();
                GroupStatus {
                    id,
                    protocol: s.runner.protocol().to_string(),
                    machine: s.runner.machine_kind().to_string(),
                    members: s.runner.members().to_vec(),
                    role: s.view.role.name().to_string(),
                    leader: s.view.leader,
                    epoch: s.view.epoch,
                    applied_slot: applied.slot,
                    applied_tag: applied.tag,
                    digest,
                    snapshot_slot: s.runner.snapshot_slot(),
                    pending_requests: s.waiters.len(),
                    queued: s.queue.len(),
                    outbox_held: s.runner.held(),
                    config: s.runner.membership().as_ref().map(ConfigStatus::from),
                }
            })
            .collect()
    }

    /// The core's own readings of every group.
    pub fn gauges(&self) -> Vec<(GroupId, Vec<(&'static str, f64)>)> {
        self.groups
            .iter()
            .map(|(&id, s)| (id, s.runner.gauges()))
            .collect()
    }
}

//! One group on the host: a protocol core driven through [`Replica`] (the same carry-out the
//! simulator uses), its state machine, the clients waiting for their commands, and its
//! snapshots. [`GroupRunner`] hides the protocol and machine types from the host, so groups of
//! different protocols and machines share one process.

use super::{Applied, HostCx, SubmitError, SubmitResult};
use crate::machine::{GroupMessage, StateMachine};
use crate::metrics::GroupMetrics;
use crate::transport::PeerMsg;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use synod_core::replica::{Env, Replica};
use synod_core::wire::Wire;
use synod_core::{
    Apply, BatchLimits, Command, Dest, Envelope, Event, GroupId, Input, MessageKind, NodeId,
    Persist, Protocol, Reject, Role, Snapshot, TimeUs, View,
};
use tokio::sync::{oneshot, watch};
use tracing::{debug, error, info, warn};

/// What the host asks of a group, whatever its protocol and state machine.
pub(crate) trait GroupRunner: Send {
    fn id(&self) -> GroupId;
    fn message(&mut self, now: TimeUs, from: NodeId, msg: PeerMsg, cx: &mut HostCx);
    fn disconnected(&mut self, now: TimeUs, peer: NodeId, cx: &mut HostCx);
    fn durable(&mut self, now: TimeUs, upto: u64, cx: &mut HostCx);
    fn wake(&mut self, now: TimeUs, cx: &mut HostCx);
    /// Queue a command; its reply (if any) comes with its delivery here. Refused at once when
    /// the group has `max_pending` commands waiting.
    fn enqueue(&mut self, payload: Bytes, reply: Option<oneshot::Sender<SubmitResult>>);
    fn has_queued(&self) -> bool;
    /// Hand the queued commands to the core, in batches within the limits.
    fn flush(&mut self, now: TimeUs, cx: &mut HostCx);
    fn snapshot_done(&mut self, now: TimeUs, snapshot: Snapshot, cx: &mut HostCx);
    fn snapshot_failed(&mut self, error: String);
    fn deadline(&self) -> Option<TimeUs>;
    fn view(&self) -> View;
    fn all_durable(&self) -> bool;
    /// The state machine's messages to other groups still unacknowledged (sent again while
    /// this replica leads).
    fn pending_messages(&mut self, out: &mut Vec<GroupMessage>);
    /// Expire waiting clients, refresh gauges, and report.
    fn housekeeping(&mut self, cx: &HostCx) -> GroupStatus;
    fn fail_waiters(&mut self, why: SubmitError);
}

/// One group as `/v1/status` shows it.
#[derive(Clone, Debug, Default, serde::Serialize)]
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
    pub snapshots_installed: u64,
    pub pending_requests: usize,
}

pub(crate) struct GroupParts<P: Protocol, S> {
    pub id: GroupId,
    pub protocol: String,
    pub machine_kind: String,
    pub members: Vec<NodeId>,
    pub core: P,
    pub machine: Arc<Mutex<S>>,
    pub view: watch::Sender<View>,
    pub limits: BatchLimits,
    pub max_pending: usize,
    pub request_timeout: Duration,
    pub snapshot_every: u64,
    pub metrics: GroupMetrics,
    pub me: NodeId,
}

pub(crate) struct Group<P: Protocol, S> {
    id: GroupId,
    me: NodeId,
    protocol: String,
    machine_kind: String,
    members: Vec<NodeId>,
    replica: Replica<P>,
    machine: Arc<Mutex<S>>,
    view: watch::Sender<View>,
    waiters: HashMap<u64, (oneshot::Sender<SubmitResult>, Instant)>,
    deadlines: VecDeque<(Instant, u64)>,
    queue: VecDeque<Command>,
    limits: BatchLimits,
    max_pending: usize,
    request_timeout: Duration,
    next_id: u64,
    snapshot_every: u64,
    snapshot_running: bool,
    last_snapshot_slot: u64,
    last_snapshot_at: Instant,
    metrics: GroupMetrics,
}

/// Command ids: node id in the top byte, 24 random bits per process start, a 32-bit counter.
fn id_base(me: NodeId) -> u64 {
    let boot: u64 = rand::random::<u64>() & 0xFF_FFFF;
    ((me as u64 & 0xFF) << 56) | (boot << 32)
}

/// Envelopes one replica may hold behind durability barriers (a core that needs more is
/// broken: the replica stops).
const OUTBOX_LIMIT: usize = 1 << 20;

impl<P: Protocol, S: StateMachine> Group<P, S> {
    pub(crate) fn new(parts: GroupParts<P, S>) -> Self {
        let applied = parts.machine.lock().expect("machine").applied().slot;
        Group {
            id: parts.id,
            me: parts.me,
            protocol: parts.protocol,
            machine_kind: parts.machine_kind,
            members: parts.members,
            replica: Replica::new(parts.core, OUTBOX_LIMIT),
            machine: parts.machine,
            view: parts.view,
            waiters: HashMap::new(),
            deadlines: VecDeque::new(),
            queue: VecDeque::new(),
            limits: parts.limits,
            max_pending: parts.max_pending,
            request_timeout: parts.request_timeout,
            next_id: id_base(parts.me),
            snapshot_every: parts.snapshot_every,
            snapshot_running: false,
            last_snapshot_slot: applied,
            last_snapshot_at: Instant::now(),
            metrics: parts.metrics,
        }
    }
}

impl<P, S> Group<P, S>
where
    P: Protocol + Send + 'static,
    P::Message: Wire + MessageKind + Send + 'static,
    P::Record: Wire + Send + 'static,
    P::Hard: Wire + Send + 'static,
    S: StateMachine,
{
    /// Run `f` on the replica with its environment, then publish what changed.
    fn drive(&mut self, cx: &mut HostCx, f: impl FnOnce(&mut Replica<P>, &mut GroupEnv<'_, S>)) {
        let installed = {
            let mut env = GroupEnv {
                group: self.id,
                me: self.me,
                members: &self.members,
                cx: &mut *cx,
                machine: &self.machine,
                guard: None,
                waiters: &mut self.waiters,
                metrics: &mut self.metrics,
                installed: None,
            };
            f(&mut self.replica, &mut env);
            env.installed
        };
        self.after_step(installed, cx);
    }

    fn step(&mut self, now: TimeUs, input: Input<P::Message>, cx: &mut HostCx) {
        self.drive(cx, |r, env| r.step(now, input, env));
    }

    /// Publish a changed view to front ends (a replica newly named leader re-sends its
    /// machine's unacknowledged messages), and start a snapshot when one is due.
    fn after_step(&mut self, installed: Option<u64>, cx: &mut HostCx) {
        if let Some(slot) = installed {
            self.last_snapshot_slot = slot;
        }
        let v = self.replica.view();
        let before = *self.view.borrow();
        if v != before {
            self.view.send_replace(v);
            self.metrics.role.set(match v.role {
                Role::Leading => 2,
                Role::Following | Role::Proposer => 1,
                Role::Electing => 0,
            });
            self.metrics.epoch.set(v.epoch as i64);
            if v.leader == Some(self.me) && before.leader != Some(self.me) {
                let mut out = Vec::new();
                self.machine.lock().expect("machine").pending(&mut out);
                cx.outgoing.extend(out.into_iter().map(|m| (self.id, m)));
            }
        }
        self.maybe_snapshot(cx);
    }

    fn maybe_snapshot(&mut self, cx: &HostCx) {
        if self.snapshot_running {
            return;
        }
        let (view, at) = {
            let m = self.machine.lock().expect("machine");
            let at = m.applied();
            if at.slot < self.last_snapshot_slot + self.snapshot_every {
                return;
            }
            (m.snapshot_view(), at)
        };
        self.snapshot_running = true;
        let tx = cx.tx.clone();
        let dir = cx.wal_dir.clone();
        let group = self.id;
        tokio::task::spawn_blocking(move || {
            let data = view();
            let name = synod_log::snapshot_name(group, at.slot);
            let msg = match synod_log::write_file_durably(&dir, &name, &data) {
                Ok(()) => super::HostInput::SnapshotDone {
                    group,
                    snapshot: Snapshot { at, data },
                },
                Err(e) => super::HostInput::SnapshotFailed {
                    group,
                    error: e.to_string(),
                },
            };
            let _ = tx.blocking_send(msg);
        });
    }
}

impl<P, S> GroupRunner for Group<P, S>
where
    P: Protocol + Send + 'static,
    P::Message: Wire + MessageKind + Send + 'static,
    P::Record: Wire + Send + 'static,
    P::Hard: Wire + Send + 'static,
    S: StateMachine,
{
    fn id(&self) -> GroupId {
        self.id
    }

    fn message(&mut self, now: TimeUs, from: NodeId, msg: PeerMsg, cx: &mut HostCx) {
        match msg.downcast::<P::Message>() {
            Ok(m) => {
                self.metrics.received(m.kind()).inc();
                self.step(now, Input::Message { from, msg: *m }, cx);
            }
            Err(_) => error!(
                group = self.id,
                "a message decoded for another protocol reached this group; dropped"
            ),
        }
    }

    fn disconnected(&mut self, now: TimeUs, peer: NodeId, cx: &mut HostCx) {
        if self.members.contains(&peer) {
            self.step(now, Input::Disconnected { peer }, cx);
        }
    }

    fn durable(&mut self, now: TimeUs, upto: u64, cx: &mut HostCx) {
        self.drive(cx, |r, env| r.durable(now, upto, env));
    }

    fn wake(&mut self, now: TimeUs, cx: &mut HostCx) {
        if self.replica.deadline().is_some_and(|d| d <= now) {
            self.drive(cx, |r, env| {
                r.wake(now, env);
            });
        }
    }

    fn enqueue(&mut self, payload: Bytes, reply: Option<oneshot::Sender<SubmitResult>>) {
        if self.waiters.len() + self.queue.len() >= self.max_pending {
            self.metrics.rejected.inc();
            if let Some(r) = reply {
                let _ = r.send(Err(SubmitError::Busy));
            }
            return;
        }
        self.next_id += 1;
        let id = self.next_id;
        if let Some(r) = reply {
            let now = Instant::now();
            self.waiters.insert(id, (r, now));
            self.deadlines.push_back((now + self.request_timeout, id));
        }
        self.metrics.submitted.inc();
        self.queue.push_back(Command { id, payload });
    }

    fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    fn flush(&mut self, now: TimeUs, cx: &mut HostCx) {
        while !self.queue.is_empty() {
            let batch = self.limits.take(&mut self.queue);
            self.metrics.batch_commands.observe(batch.len() as f64);
            self.step(now, Input::Submit(batch), cx);
        }
    }

    fn snapshot_done(&mut self, now: TimeUs, snapshot: Snapshot, cx: &mut HostCx) {
        self.snapshot_running = false;
        self.last_snapshot_slot = snapshot.at.slot;
        self.last_snapshot_at = Instant::now();
        self.metrics.snapshots_taken.inc();
        self.metrics.snapshot_slot.set(snapshot.at.slot as i64);
        debug!(
            group = self.id,
            slot = snapshot.at.slot,
            bytes = snapshot.data.len(),
            "snapshot written"
        );
        self.step(now, Input::Compact(snapshot), cx);
    }

    fn snapshot_failed(&mut self, e: String) {
        self.snapshot_running = false;
        warn!(group = self.id, "snapshot failed: {e}");
    }

    fn deadline(&self) -> Option<TimeUs> {
        self.replica.deadline()
    }

    fn view(&self) -> View {
        self.replica.view()
    }

    fn all_durable(&self) -> bool {
        self.replica.all_durable()
    }

    fn pending_messages(&mut self, out: &mut Vec<GroupMessage>) {
        self.machine.lock().expect("machine").pending(out);
    }

    fn housekeeping(&mut self, _cx: &HostCx) -> GroupStatus {
        let now = Instant::now();
        while let Some(&(deadline, id)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some((w, _)) = self.waiters.remove(&id) {
                let _ = w.send(Err(SubmitError::Timeout));
            }
        }
        self.metrics.pending_requests.set(self.waiters.len() as i64);
        self.metrics.outbox_held.set(self.replica.held() as i64);
        self.metrics.set_core(&self.replica.core().gauges());
        self.metrics
            .snapshot_age_seconds
            .set(self.last_snapshot_at.elapsed().as_secs() as i64);
        let (applied, digest) = {
            let m = self.machine.lock().expect("machine");
            (m.applied(), m.digest())
        };
        self.metrics.applied_slot.set(applied.slot as i64);
        let v = self.replica.view();
        GroupStatus {
            id: self.id,
            protocol: self.protocol.clone(),
            machine: self.machine_kind.clone(),
            members: self.members.clone(),
            role: v.role.name().to_string(),
            leader: v.leader,
            epoch: v.epoch,
            applied_slot: applied.slot,
            applied_tag: applied.tag,
            digest,
            snapshot_slot: self.last_snapshot_slot,
            snapshots_installed: self.metrics.snapshots_installed.get(),
            pending_requests: self.waiters.len(),
        }
    }

    fn fail_waiters(&mut self, why: SubmitError) {
        for (_, (w, _)) in self.waiters.drain() {
            let _ = w.send(Err(why.clone()));
        }
        self.queue.clear();
    }
}

/// The environment of a group's replica while it steps: the shared log, the peers, the state
/// machine and the clients waiting for their commands.
struct GroupEnv<'a, S> {
    group: GroupId,
    me: NodeId,
    members: &'a [NodeId],
    cx: &'a mut HostCx,
    machine: &'a Mutex<S>,
    guard: Option<MutexGuard<'a, S>>,
    waiters: &'a mut HashMap<u64, (oneshot::Sender<SubmitResult>, Instant)>,
    metrics: &'a mut GroupMetrics,
    /// The slot of a snapshot installed from a peer in this step.
    installed: Option<u64>,
}

impl<P, S> Env<P> for GroupEnv<'_, S>
where
    P: Protocol,
    P::Message: Wire + MessageKind,
    P::Record: Wire,
    P::Hard: Wire,
    S: StateMachine,
{
    fn persist(&mut self, ops: &mut Vec<Persist<P::Record, P::Hard>>) {
        let batch: Vec<(u64, synod_log::WalOp)> = ops
            .drain(..)
            .map(|p| (p.seq, synod_log::typed::encode(self.group, &p.op)))
            .collect();
        // The WAL thread reports back; if it is gone, the host is stopping.
        let _ = self.cx.wal.send(batch);
    }

    fn apply(&mut self, apply: Apply) {
        let machine = self.machine;
        let m = self
            .guard
            .get_or_insert_with(|| machine.lock().expect("machine"));
        match apply {
            Apply::Command { at, command } => {
                let mut out = Vec::new();
                let result = m.apply(at, &command, &mut out);
                self.cx
                    .outgoing
                    .extend(out.into_iter().map(|msg| (self.group, msg)));
                self.metrics.deliveries.inc();
                if let Some((w, since)) = self.waiters.remove(&command.id) {
                    self.metrics
                        .commit_latency
                        .observe(since.elapsed().as_secs_f64());
                    let _ = w.send(Ok(Applied { at, result }));
                }
            }
            Apply::Restore(s) => match m.restore(&s) {
                Ok(()) => {
                    info!(
                        group = self.group,
                        slot = s.at.slot,
                        bytes = s.data.len(),
                        "installed a snapshot from a peer"
                    );
                    self.metrics.snapshots_installed.inc();
                    self.installed = Some(s.at.slot);
                }
                Err(e) => {
                    // A peer sent state we cannot read: stop rather than diverge.
                    error!(
                        group = self.group,
                        "cannot install a peer's snapshot: {e}; stopping"
                    );
                    std::process::exit(71);
                }
            },
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::View(v) => {
                info!(group = self.group, role = v.role.name(), leader = ?v.leader, epoch = v.epoch, "view changed");
            }
            Event::Mode { fallback } => {
                info!(group = self.group, fallback, "broadcast mode switched");
            }
            Event::Rejected { id, reason } => {
                self.metrics.rejected.inc();
                if let Some((w, _)) = self.waiters.remove(&id) {
                    let _ = w.send(Err(match reason {
                        Reject::NoLeader => SubmitError::NoLeader,
                        Reject::Busy => SubmitError::Busy,
                    }));
                }
            }
        }
    }

    fn transmit(&mut self, envelope: Envelope<P::Message>) {
        let kind = envelope.msg.kind();
        let data = envelope.msg.to_bytes();
        match envelope.to {
            Dest::One(p) => {
                self.metrics.sent(kind).inc();
                self.cx.send(p, self.group, data);
            }
            Dest::All => {
                for &p in self.members {
                    if p != self.me {
                        self.metrics.sent(kind).inc();
                        self.cx.send(p, self.group, data.clone());
                    }
                }
            }
        }
    }
}

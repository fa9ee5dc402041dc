//! One group on the host: a protocol core driven through [`Replica`] (the contract's one carry-out),
//! its state machine, and its snapshots. [`GroupRunner`] hides the protocol's types from the
//! host, so groups of different protocols and machines share one node.
//!
//! A group step writes what it produced into a [`Cx`]: encoded frames and storage ops straight
//! into the host's outputs, and the deliveries, refusals and machine messages the host acts on
//! right after the step (answering clients, routing between groups).

use crate::output::{Applied, Observed, PeerKind, Transmit};
use crate::telemetry::Telemetry;
use bytes::Bytes;
use std::sync::{Arc, Mutex, MutexGuard};
use synod_core::replica::{Env, Replica};
use synod_core::wire::{Wire, WireError};
use synod_core::{
    Apply, Change, Command, Dest, Envelope, Event, GroupId, GroupMessage, Input, Membership,
    MessageKind, NodeId, Persist, Position, Protocol, Reject, Role, Snapshot, StateMachine, TimeUs,
    View, WireSize,
};
use synod_log::WalOp;
use tracing::{debug, info};

/// A group's state machine, shared with the front ends that read it.
pub type SharedMachine = Arc<Mutex<dyn StateMachine>>;

/// What one group step produced, beyond its frames and storage ops.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) applied: Vec<Applied>,
    pub(crate) rejected: Vec<(u64, Reject)>,
    pub(crate) messages: Vec<GroupMessage>,
    pub(crate) installed: Option<Position>,
    pub(crate) fatal: Option<String>,
    /// The configurations in force changed (the latest [`Event::Membership`] of the step).
    pub(crate) membership: Option<Membership>,
}

impl Scratch {
    pub(crate) fn clear(&mut self) {
        self.applied.clear();
        self.rejected.clear();
        self.messages.clear();
        self.installed = None;
        self.fatal = None;
        self.membership = None;
    }
}

/// The host's side of a group step: where its outputs go.
pub struct Cx<'a> {
    pub(crate) transmit: &'a mut Vec<Transmit>,
    pub(crate) wal: &'a mut Vec<(u64, WalOp)>,
    pub(crate) observed: Option<&'a mut Vec<Observed>>,
    pub(crate) scratch: &'a mut Scratch,
    pub(crate) telemetry: &'a mut dyn Telemetry,
}

/// What the host asks of a group, whatever its protocol and state machine.
pub trait GroupRunner: Send {
    fn id(&self) -> GroupId;
    /// Every member, this node included, sorted.
    fn members(&self) -> &[NodeId];
    /// A message of this group from a peer, as its bytes: decoded with the core's codec, then
    /// stepped. An undecodable message is refused (and not stepped).
    fn message(
        &mut self,
        now: TimeUs,
        from: NodeId,
        data: Bytes,
        cx: &mut Cx,
    ) -> Result<(), WireError>;
    /// Boot the core ([`synod_core::Input::Start`]), once, when the host starts.
    fn start(&mut self, now: TimeUs, cx: &mut Cx);
    fn disconnected(&mut self, now: TimeUs, peer: NodeId, cx: &mut Cx);
    fn durable(&mut self, now: TimeUs, upto: u64, cx: &mut Cx);
    /// Wake the core if its deadline has come.
    fn wake(&mut self, now: TimeUs, cx: &mut Cx);
    /// Hand the core one batch of commands.
    fn submit(&mut self, now: TimeUs, batch: Vec<Command>, cx: &mut Cx);
    /// Hand the core a configuration change ([`Input::Reconfigure`]).
    fn reconfigure(&mut self, now: TimeUs, command: Command, change: Change, cx: &mut Cx);
    /// The state machine's snapshot is durable: the core may compact behind it.
    fn compact(&mut self, now: TimeUs, snapshot: Snapshot, cx: &mut Cx);
    fn deadline(&self) -> Option<TimeUs>;
    fn view(&self) -> View;
    /// Every storage op issued is durable.
    fn all_durable(&self) -> bool;
    /// Envelopes held behind durability barriers.
    fn held(&self) -> usize;
    /// The state machine's messages to other groups still unacknowledged.
    fn pending(&self, out: &mut Vec<GroupMessage>);
    /// A snapshot is due (every `snapshot_every` deliveries) and none is running: the view of
    /// the machine to serialise. The group then waits for [`GroupRunner::snapshot_finished`].
    fn snapshot_due(&mut self) -> Option<(Position, Box<dyn FnOnce() -> Bytes + Send>)>;
    /// The snapshot started by [`GroupRunner::snapshot_due`] ended (taken or failed).
    fn snapshot_finished(&mut self, taken: Option<Position>);
    /// The machine's applied position and digest.
    fn applied(&self) -> (Position, u64);
    /// The slot of the last snapshot taken or installed.
    fn snapshot_slot(&self) -> u64;
    /// The configurations in force (`Protocol::membership`).
    fn membership(&self) -> Option<Membership>;
    /// The core's own readings (`Protocol::gauges`).
    fn gauges(&self) -> Vec<(&'static str, f64)>;
    fn protocol(&self) -> &str;
    fn machine_kind(&self) -> &str;
}

/// A protocol the host can run: its messages, log records and hard state have codecs (the host
/// encodes what leaves the node and decodes what arrives).
pub trait Hosted:
    Protocol<Message: Wire + Send, Record: Wire + Send, Hard: Wire + Send> + Send + 'static
{
}

impl<P> Hosted for P
where
    P: Protocol + Send + 'static,
    P::Message: Wire + Send,
    P::Record: Wire + Send,
    P::Hard: Wire + Send,
{
}

/// How to build a [`Group`].
pub struct GroupParts<P: Protocol> {
    pub id: GroupId,
    pub me: NodeId,
    /// The protocol's name (for status and logs).
    pub protocol: String,
    /// The machine's kind (for status).
    pub machine_kind: String,
    pub members: Vec<NodeId>,
    pub core: P,
    pub machine: SharedMachine,
    /// Snapshot every this many deliveries (0: never).
    pub snapshot_every: u64,
    /// Envelopes the replica may hold behind durability barriers (a core that needs more is
    /// broken: the replica stops).
    pub outbox_limit: usize,
}

pub struct Group<P: Protocol> {
    id: GroupId,
    me: NodeId,
    protocol: String,
    machine_kind: String,
    members: Vec<NodeId>,
    replica: Replica<P>,
    machine: SharedMachine,
    snapshot_every: u64,
    snapshot_running: bool,
    last_snapshot_slot: u64,
}

impl<P: Protocol> Group<P> {
    pub fn new(parts: GroupParts<P>) -> Self {
        let applied = parts.machine.lock().expect("machine").applied().slot;
        let mut members = parts.members;
        members.sort_unstable();
        members.dedup();
        Group {
            id: parts.id,
            me: parts.me,
            protocol: parts.protocol,
            machine_kind: parts.machine_kind,
            members,
            replica: Replica::new(parts.core, parts.outbox_limit),
            machine: parts.machine,
            snapshot_every: parts.snapshot_every,
            snapshot_running: false,
            last_snapshot_slot: applied,
        }
    }

    /// The core (for its own readings).
    pub fn core(&self) -> &P {
        self.replica.core()
    }
}

impl<P: Hosted> Group<P> {
    fn drive(&mut self, cx: &mut Cx, f: impl FnOnce(&mut Replica<P>, &mut GroupEnv<'_, '_>)) {
        let role = self.replica.view().role;
        let mut env = GroupEnv {
            group: self.id,
            me: self.me,
            members: &self.members,
            role,
            cx,
            machine: &self.machine,
            guard: None,
        };
        f(&mut self.replica, &mut env);
        let (installed, membership) = (env.cx.scratch.installed, env.cx.scratch.membership.take());
        drop(env);
        if let Some(at) = installed {
            self.last_snapshot_slot = at.slot;
        }
        if let Some(m) = membership {
            // The configurations in force changed: talk to their members from now on (a
            // removed replica keeps its own id, so that its data stays readable).
            let mut members = m.members();
            if let Err(i) = members.binary_search(&self.me) {
                members.insert(i, self.me);
            }
            info!(group = self.id, versions = ?m.versions(), ?members, "membership changed");
            self.members = members;
        }
    }
}

impl<P: Hosted> GroupRunner for Group<P> {
    fn id(&self) -> GroupId {
        self.id
    }

    fn members(&self) -> &[NodeId] {
        &self.members
    }

    fn message(
        &mut self,
        now: TimeUs,
        from: NodeId,
        data: Bytes,
        cx: &mut Cx,
    ) -> Result<(), WireError> {
        let bytes = data.len();
        let msg = P::Message::from_bytes(data)?;
        let role = self.replica.view().role;
        cx.telemetry.received(self.id, role, msg.kind(), bytes);
        self.drive(cx, |r, env| r.step(now, Input::Message { from, msg }, env));
        Ok(())
    }

    fn start(&mut self, now: TimeUs, cx: &mut Cx) {
        self.drive(cx, |r, env| r.start(now, env));
    }

    fn disconnected(&mut self, now: TimeUs, peer: NodeId, cx: &mut Cx) {
        if self.members.contains(&peer) && peer != self.me {
            self.drive(cx, |r, env| r.step(now, Input::Disconnected { peer }, env));
        }
    }

    fn durable(&mut self, now: TimeUs, upto: u64, cx: &mut Cx) {
        self.drive(cx, |r, env| r.durable(now, upto, env));
    }

    fn wake(&mut self, now: TimeUs, cx: &mut Cx) {
        if self.replica.deadline().is_some_and(|d| d <= now) {
            self.drive(cx, |r, env| {
                r.wake(now, env);
            });
        }
    }

    fn submit(&mut self, now: TimeUs, batch: Vec<Command>, cx: &mut Cx) {
        self.drive(cx, |r, env| r.submit(now, batch, env));
    }

    fn membership(&self) -> Option<Membership> {
        self.replica.core().membership()
    }

    fn reconfigure(&mut self, now: TimeUs, command: Command, change: Change, cx: &mut Cx) {
        self.drive(cx, |r, env| {
            r.step(now, Input::Reconfigure { command, change }, env)
        });
    }

    fn compact(&mut self, now: TimeUs, snapshot: Snapshot, cx: &mut Cx) {
        self.drive(cx, |r, env| r.step(now, Input::Compact(snapshot), env));
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

    fn held(&self) -> usize {
        self.replica.held()
    }

    fn pending(&self, out: &mut Vec<GroupMessage>) {
        self.machine.lock().expect("machine").pending(out);
    }

    fn snapshot_due(&mut self) -> Option<(Position, Box<dyn FnOnce() -> Bytes + Send>)> {
        if self.snapshot_running || self.snapshot_every == 0 {
            return None;
        }
        let m = self.machine.lock().expect("machine");
        let at = m.applied();
        if at.slot < self.last_snapshot_slot + self.snapshot_every {
            return None;
        }
        let view = m.snapshot_view();
        drop(m);
        self.snapshot_running = true;
        Some((at, view))
    }

    fn snapshot_finished(&mut self, taken: Option<Position>) {
        self.snapshot_running = false;
        if let Some(at) = taken {
            self.last_snapshot_slot = self.last_snapshot_slot.max(at.slot);
            debug!(group = self.id, slot = at.slot, "snapshot written");
        }
    }

    fn applied(&self) -> (Position, u64) {
        let m = self.machine.lock().expect("machine");
        (m.applied(), m.digest())
    }

    fn snapshot_slot(&self) -> u64 {
        self.last_snapshot_slot
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        self.replica.core().gauges()
    }

    fn protocol(&self) -> &str {
        &self.protocol
    }

    fn machine_kind(&self) -> &str {
        &self.machine_kind
    }
}

/// The environment of a group's replica while it steps: the host's outputs, the state
/// machine (locked once for the whole step, on the first delivery) and the peers.
struct GroupEnv<'e, 'o> {
    group: GroupId,
    me: NodeId,
    members: &'e [NodeId],
    /// The replica's role when the step began (for telemetry).
    role: Role,
    cx: &'e mut Cx<'o>,
    machine: &'e Mutex<dyn StateMachine>,
    guard: Option<MutexGuard<'e, dyn StateMachine>>,
}

impl<P> Env<P> for GroupEnv<'_, '_>
where
    P: Protocol,
    P::Message: Wire,
    P::Record: Wire,
    P::Hard: Wire,
{
    fn persist(&mut self, ops: &mut Vec<Persist<P::Record, P::Hard>>) {
        let group = self.group;
        self.cx.wal.extend(
            ops.drain(..)
                .map(|p| (p.seq, synod_log::typed::encode(group, &p.op))),
        );
    }

    fn apply(&mut self, apply: Apply) {
        if self.cx.scratch.fatal.is_some() {
            return; // the group stopped in this step: nothing more is applied
        }
        let machine = self.machine;
        let m = self
            .guard
            .get_or_insert_with(|| machine.lock().expect("machine"));
        match apply {
            Apply::Command { at, command } => {
                let result = m.apply(at, &command, &mut self.cx.scratch.messages);
                self.cx.telemetry.delivered(self.group);
                if let Some(o) = self.cx.observed.as_deref_mut() {
                    o.push(Observed::Applied {
                        group: self.group,
                        at,
                        id: command.id,
                    });
                }
                self.cx.scratch.applied.push(Applied {
                    id: command.id,
                    at,
                    result,
                });
            }
            Apply::Restore(s) => match m.restore(&s) {
                Ok(()) => {
                    info!(
                        group = self.group,
                        slot = s.at.slot,
                        bytes = s.data.len(),
                        "installed a snapshot from a peer"
                    );
                    self.cx.telemetry.snapshot_installed(self.group, s.at.slot);
                    self.cx.scratch.installed = Some(s.at);
                    if let Some(o) = self.cx.observed.as_deref_mut() {
                        o.push(Observed::Restored {
                            group: self.group,
                            snapshot: s.clone(),
                        });
                    }
                }
                Err(e) => {
                    // A peer sent state this replica cannot read: stop rather than diverge.
                    self.cx.scratch.fatal = Some(format!(
                        "group {}: cannot install a peer's snapshot at slot {}: {e}",
                        self.group, s.at.slot
                    ));
                }
            },
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::View(v) => {
                info!(group = self.group, role = v.role.name(), leader = ?v.leader, epoch = v.epoch, "view changed");
                self.role = v.role;
                if let Some(o) = self.cx.observed.as_deref_mut() {
                    o.push(Observed::View {
                        group: self.group,
                        view: v,
                    });
                }
            }
            Event::Mode { fallback } => {
                info!(group = self.group, fallback, "broadcast mode switched");
                if let Some(o) = self.cx.observed.as_deref_mut() {
                    o.push(Observed::Mode {
                        group: self.group,
                        fallback,
                    });
                }
            }
            Event::Rejected { id, reason } => {
                self.cx.telemetry.rejected(self.group);
                self.cx.scratch.rejected.push((id, reason));
            }
            Event::Membership(m) => {
                if let Some(o) = self.cx.observed.as_deref_mut() {
                    o.push(Observed::Membership {
                        group: self.group,
                        membership: m.clone(),
                    });
                }
                self.cx.scratch.membership = Some(m);
            }
        }
    }

    fn transmit(&mut self, envelope: Envelope<P::Message>) {
        let kind = envelope.msg.kind();
        // One allocation: the estimate is the encoded size (plus a little slack).
        let mut buf = bytes::BytesMut::with_capacity(envelope.msg.wire_size() + 16);
        envelope.msg.encode(&mut buf);
        let data = buf.freeze();
        let (group, me) = (self.group, self.me);
        let frame = |to| Transmit {
            to,
            group,
            kind: PeerKind::Message,
            data: data.clone(),
        };
        let copies = match envelope.to {
            Dest::One(p) => {
                self.cx.transmit.push(frame(p));
                1
            }
            Dest::All => {
                let before = self.cx.transmit.len();
                self.cx
                    .transmit
                    .extend(self.members.iter().filter(|&&p| p != me).map(|&p| frame(p)));
                self.cx.transmit.len() - before
            }
        };
        self.cx
            .telemetry
            .sent(self.group, self.role, kind, copies, data.len());
    }
}

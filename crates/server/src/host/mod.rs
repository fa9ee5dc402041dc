//! The host: one server process running any number of groups, each a (protocol core, members,
//! state machine) triple with a group id, as quinn-proto's `Endpoint` holds many connections.
//!
//! Groups share:
//! * **the peer transport**: one connection each way per pair of nodes, frames tagged with the
//!   group (crate::transport);
//! * **the write-ahead log** and its thread: one `fdatasync` serves every group with something
//!   queued ([`wal`]);
//! * **one timer**: the host sleeps until the earliest deadline any core named, and wakes the
//!   cores whose deadline came (no fixed tick);
//! * **this task**: one loop steps every group, so nothing is shared between threads but the
//!   state machines front ends read.
//!
//! Client commands wait in their group's queue while the host works; whenever it comes back to
//! the queue it hands the core every command waiting, in batches bounded by count and bytes.
//! A lone command goes at once; under load, batches grow by themselves.
//!
//! A state machine sends to another group through the host (crate::machine::GroupMessage):
//! from the replica its group names leader, to the receiving group's replica on this node if
//! there is one, else to a node that runs it.

pub(crate) mod group;
pub mod wal;

use crate::machine::GroupMessage;
use crate::metrics::Metrics;
use crate::transport::{Inbound, PeerSender};
use bytes::Bytes;
use group::{GroupRunner, GroupStatus};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_core::{GroupId, NodeId, Position, Snapshot, TimeUs, View};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};
use wal::{WalBatch, WalDone};

/// Inputs of the host task.
pub enum HostInput {
    Transport(Inbound),
    Durable(WalDone),
    WalFailed(String),
    Submit {
        group: GroupId,
        payload: Bytes,
        reply: oneshot::Sender<SubmitResult>,
    },
    SnapshotDone {
        group: GroupId,
        snapshot: Snapshot,
    },
    SnapshotFailed {
        group: GroupId,
        error: String,
    },
    Shutdown(oneshot::Sender<()>),
}

impl From<Inbound> for HostInput {
    fn from(i: Inbound) -> Self {
        HostInput::Transport(i)
    }
}

/// A delivered command, as its submitter sees it.
#[derive(Clone, Debug)]
pub struct Applied {
    pub at: Position,
    pub result: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    NoLeader,
    Busy,
    Timeout,
    ShuttingDown,
    NoSuchGroup,
}

pub type SubmitResult = Result<Applied, SubmitError>;

/// A front end's handle on one group: submit commands, and watch the group's view (whether this
/// replica serves, who leads, in which epoch) as the host publishes it.
#[derive(Clone)]
pub struct GroupHandle {
    pub group: GroupId,
    pub me: NodeId,
    tx: mpsc::Sender<HostInput>,
    view: watch::Receiver<View>,
}

impl GroupHandle {
    pub fn new(
        group: GroupId,
        me: NodeId,
        tx: mpsc::Sender<HostInput>,
        view: watch::Receiver<View>,
    ) -> Self {
        GroupHandle {
            group,
            me,
            tx,
            view,
        }
    }

    /// Submit a command to the group; the result comes once it is delivered here.
    pub async fn submit(&self, payload: Bytes) -> SubmitResult {
        let (reply, rx) = oneshot::channel();
        let input = HostInput::Submit {
            group: self.group,
            payload,
            reply,
        };
        if self.tx.send(input).await.is_err() {
            return Err(SubmitError::ShuttingDown);
        }
        rx.await.unwrap_or(Err(SubmitError::ShuttingDown))
    }

    /// Submit a command without waiting for it: the receiver yields its result once it is
    /// delivered here (a connection pipelines its writes this way).
    pub async fn submit_pipelined(
        &self,
        payload: Bytes,
    ) -> Result<oneshot::Receiver<SubmitResult>, SubmitError> {
        let (reply, rx) = oneshot::channel();
        let input = HostInput::Submit {
            group: self.group,
            payload,
            reply,
        };
        self.tx
            .send(input)
            .await
            .map_err(|_| SubmitError::ShuttingDown)?;
        Ok(rx)
    }

    /// The view as last published.
    pub fn view(&self) -> View {
        *self.view.borrow()
    }

    /// A receiver that wakes on every change of the view.
    pub fn watch(&self) -> watch::Receiver<View> {
        self.view.clone()
    }
}

/// What the admin endpoints show: the node, its ZooKeeper group (group 0) at the top level as
/// before groups existed, and every group.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Status {
    pub node_id: NodeId,
    pub cluster_id: String,
    pub protocol: String,
    pub role: String,
    pub leader: Option<NodeId>,
    pub epoch: u64,
    pub applied_slot: u64,
    pub applied_tag: u64,
    pub digest: u64,
    pub log_bytes: u64,
    pub log_segments: usize,
    pub snapshot_slot: u64,
    pub snapshots_installed: u64,
    pub pending_requests: usize,
    pub groups: Vec<GroupStatus>,
}

/// What a group step may need from the host.
pub(crate) struct HostCx {
    pub me: NodeId,
    peers: BTreeMap<NodeId, PeerSender>,
    pub wal: mpsc::UnboundedSender<WalBatch>,
    pub tx: mpsc::Sender<HostInput>,
    pub wal_dir: PathBuf,
    /// Peers whose send queue overflowed during a step: every group must hear they broke.
    disconnects: Vec<NodeId>,
    /// Messages from state machines to other groups, by sending group.
    pub outgoing: Vec<(GroupId, GroupMessage)>,
}

impl HostCx {
    /// Queue a message of `group` for `peer`; a peer whose queue is full counts as
    /// disconnected (its connection is reset, and the cores must know messages were lost).
    pub fn send(&mut self, peer: NodeId, group: GroupId, data: Bytes) {
        let Some(s) = self.peers.get(&peer) else {
            return;
        };
        if !s.send(group, data) && !self.disconnects.contains(&peer) {
            self.disconnects.push(peer);
        }
    }
}

pub struct HostParts {
    pub me: NodeId,
    pub cluster_id: String,
    pub peers: BTreeMap<NodeId, PeerSender>,
    pub wal: synod_log::Wal,
    pub wal_dir: PathBuf,
    pub rx: mpsc::Receiver<HostInput>,
    pub tx: mpsc::Sender<HostInput>,
    pub metrics: Arc<Metrics>,
    pub status: Arc<Mutex<Status>>,
    /// Members of every group of the cluster, those this node does not run included (where
    /// messages to them go).
    pub routes: BTreeMap<GroupId, Vec<NodeId>>,
    /// How often a leader sends its machine's unacknowledged messages to other groups again.
    pub resend_every: Duration,
}

pub struct Host {
    groups: BTreeMap<GroupId, Box<dyn GroupRunner>>,
    cx: HostCx,
    rx: mpsc::Receiver<HostInput>,
    metrics: Arc<Metrics>,
    status: Arc<Mutex<Status>>,
    routes: BTreeMap<GroupId, Vec<NodeId>>,
    /// Rotates the member a message to a remote group goes to.
    route_turn: usize,
    started: Instant,
    cluster_id: String,
    shutting_down: Option<oneshot::Sender<()>>,
    resend_every: Duration,
    last_resend: Instant,
}

/// Inputs taken from the channel before the host hands waiting commands to the cores.
const DRAIN: usize = 4096;
/// How often waiting clients are expired and the status and gauges refreshed.
const HOUSEKEEPING: Duration = Duration::from_millis(100);

impl Host {
    pub(crate) fn new(parts: HostParts, groups: Vec<Box<dyn GroupRunner>>) -> Self {
        let wal_tx = wal::spawn(parts.wal, parts.tx.clone());
        Host {
            groups: groups.into_iter().map(|g| (g.id(), g)).collect(),
            cx: HostCx {
                me: parts.me,
                peers: parts.peers,
                wal: wal_tx,
                tx: parts.tx,
                wal_dir: parts.wal_dir,
                disconnects: Vec::new(),
                outgoing: Vec::new(),
            },
            rx: parts.rx,
            metrics: parts.metrics,
            status: parts.status,
            routes: parts.routes,
            route_turn: 0,
            started: Instant::now(),
            cluster_id: parts.cluster_id,
            shutting_down: None,
            resend_every: parts.resend_every,
            last_resend: Instant::now(),
        }
    }

    fn now_us(&self) -> TimeUs {
        self.started.elapsed().as_micros() as TimeUs
    }

    /// The earliest deadline of any group.
    fn next_deadline(&self) -> Option<TimeUs> {
        self.groups.values().filter_map(|g| g.deadline()).min()
    }

    pub async fn run(mut self) {
        let mut last_housekeeping = Instant::now();
        self.publish_status();
        loop {
            let wake_at = self
                .next_deadline()
                .map(|d| tokio::time::Instant::from_std(self.started + Duration::from_micros(d)));
            let housekeeping_at = tokio::time::Instant::from_std(last_housekeeping + HOUSEKEEPING);
            let sleep_until = wake_at.map_or(housekeeping_at, |w| w.min(housekeeping_at));
            tokio::select! {
                biased;
                input = self.rx.recv() => {
                    let Some(input) = input else { break };
                    let mut stop = self.handle(input);
                    let mut n = 1;
                    while !stop && n < DRAIN {
                        match self.rx.try_recv() {
                            Ok(i) => stop = self.handle(i),
                            Err(_) => break,
                        }
                        n += 1;
                    }
                    if stop {
                        break;
                    }
                }
                _ = tokio::time::sleep_until(sleep_until) => {}
            }
            // Timers are checked on every turn, so a busy channel cannot starve them.
            self.wake_due();
            self.flush();
            if last_housekeeping.elapsed() >= HOUSEKEEPING {
                last_housekeeping = Instant::now();
                self.housekeeping();
            }
            if self.shutting_down.is_some() && self.groups.values().all(|g| g.all_durable()) {
                break;
            }
        }
        for g in self.groups.values_mut() {
            g.fail_waiters(SubmitError::ShuttingDown);
        }
        if let Some(done) = self.shutting_down.take() {
            let _ = done.send(());
        }
        info!("host stopped");
    }

    /// Returns true when the host must stop now.
    fn handle(&mut self, input: HostInput) -> bool {
        let now = self.now_us();
        match input {
            HostInput::Transport(Inbound::Message { from, group, msg }) => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.message(now, from, msg, &mut self.cx);
                }
            }
            HostInput::Transport(Inbound::Submit {
                from,
                group,
                payload,
            }) => match self.groups.get_mut(&group) {
                Some(g) => g.enqueue(payload, None),
                None => warn!(
                    from,
                    group, "a peer sent a command for a group this node does not run"
                ),
            },
            HostInput::Transport(Inbound::Disconnected { peer }) => {
                for g in self.groups.values_mut() {
                    g.disconnected(now, peer, &mut self.cx);
                }
            }
            HostInput::Durable(done) => {
                let m = &self.metrics;
                m.fsyncs.inc();
                m.fsync_latency
                    .observe(crate::metrics::seconds(done.elapsed_us));
                m.records_per_fsync.observe(done.stats.records as f64);
                m.groups_per_fsync.observe(done.upto.len() as f64);
                m.log_bytes.set(done.log_bytes as i64);
                m.log_segments.set(done.segments as i64);
                m.log_segments_deleted
                    .inc_by(done.stats.segments_deleted as u64);
                for (group, upto) in done.upto {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.durable(now, upto, &mut self.cx);
                    }
                }
            }
            HostInput::WalFailed(e) => {
                // Fail-stop: without a working log nothing may be acknowledged any more.
                error!("write-ahead log failed: {e}; stopping this replica");
                std::process::exit(70);
            }
            HostInput::Submit {
                group,
                payload,
                reply,
            } => {
                if self.shutting_down.is_some() {
                    let _ = reply.send(Err(SubmitError::ShuttingDown));
                } else {
                    match self.groups.get_mut(&group) {
                        Some(g) => g.enqueue(payload, Some(reply)),
                        None => {
                            let _ = reply.send(Err(SubmitError::NoSuchGroup));
                        }
                    }
                }
            }
            HostInput::SnapshotDone { group, snapshot } => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.snapshot_done(now, snapshot, &mut self.cx);
                }
            }
            HostInput::SnapshotFailed { group, error } => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.snapshot_failed(error);
                }
            }
            HostInput::Shutdown(done) => {
                info!("shutting down: flushing the log");
                self.shutting_down = Some(done);
                for g in self.groups.values_mut() {
                    g.fail_waiters(SubmitError::ShuttingDown);
                }
            }
        }
        self.after_step(now);
        false
    }

    /// Broken connections and messages between groups that a step produced.
    fn after_step(&mut self, now: TimeUs) {
        while let Some(peer) = self.cx.disconnects.pop() {
            for g in self.groups.values_mut() {
                g.disconnected(now, peer, &mut self.cx);
            }
        }
        if !self.cx.outgoing.is_empty() {
            let out = std::mem::take(&mut self.cx.outgoing);
            for (from, msg) in out {
                self.route(from, msg);
            }
        }
    }

    /// Send a state machine's message to its group: only from the sending group's leader.
    fn route(&mut self, from: GroupId, msg: GroupMessage) {
        let me = self.cx.me;
        let leads = self
            .groups
            .get(&from)
            .is_some_and(|g| g.view().leader == Some(me));
        if !leads {
            return;
        }
        self.metrics.group(from).group_messages.inc();
        if let Some(g) = self.groups.get_mut(&msg.to) {
            g.enqueue(msg.payload, None);
            return;
        }
        let Some(members) = self.routes.get(&msg.to).filter(|m| !m.is_empty()) else {
            warn!(
                from,
                to = msg.to,
                "a state machine addressed a group that no node runs"
            );
            return;
        };
        self.route_turn = self.route_turn.wrapping_add(1);
        let peer = members[self.route_turn % members.len()];
        if let Some(s) = self.cx.peers.get(&peer) {
            let _ = s.submit(msg.to, msg.payload);
        }
    }

    fn wake_due(&mut self) {
        let now = self.now_us();
        let due: Vec<GroupId> = self
            .groups
            .iter()
            .filter(|(_, g)| g.deadline().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            if let Some(g) = self.groups.get_mut(&id) {
                g.wake(now, &mut self.cx);
            }
            self.after_step(now);
        }
    }

    /// Hand every group's waiting commands to its core.
    fn flush(&mut self) {
        let now = self.now_us();
        let ids: Vec<GroupId> = self
            .groups
            .iter()
            .filter(|(_, g)| g.has_queued())
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(g) = self.groups.get_mut(&id) {
                g.flush(now, &mut self.cx);
            }
            self.after_step(now);
        }
    }

    fn housekeeping(&mut self) {
        if self.last_resend.elapsed() >= self.resend_every {
            self.last_resend = Instant::now();
            let me = self.cx.me;
            let mut out = Vec::new();
            for (&id, g) in self.groups.iter_mut() {
                if g.view().leader == Some(me) {
                    let mut msgs = Vec::new();
                    g.pending_messages(&mut msgs);
                    out.extend(msgs.into_iter().map(|m| (id, m)));
                }
            }
            for (from, m) in out {
                self.route(from, m);
            }
        }
        let depth: u64 = self.cx.peers.values().map(|p| p.depth()).sum();
        self.metrics.peer_send_queue.set(depth as i64);
        self.publish_status();
    }

    fn publish_status(&mut self) {
        let groups: Vec<GroupStatus> = self
            .groups
            .values_mut()
            .map(|g| g.housekeeping(&self.cx))
            .collect();
        let mut s = self.status.lock().expect("status");
        s.node_id = self.cx.me;
        s.cluster_id = self.cluster_id.clone();
        if let Some(g0) = groups.iter().find(|g| g.id == 0) {
            s.protocol = g0.protocol.clone();
            s.role = g0.role.clone();
            s.leader = g0.leader;
            s.epoch = g0.epoch;
            s.applied_slot = g0.applied_slot;
            s.applied_tag = g0.applied_tag;
            s.digest = g0.digest;
            s.snapshot_slot = g0.snapshot_slot;
            s.snapshots_installed = g0.snapshots_installed;
            s.pending_requests = g0.pending_requests;
        }
        s.log_bytes = self.metrics.log_bytes.get() as u64;
        s.log_segments = self.metrics.log_segments.get() as usize;
        s.groups = groups;
    }
}

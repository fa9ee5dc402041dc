//! The host's driver: runs the node's sans-IO host (crates/host) with tokio. It carries inputs
//! from the peer transport, the clients, the WAL thread and the snapshot tasks into the host,
//! and what the host produces out to them; it sleeps until the host's next deadline.
//!
//! * **peers**: frames go to each peer's bounded send queue (crate::transport); a peer whose
//!   queue is full counts as disconnected, and the host is told;
//! * **the write-ahead log** and its thread: one `fdatasync` serves every group with something
//!   queued ([`wal`]);
//! * **snapshots**: the host names the view to serialise; a blocking task writes it to its file
//!   durably and hands it back;
//! * **clients**: a [`GroupHandle`] submits with a oneshot, the token the host answers.
//!
//! Inputs taken together form one batch per group: the driver takes everything waiting on its
//! channel (up to [`DRAIN`]) before it flushes the host's queues to the cores.

pub mod wal;

use crate::metrics::{GroupMetrics, Metrics};
use crate::transport::{Inbound, PeerSender};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_core::{GroupId, NodeId, Role, Snapshot, TimeUs, View};
use synod_host::{GroupRunner, Host, HostConfig, Outputs, PeerKind, Telemetry};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};
use wal::{WalBatch, WalDone};

pub use synod_host::{Applied, GroupStatus, SubmitError, SubmitResult};

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
    /// A configuration change (docs/membership.md), answered once delivered here.
    Reconfigure {
        group: GroupId,
        payload: Bytes,
        change: synod_core::Change,
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
        match self.submit_pipelined(payload).await {
            Ok(rx) => rx.await.unwrap_or(Err(SubmitError::ShuttingDown)),
            Err(e) => Err(e),
        }
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

    /// Ask the group to change its configuration; the result comes once the change is
    /// delivered here, or at once with the core's refusal (`SubmitError::Config`).
    pub async fn reconfigure(&self, payload: Bytes, change: synod_core::Change) -> SubmitResult {
        let (reply, rx) = oneshot::channel();
        let input = HostInput::Reconfigure {
            group: self.group,
            payload,
            change,
            reply,
        };
        if self.tx.send(input).await.is_err() {
            return Err(SubmitError::ShuttingDown);
        }
        rx.await.unwrap_or(Err(SubmitError::ShuttingDown))
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
    pub groups: Vec<NodeGroupStatus>,
}

/// One group on `/v1/status`: the host's report, with the counters the driver keeps.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct NodeGroupStatus {
    #[serde(flatten)]
    pub host: GroupStatus,
    pub snapshots_installed: u64,
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
    pub host: HostConfig,
    /// Where each group's view is published to its front ends.
    pub views: HashMap<GroupId, watch::Sender<View>>,
}

/// The driver of a node's host.
pub struct Driver {
    host: Host<oneshot::Sender<SubmitResult>>,
    me: NodeId,
    peers: BTreeMap<NodeId, PeerSender>,
    wal: mpsc::UnboundedSender<WalBatch>,
    tx: mpsc::Sender<HostInput>,
    rx: mpsc::Receiver<HostInput>,
    wal_dir: PathBuf,
    metrics: Arc<Metrics>,
    status: Arc<Mutex<Status>>,
    views: HashMap<GroupId, watch::Sender<View>>,
    started: Instant,
    cluster_id: String,
    shutting_down: Option<oneshot::Sender<()>>,
    /// Peers whose send queue overflowed while outputs were carried out.
    overflowed: Vec<NodeId>,
    last_snapshot_at: HashMap<GroupId, Instant>,
}

/// Inputs taken from the channel before the host hands waiting commands to the cores.
const DRAIN: usize = 4096;
/// How often the status and gauges are refreshed.
const HOUSEKEEPING: Duration = Duration::from_millis(100);

/// The server's telemetry: every count into the group's Prometheus metrics.
struct Prometheus {
    groups: HashMap<GroupId, GroupMetrics>,
}

impl Prometheus {
    fn group(&mut self, id: GroupId) -> Option<&mut GroupMetrics> {
        self.groups.get_mut(&id)
    }
}

impl Telemetry for Prometheus {
    fn submitted(&mut self, group: GroupId) {
        if let Some(m) = self.group(group) {
            m.submitted.inc();
        }
    }
    fn batch(&mut self, group: GroupId, commands: usize) {
        if let Some(m) = self.group(group) {
            m.batch_commands.observe(commands as f64);
        }
    }
    fn received(&mut self, group: GroupId, _role: Role, kind: &'static str, _bytes: usize) {
        if let Some(m) = self.group(group) {
            m.received(kind).inc();
        }
    }
    fn sent(&mut self, group: GroupId, _role: Role, kind: &'static str, copies: usize, _: usize) {
        if let Some(m) = self.group(group) {
            m.sent(kind).inc_by(copies as u64);
        }
    }
    fn delivered(&mut self, group: GroupId) {
        if let Some(m) = self.group(group) {
            m.deliveries.inc();
        }
    }
    fn committed(&mut self, group: GroupId, latency_us: u64) {
        if let Some(m) = self.group(group) {
            m.commit_latency.observe(latency_us as f64 / 1e6);
        }
    }
    fn rejected(&mut self, group: GroupId) {
        if let Some(m) = self.group(group) {
            m.rejected.inc();
        }
    }
    fn group_message(&mut self, group: GroupId) {
        if let Some(m) = self.group(group) {
            m.group_messages.inc();
        }
    }
    fn snapshot_taken(&mut self, group: GroupId, slot: u64) {
        if let Some(m) = self.group(group) {
            m.snapshots_taken.inc();
            m.snapshot_slot.set(slot as i64);
        }
    }
    fn snapshot_installed(&mut self, group: GroupId, slot: u64) {
        if let Some(m) = self.group(group) {
            m.snapshots_installed.inc();
            m.snapshot_slot.set(slot as i64);
        }
    }
}

impl Driver {
    pub(crate) fn new(parts: HostParts, groups: Vec<Box<dyn GroupRunner>>) -> Self {
        let wal_tx = wal::spawn(parts.wal, parts.tx.clone());
        let telemetry = Prometheus {
            groups: groups
                .iter()
                .map(|g| (g.id(), parts.metrics.group(g.id())))
                .collect(),
        };
        let started = Instant::now();
        let ids: Vec<GroupId> = groups.iter().map(|g| g.id()).collect();
        let host = Host::new(parts.host, groups, Box::new(telemetry), 0);
        Driver {
            host,
            me: parts.me,
            peers: parts.peers,
            wal: wal_tx,
            tx: parts.tx,
            rx: parts.rx,
            wal_dir: parts.wal_dir,
            metrics: parts.metrics,
            status: parts.status,
            views: parts.views,
            started,
            cluster_id: parts.cluster_id,
            shutting_down: None,
            overflowed: Vec::new(),
            last_snapshot_at: ids.into_iter().map(|id| (id, started)).collect(),
        }
    }

    fn now_us(&self) -> TimeUs {
        self.started.elapsed().as_micros() as TimeUs
    }

    pub async fn run(mut self) {
        let mut last_housekeeping = Instant::now();
        self.carry_out();
        self.publish_status();
        loop {
            let wake_at = self
                .host
                .deadline()
                .map(|d| tokio::time::Instant::from_std(self.started + Duration::from_micros(d)));
            let housekeeping_at = tokio::time::Instant::from_std(last_housekeeping + HOUSEKEEPING);
            let sleep_until = wake_at.map_or(housekeeping_at, |w| w.min(housekeeping_at));
            tokio::select! {
                biased;
                input = self.rx.recv() => {
                    let Some(input) = input else { break };
                    self.handle(input);
                    let mut n = 1;
                    while n < DRAIN {
                        match self.rx.try_recv() {
                            Ok(i) => self.handle(i),
                            Err(_) => break,
                        }
                        n += 1;
                    }
                }
                _ = tokio::time::sleep_until(sleep_until) => {}
            }
            // Timers are checked on every turn, so a busy channel cannot starve them.
            let now = self.now_us();
            self.host.timeout(now);
            self.host.flush(now);
            self.carry_out();
            // What carrying out queued (a broken peer heard of, a routed command) goes now.
            while self.host.has_queued() {
                self.host.flush(self.now_us());
                self.carry_out();
            }
            if last_housekeeping.elapsed() >= HOUSEKEEPING {
                last_housekeeping = Instant::now();
                self.housekeeping();
            }
            if self.shutting_down.is_some() && self.host.all_durable() {
                break;
            }
        }
        self.host.shutdown();
        self.carry_out();
        if let Some(done) = self.shutting_down.take() {
            let _ = done.send(());
        }
        info!("host stopped");
    }

    fn handle(&mut self, input: HostInput) {
        let now = self.now_us();
        match input {
            HostInput::Transport(Inbound::Message { from, group, data }) => {
                self.host.receive(now, from, group, PeerKind::Message, data);
            }
            HostInput::Transport(Inbound::Submit {
                from,
                group,
                payload,
            }) => {
                if !self.host.runs(group) {
                    warn!(
                        from,
                        group, "a peer sent a command for a group this node does not run"
                    );
                }
                self.host
                    .receive(now, from, group, PeerKind::Submit, payload);
            }
            HostInput::Transport(Inbound::Disconnected { peer }) => {
                self.host.disconnected(now, peer);
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
                self.host.durable(now, &done.upto);
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
                let _ = self.host.submit(now, group, payload, reply);
            }
            HostInput::Reconfigure {
                group,
                payload,
                change,
                reply,
            } => {
                let _ = self.host.reconfigure(now, group, payload, change, reply);
            }
            HostInput::SnapshotDone { group, snapshot } => {
                self.last_snapshot_at.insert(group, Instant::now());
                self.host.snapshot_done(now, group, snapshot);
            }
            HostInput::SnapshotFailed { group, error } => {
                self.host.snapshot_failed(group, &error);
            }
            HostInput::Shutdown(done) => {
                info!("shutting down: flushing the log");
                self.shutting_down = Some(done);
                self.host.shutdown();
            }
        }
        // Broken peers are told at once, as before the next input.
        self.carry_out();
    }

    /// Carry out what the host produced, until it produces nothing more (a peer whose queue
    /// overflowed is a disconnection the host must hear of, which may produce more).
    fn carry_out(&mut self) {
        loop {
            let out = self.host.outputs();
            if out.is_empty() {
                break;
            }
            let mut out = std::mem::take(out);
            self.carry_out_once(&mut out);
            // Give the (cleared) buffers back to the host for reuse.
            let fresh = self.host.outputs();
            if fresh.is_empty() {
                *fresh = out;
            }
            let now = self.now_us();
            while let Some(peer) = self.overflowed.pop() {
                self.host.disconnected(now, peer);
            }
        }
    }

    fn carry_out_once(&mut self, out: &mut Outputs<oneshot::Sender<SubmitResult>>) {
        if let Some(fatal) = out.fatal.take() {
            error!("{fatal}; stopping this node");
            std::process::exit(71);
        }
        if !out.wal.is_empty() {
            // The WAL thread reports back; if it is gone, the host is stopping.
            let _ = self.wal.send(std::mem::take(&mut out.wal));
        }
        for t in out.transmit.drain(..) {
            let Some(s) = self.peers.get(&t.to) else {
                continue;
            };
            let queued = match t.kind {
                PeerKind::Message => s.send(t.group, t.data),
                PeerKind::Submit => s.submit(t.group, t.data),
            };
            if !queued && !self.overflowed.contains(&t.to) {
                self.overflowed.push(t.to);
            }
        }
        for (reply, result) in out.replies.drain(..) {
            let _ = reply.send(result);
        }
        for (group, view) in out.views.drain(..) {
            if let Some(tx) = self.views.get(&group) {
                tx.send_replace(view);
            }
            let g = self.metrics.group(group);
            g.role.set(match view.role {
                Role::Leading => 2,
                Role::Following | Role::Proposer => 1,
                Role::Electing => 0,
            });
            g.epoch.set(view.epoch as i64);
        }
        for (peer, why) in out.resets.drain(..) {
            warn!(peer, "{why}");
        }
        out.observed.clear();
        for job in out.snapshots.drain(..) {
            let tx = self.tx.clone();
            let dir = self.wal_dir.clone();
            tokio::task::spawn_blocking(move || {
                let data = (job.make)();
                let name = synod_log::snapshot_name(job.group, job.at.slot);
                let msg = match synod_log::write_file_durably(&dir, &name, &data) {
                    Ok(()) => HostInput::SnapshotDone {
                        group: job.group,
                        snapshot: Snapshot { at: job.at, data },
                    },
                    Err(e) => HostInput::SnapshotFailed {
                        group: job.group,
                        error: e.to_string(),
                    },
                };
                let _ = tx.blocking_send(msg);
            });
        }
    }

    fn housekeeping(&mut self) {
        let depth: u64 = self.peers.values().map(|p| p.depth()).sum();
        self.metrics.peer_send_queue.set(depth as i64);
        self.publish_status();
    }

    fn publish_status(&mut self) {
        let groups: Vec<NodeGroupStatus> = self
            .host
            .status()
            .into_iter()
            .map(|g| {
                let m = self.metrics.group(g.id);
                m.pending_requests.set(g.pending_requests as i64);
                m.outbox_held.set(g.outbox_held as i64);
                m.applied_slot.set(g.applied_slot as i64);
                if let Some(at) = self.last_snapshot_at.get(&g.id) {
                    m.snapshot_age_seconds.set(at.elapsed().as_secs() as i64);
                }
                NodeGroupStatus {
                    snapshots_installed: m.snapshots_installed.get(),
                    host: g,
                }
            })
            .collect();
        for (id, gauges) in self.host.gauges() {
            self.metrics.group(id).set_core(&gauges);
        }
        let mut s = self.status.lock().expect("status");
        s.node_id = self.me;
        s.cluster_id = self.cluster_id.clone();
        if let Some(g0) = groups.iter().find(|g| g.host.id == 0) {
            s.protocol = g0.host.protocol.clone();
            s.role = g0.host.role.clone();
            s.leader = g0.host.leader;
            s.epoch = g0.host.epoch;
            s.applied_slot = g0.host.applied_slot;
            s.applied_tag = g0.host.applied_tag;
            s.digest = g0.host.digest;
            s.snapshot_slot = g0.host.snapshot_slot;
            s.snapshots_installed = g0.snapshots_installed;
            s.pending_requests = g0.host.pending_requests;
        }
        s.log_bytes = self.metrics.log_bytes.get() as u64;
        s.log_segments = self.metrics.log_segments.get() as usize;
        s.groups = groups;
    }
}

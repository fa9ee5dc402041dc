//! The replica driver: runs a protocol core for real, with exactly the contract the simulator
//! enforces (docs/contract.md).
//!
//! One task owns the core and is the only one to step it. It
//! * hands storage ops to the WAL thread, which writes every op that arrived while the previous
//!   fsync ran as one batch with one fdatasync (group commit) and reports `Durable`;
//! * passes envelopes through the shared [`Outbox`]: an envelope whose barrier is not durable
//!   holds back itself and everything after it; the rest go to the per-peer senders at once,
//!   so the leader's own write runs in parallel with its proposals;
//! * applies deliveries to the state machine and answers the client waiting for each;
//! * takes snapshots in the background (a copy-on-write view, serialised on a blocking thread)
//!   and hands them to the core, which compacts the log behind them.

use crate::machine::StateMachine;
use crate::metrics::{KindLabel, Metrics, QueueLabel};
use crate::transport::PeerSender;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_core::outbox::Outbox;
use synod_core::wire::Wire;
use synod_core::{
    Actions, Apply, Command, Dest, Envelope, Event, Input, MessageKind, NodeId, Persist, Position,
    Protocol, Reject, Role, Snapshot,
};
use synod_log::Wal;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

pub enum DriverInput<M> {
    Peer {
        from: NodeId,
        msg: M,
    },
    Disconnected {
        peer: NodeId,
    },
    Durable {
        upto: u64,
        elapsed_us: u64,
        ops: usize,
        log_bytes: u64,
    },
    WalFailed(String),
    Submit {
        payload: Bytes,
        reply: oneshot::Sender<SubmitResult>,
    },
    SnapshotDone(Snapshot),
    SnapshotFailed(String),
    Shutdown(oneshot::Sender<()>),
}

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
}

pub type SubmitResult = Result<Applied, SubmitError>;

/// What the admin endpoints show.
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
    pub snapshot_slot: u64,
    pub snapshots_installed: u64,
    pub pending_requests: usize,
}

pub struct DriverParts<P: Protocol, S> {
    pub core: P,
    pub machine: Arc<Mutex<S>>,
    pub rx: mpsc::Receiver<DriverInput<P::Message>>,
    pub tx: mpsc::Sender<DriverInput<P::Message>>,
    pub peers: BTreeMap<NodeId, PeerSender<P::Message>>,
    pub wal: Wal<P::Record, P::Hard>,
    pub data_dir: PathBuf,
    pub status: Arc<Mutex<Status>>,
    pub metrics: Arc<Metrics>,
    pub me: NodeId,
    pub snapshot_every: u64,
    pub max_pending: usize,
    pub request_timeout: Duration,
    pub initial_log_bytes: u64,
}

type WalBatch<P> = Vec<Persist<<P as Protocol>::Record, <P as Protocol>::Hard>>;

pub struct Driver<P: Protocol, S> {
    core: P,
    machine: Arc<Mutex<S>>,
    rx: mpsc::Receiver<DriverInput<P::Message>>,
    tx: mpsc::Sender<DriverInput<P::Message>>,
    peers: BTreeMap<NodeId, PeerSender<P::Message>>,
    wal_tx: Option<mpsc::UnboundedSender<WalBatch<P>>>,
    outbox: Outbox<P::Message>,
    actions: Actions<P::Message, P::Record, P::Hard>,
    ready: Vec<Envelope<P::Message>>,
    status: Arc<Mutex<Status>>,
    metrics: Arc<Metrics>,
    data_dir: PathBuf,
    me: NodeId,
    started: Instant,
    next_id: u64,
    waiters: HashMap<u64, (oneshot::Sender<SubmitResult>, Instant)>,
    deadlines: VecDeque<(Instant, u64)>,
    max_pending: usize,
    request_timeout: Duration,
    snapshot_every: u64,
    snapshot_running: bool,
    last_snapshot_slot: u64,
    last_snapshot_at: Instant,
    last_seq_issued: u64,
    durable_seq: u64,
    disconnects: Vec<NodeId>,
    leader: Option<NodeId>,
    epoch: u64,
    shutting_down: Option<oneshot::Sender<()>>,
}

/// Command ids: node id in the top byte, 24 random bits per process start, a 32-bit counter.
fn id_base(me: NodeId) -> u64 {
    let boot: u64 = rand::random::<u64>() & 0xFF_FFFF;
    ((me as u64 & 0xFF) << 56) | (boot << 32)
}

impl<P, S> Driver<P, S>
where
    P: Protocol + Send + 'static,
    P::Message: Wire + MessageKind + Send + 'static,
    P::Record: Wire + Send + 'static,
    P::Hard: Wire + Send + 'static,
    S: StateMachine,
{
    pub fn new(parts: DriverParts<P, S>) -> Self {
        let (wal_tx, wal_rx) = mpsc::unbounded_channel();
        let tx = parts.tx.clone();
        let wal = parts.wal;
        std::thread::Builder::new()
            .name("synod-wal".into())
            .spawn(move || wal_thread::<P>(wal, wal_rx, tx))
            .expect("spawn the WAL thread");
        let applied = parts.machine.lock().expect("machine").applied().slot;
        parts.metrics.log_bytes.set(parts.initial_log_bytes as i64);
        Driver {
            core: parts.core,
            machine: parts.machine,
            rx: parts.rx,
            tx: parts.tx,
            peers: parts.peers,
            wal_tx: Some(wal_tx),
            outbox: Outbox::new(1 << 20),
            actions: Actions::default(),
            ready: Vec::new(),
            status: parts.status,
            metrics: parts.metrics,
            data_dir: parts.data_dir,
            me: parts.me,
            started: Instant::now(),
            next_id: id_base(parts.me),
            waiters: HashMap::new(),
            deadlines: VecDeque::new(),
            max_pending: parts.max_pending,
            request_timeout: parts.request_timeout,
            snapshot_every: parts.snapshot_every,
            snapshot_running: false,
            last_snapshot_slot: applied,
            last_snapshot_at: Instant::now(),
            last_seq_issued: 0,
            durable_seq: 0,
            disconnects: Vec::new(),
            leader: None,
            epoch: 0,
            shutting_down: None,
        }
    }

    pub async fn run(mut self) {
        let tick = Duration::from_micros(self.core.tick_us().max(1_000));
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.publish_status();
        loop {
            tokio::select! {
                biased;
                input = self.rx.recv() => {
                    let Some(input) = input else { break };
                    if self.handle(input) {
                        break;
                    }
                }
                _ = ticker.tick() => {
                    let now_us = self.started.elapsed().as_micros() as u64;
                    self.step(Input::Tick { now_us });
                    self.expire_waiters();
                    self.metrics.snapshot_age_seconds.set(self.last_snapshot_at.elapsed().as_secs() as i64);
                    self.publish_status();
                    if self.shutting_down.is_some() && self.durable_seq >= self.last_seq_issued {
                        break;
                    }
                }
            }
        }
        for (_, (w, _)) in self.waiters.drain() {
            let _ = w.send(Err(SubmitError::ShuttingDown));
        }
        self.wal_tx = None;
        if let Some(done) = self.shutting_down.take() {
            let _ = done.send(());
        }
        info!("replica driver stopped");
    }

    /// Returns true when the driver must stop now.
    fn handle(&mut self, input: DriverInput<P::Message>) -> bool {
        match input {
            DriverInput::Peer { from, msg } => {
                self.metrics
                    .messages_received
                    .get_or_create(&KindLabel { kind: msg.kind() })
                    .inc();
                self.step(Input::Message { from, msg });
            }
            DriverInput::Disconnected { peer } => self.step(Input::Disconnected { peer }),
            DriverInput::Durable {
                upto,
                elapsed_us,
                ops,
                log_bytes,
            } => {
                self.metrics
                    .fsync_latency
                    .observe(crate::metrics::seconds(elapsed_us));
                self.metrics.fsync_batch_ops.observe(ops as f64);
                self.metrics.log_bytes.set(log_bytes as i64);
                self.durable_seq = upto;
                let mut ready = std::mem::take(&mut self.ready);
                self.outbox.durable(upto, |e| ready.push(e));
                for e in ready.drain(..) {
                    self.transmit(e);
                }
                self.ready = ready;
                self.step(Input::Durable { upto });
            }
            DriverInput::WalFailed(e) => {
                // Fail-stop: without a working log nothing may be acknowledged any more.
                error!("write-ahead log failed: {e}; stopping this replica");
                std::process::exit(70);
            }
            DriverInput::Submit { payload, reply } => self.submit(payload, reply),
            DriverInput::SnapshotDone(s) => {
                self.snapshot_running = false;
                self.last_snapshot_slot = s.at.slot;
                self.last_snapshot_at = Instant::now();
                self.metrics.snapshots_taken.inc();
                self.metrics.snapshot_slot.set(s.at.slot as i64);
                debug!(slot = s.at.slot, bytes = s.data.len(), "snapshot written");
                self.step(Input::Compact(s));
            }
            DriverInput::SnapshotFailed(e) => {
                self.snapshot_running = false;
                warn!("snapshot failed: {e}");
            }
            DriverInput::Shutdown(done) => {
                info!("shutting down: flushing the log");
                self.shutting_down = Some(done);
                if self.durable_seq >= self.last_seq_issued {
                    return true;
                }
            }
        }
        false
    }

    fn submit(&mut self, payload: Bytes, reply: oneshot::Sender<SubmitResult>) {
        if self.shutting_down.is_some() {
            let _ = reply.send(Err(SubmitError::ShuttingDown));
            return;
        }
        if self.waiters.len() >= self.max_pending {
            self.metrics.rejected.inc();
            let _ = reply.send(Err(SubmitError::Busy));
            return;
        }
        self.next_id += 1;
        let id = self.next_id;
        let now = Instant::now();
        self.waiters.insert(id, (reply, now));
        self.deadlines.push_back((now + self.request_timeout, id));
        self.metrics.proposals.inc();
        self.step(Input::Submit(Command { id, payload }));
    }

    fn expire_waiters(&mut self) {
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
        self.metrics
            .queue_depth
            .get_or_create(&QueueLabel {
                queue: "pending_requests",
            })
            .set(self.waiters.len() as i64);
        self.metrics
            .queue_depth
            .get_or_create(&QueueLabel {
                queue: "outbox_held",
            })
            .set(self.outbox.held() as i64);
        for (peer, s) in &self.peers {
            let _ = peer;
            self.metrics
                .queue_depth
                .get_or_create(&QueueLabel { queue: "peer_send" })
                .set(s.depth() as i64);
        }
    }

    fn step(&mut self, input: Input<P::Message>) {
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        self.core.step(input, &mut actions);
        self.carry_out(&mut actions);
        self.actions = actions;
        while let Some(peer) = self.disconnects.pop() {
            let mut actions = std::mem::take(&mut self.actions);
            actions.clear();
            self.core.step(Input::Disconnected { peer }, &mut actions);
            self.carry_out(&mut actions);
            self.actions = actions;
        }
    }

    fn carry_out(&mut self, a: &mut Actions<P::Message, P::Record, P::Hard>) {
        if let Some(last) = a.persist.last() {
            self.last_seq_issued = last.seq;
            if let Some(tx) = &self.wal_tx {
                let _ = tx.send(std::mem::take(&mut a.persist));
            }
        }
        if !a.apply.is_empty() {
            let mut m = self.machine.lock().expect("machine");
            for ap in a.apply.drain(..) {
                match ap {
                    Apply::Command { at, command } => {
                        let result = m.apply(at, &command);
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
                                slot = s.at.slot,
                                bytes = s.data.len(),
                                "installed a snapshot from the leader"
                            );
                            self.metrics.snapshots_installed.inc();
                            self.last_snapshot_slot = s.at.slot;
                        }
                        Err(e) => {
                            // The leader sent state we cannot read: stop rather than diverge.
                            error!("cannot install the leader's snapshot: {e}; stopping");
                            std::process::exit(71);
                        }
                    },
                }
            }
            self.metrics.applied_slot.set(m.applied().slot as i64);
        }
        for e in a.events.drain(..) {
            match e {
                Event::Role {
                    role,
                    leader,
                    epoch,
                } => {
                    info!(?role, ?leader, epoch, "role changed");
                    self.leader = leader;
                    self.epoch = epoch;
                    self.metrics.epoch.set(epoch as i64);
                }
                Event::Mode { fallback } => {
                    info!(fallback, "broadcast mode switched");
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
        let mut ready = std::mem::take(&mut self.ready);
        for env in a.send.drain(..) {
            if !self.outbox.push(env, |e| ready.push(e)) {
                error!("more envelopes held back than the outbox allows; stopping");
                std::process::exit(72);
            }
        }
        for e in ready.drain(..) {
            self.transmit(e);
        }
        self.ready = ready;
        self.maybe_snapshot();
    }

    fn transmit(&mut self, env: Envelope<P::Message>) {
        let kind = env.msg.kind();
        match env.to {
            Dest::One(p) => self.send_to(p, env.msg, kind),
            Dest::All => {
                let peers: Vec<NodeId> = self.peers.keys().copied().collect();
                for p in peers {
                    self.send_to(p, env.msg.clone(), kind);
                }
            }
        }
    }

    fn send_to(&mut self, peer: NodeId, msg: P::Message, kind: &'static str) {
        let Some(s) = self.peers.get(&peer) else {
            return;
        };
        self.metrics
            .messages_sent
            .get_or_create(&KindLabel { kind })
            .inc();
        if !s.send(msg) && !self.disconnects.contains(&peer) {
            // Too slow: its queue is dropped and the connection reset; the core must know
            // that messages were lost.
            self.disconnects.push(peer);
        }
    }

    fn maybe_snapshot(&mut self) {
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
        let tx = self.tx.clone();
        let dir = self.data_dir.clone();
        tokio::task::spawn_blocking(move || {
            let data = view();
            let name = format!("snap-{:020}.snap", at.slot);
            let msg = match synod_log::write_file_durably(&dir, &name, &data) {
                Ok(()) => DriverInput::SnapshotDone(Snapshot { at, data }),
                Err(e) => DriverInput::SnapshotFailed(e.to_string()),
            };
            let _ = tx.blocking_send(msg);
        });
    }

    fn publish_status(&self) {
        let role = self.core.role();
        let (applied, digest) = {
            let m = self.machine.lock().expect("machine");
            (m.applied(), m.digest())
        };
        self.metrics.role.set(match role {
            Role::Leading => 2,
            Role::Following | Role::Proposer => 1,
            Role::Electing => 0,
        });
        let mut s = self.status.lock().expect("status");
        s.role = format!("{role:?}").to_lowercase();
        s.leader = if role == Role::Electing {
            None
        } else {
            self.leader
        };
        s.epoch = self.epoch;
        s.applied_slot = applied.slot;
        s.applied_tag = applied.tag;
        s.digest = digest;
        s.log_bytes = self.metrics.log_bytes.get() as u64;
        s.snapshot_slot = self.last_snapshot_slot;
        s.snapshots_installed = self.metrics.snapshots_installed.get();
        s.pending_requests = self.waiters.len();
        let _ = self.me;
    }
}

/// The WAL thread: write every batch that is waiting as one, with one fdatasync.
fn wal_thread<P: Protocol>(
    mut wal: Wal<P::Record, P::Hard>,
    mut rx: mpsc::UnboundedReceiver<WalBatch<P>>,
    tx: mpsc::Sender<DriverInput<P::Message>>,
) where
    P::Record: Wire,
    P::Hard: Wire,
{
    while let Some(mut batch) = rx.blocking_recv() {
        while let Ok(more) = rx.try_recv() {
            batch.extend(more);
        }
        let Some(upto) = batch.last().map(|p| p.seq) else {
            continue;
        };
        let started = Instant::now();
        let msg = match wal.write_batch(&batch) {
            Ok(()) => DriverInput::Durable {
                upto,
                elapsed_us: started.elapsed().as_micros() as u64,
                ops: batch.len(),
                log_bytes: wal.log_bytes(),
            },
            Err(e) => DriverInput::WalFailed(e.to_string()),
        };
        let failed = matches!(msg, DriverInput::WalFailed(_));
        if tx.blocking_send(msg).is_err() || failed {
            return;
        }
    }
}

//! The nodes: starting a node's host from its disk, crashing it, driving the host one input at a
//! time, and carrying out what comes out of it (frames to the network, storage ops to the disk,
//! replies to the clients, snapshots, views) and what it observed (every delivery, for the
//! checkers).

use super::node::{Recorder, Shared, Vacant};
use super::telemetry::SimTelemetry;
use super::{mix, Token, World, OUTBOX_LIMIT};
use crate::check::Checker;
use crate::App;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use synod_core::{Cluster, GroupId, NodeId, Position, Role, Snapshot, StateMachine, TimeUs};
use synod_host::register::Register;
use synod_host::{
    Group, GroupParts, GroupRunner, Host, HostConfig, Hosted, Observed, Outputs, SharedMachine,
};

/// A group's state machine for the simulation: the checkers' recorder around the real machine,
/// and the real machine where the checkers read it too.
pub(super) struct Machines {
    pub(super) recorder: Arc<Mutex<Recorder>>,
    pub(super) register: Option<Arc<Mutex<Register>>>,
    pub(super) kv: Option<Arc<Mutex<synod_kv::KvMachine>>>,
    pub(super) zk: Option<Arc<Mutex<synod_zk::group::ZooKeeper>>>,
    pub(super) etcd: Option<Arc<Mutex<synod_etcd::EtcdMachine>>>,
}

/// Group `g`'s state machine under `app` (of `groups`).
pub(super) fn machine(app: &App, g: usize, groups: usize) -> Machines {
    let recorder = |inner: Box<dyn StateMachine>| Arc::new(Mutex::new(Recorder::new(inner)));
    match app {
        App::Opaque => Machines {
            recorder: recorder(Box::<Vacant>::default()),
            register: None,
            kv: None,
            zk: None,
            etcd: None,
        },
        App::ZooKeeper(app) => {
            let t = Arc::new(Mutex::new(synod_zk::group::ZooKeeper::new(app.zxids)));
            Machines {
                recorder: recorder(Box::new(Shared(t.clone()))),
                register: None,
                kv: None,
                zk: Some(t),
                etcd: None,
            }
        }
        App::Registers => {
            let r = Arc::new(Mutex::new(Register::new(g as GroupId)));
            Machines {
                recorder: recorder(Box::new(Shared(r.clone()))),
                register: Some(r),
                kv: None,
                zk: None,
                etcd: None,
            }
        }
        App::Etcd(app) => {
            let mut m = synod_etcd::EtcdMachine::new();
            if app.plant == Some(crate::EtcdPlant::RevisionGap) {
                m.plant_gap(5);
            }
            let m = Arc::new(Mutex::new(m));
            Machines {
                recorder: recorder(Box::new(Shared(m.clone()))),
                register: None,
                kv: None,
                zk: None,
                etcd: Some(m),
            }
        }
        App::Kv(kv) => {
            let m = super::kv::machine(kv, g as u32, groups as u32);
            Machines {
                recorder: recorder(super::kv::shared(&m)),
                register: None,
                kv: Some(m),
                zk: None,
                etcd: None,
            }
        }
    }
}

impl<P: Hosted> World<P> {
    /// Start node `i`: its host, with every group's replica restored from what the node's
    /// disk holds.
    pub(super) fn start_node(&mut self, i: usize) {
        self.nodes[i].new_incarnation();
        self.nodes[i].up = true;
        let (id, inc) = (self.nodes[i].id, self.nodes[i].incarnation);
        let members: Vec<NodeId> = (1..=self.cfg.nodes as NodeId).collect();
        let mut runners: Vec<Box<dyn GroupRunner>> = Vec::new();
        for g in 0..self.nodes[i].groups.len() {
            let groups = self.nodes[i].groups.len();
            let Machines {
                recorder: machine,
                register,
                kv,
                zk,
                etcd,
            } = machine(&self.cfg.app, g, groups);
            let restored = {
                let m = &self.nodes[i].groups[g];
                match &m.durable.snapshot {
                    Some(s) => {
                        let mut r = machine.lock().expect("machine");
                        r.restore(s).expect("a snapshot the recorder wrote");
                        r.ids.clone()
                    }
                    None => Vec::new(),
                }
            };
            self.nodes[i].groups[g].machine = machine.clone();
            self.nodes[i].groups[g].register = register;
            self.nodes[i].groups[g].kv = kv;
            self.nodes[i].groups[g].zk = zk;
            self.nodes[i].groups[g].etcd = etcd;
            self.nodes[i].groups[g].leader = None;
            let cluster = Cluster::new(id, members.clone());
            let seed = mix(self.cfg.seed, (id as u64) << 32 | inc) ^ (g as u64) << 56;
            // `durable.lost` stays set until the core has written its hard state since (see
            // `land`): a crash before that must not forget the loss.
            let durable = self.nodes[i].groups[g].durable.clone();
            let core = P::restore(cluster, self.cfg.options.clone(), durable, seed);
            let shared: SharedMachine = machine;
            runners.push(Box::new(Group::new(GroupParts {
                id: g as GroupId,
                me: id,
                protocol: std::any::type_name::<P>().to_string(),
                machine_kind: "recorder".to_string(),
                members: members.clone(),
                core,
                machine: shared,
                snapshot_every: self.cfg.snapshot_every,
                outbox_limit: OUTBOX_LIMIT,
            })));
            if restored.is_empty() {
                self.histories[g].started(id, inc, 0);
            } else {
                let now = self.now;
                self.histories[g].restored(now, id, inc, &restored);
            }
            let base = restored.len();
            self.tracef(|| format!("n{id} g{g} starts (incarnation {inc}, snapshot slot {base})"));
        }
        let mut cfg = HostConfig::new(id);
        cfg.routes = (0..runners.len() as GroupId)
            .map(|g| (g, members.clone()))
            .collect::<BTreeMap<_, _>>();
        cfg.limits.max_commands = self.cfg.batch_commands.max(1);
        cfg.max_pending = usize::MAX;
        // The simulated clients give up on their own.
        cfg.request_timeout_us = u64::MAX / 4;
        cfg.id_base = ((id as u64 & 0xFF) << 56) | ((inc & 0xFF_FFFF) << 32);
        cfg.observe = true;
        cfg.bug = self.cfg.host_bug;
        let now = self.local_now(i);
        let telemetry = Box::new(SimTelemetry(self.counts.clone()));
        self.nodes[i].host = Some(Host::new(cfg, runners, telemetry, now));
        self.with_host(i, |_| {});
    }

    pub(super) fn crash_node(&mut self, i: usize) {
        if !self.nodes[i].up {
            return;
        }
        let id = self.nodes[i].id;
        self.tracef(|| format!("n{id} CRASHES"));
        self.land_torn_write(i);
        self.kv_crashed(i);
        let n = &mut self.nodes[i];
        n.up = false;
        // A lying disk's cache dies with the machine.
        n.volatile.clear();
        n.new_incarnation();
        // The process died: its connections break, and peers see them close.
        for j in 0..self.nodes.len() {
            if j != i {
                self.break_link(i, j);
                self.break_link(j, i);
                let now = self.local_now(j);
                self.with_host(j, |h| h.disconnected(now, id));
            }
        }
    }

    /// Drive node `i`'s host with `f`, then carry out everything it produced (until it
    /// produces nothing more), charge the CPU the step used, and schedule its next deadline.
    pub(super) fn with_host(&mut self, i: usize, f: impl FnOnce(&mut Host<Token>)) {
        let Some(mut host) = self.nodes[i].host.take() else {
            self.step_cost_ns = 0;
            return;
        };
        let incarnation = self.nodes[i].incarnation;
        f(&mut host);
        // The outputs are swapped with a spare set whose buffers the last round emptied: no
        // allocation per round.
        let mut out = std::mem::take(&mut self.spare);
        loop {
            if host.outputs().is_empty() {
                break;
            }
            std::mem::swap(host.outputs(), &mut out);
            self.carry_out(i, &mut host, &mut out);
            if self.nodes[i].incarnation != incarnation {
                break; // the node stopped (a fatal error) while its outputs were carried out
            }
        }
        out.wal.clear();
        self.spare = out;
        if self.nodes[i].incarnation == incarnation && self.nodes[i].up {
            self.kv_decisions(i);
            // Commands queued by this step (routed from another group, or a client's) reach
            // the cores once every event of this instant has run: one batch, as in the server.
            if host.has_queued() && !self.nodes[i].flush_pending {
                self.nodes[i].flush_pending = true;
                let now = self.now;
                self.at(
                    now,
                    super::Ev::Flush {
                        node: i,
                        incarnation,
                    },
                );
            }
            self.nodes[i].host = Some(host);
        }
        let cost_us = std::mem::take(&mut self.step_cost_ns).div_ceil(1_000);
        if cost_us > 0 {
            let n = &mut self.nodes[i];
            n.busy_until = n.busy_until.max(self.now) + cost_us;
        }
        self.schedule_timer(i);
    }

    fn carry_out(&mut self, i: usize, host: &mut Host<Token>, out: &mut Outputs<Token>) {
        // What the node observed first: deliveries are checked against the disks as they are
        // at this instant, before this step's writes go anywhere.
        for o in out.observed.drain(..) {
            self.on_observed(i, o);
        }
        for (group, view) in out.views.drain(..) {
            let m = &mut self.nodes[i].groups[group as usize];
            m.role = view.role;
            m.leader = view.leader;
            m.epoch = view.epoch;
        }
        if !out.wal.is_empty() {
            self.nodes[i].disk_queue.append(&mut out.wal);
            self.kick_disk(i);
        }
        for t in out.transmit.drain(..) {
            self.send_one(i, t.to as usize - 1, t.group as usize, t.kind, t.data);
        }
        for (token, result) in out.replies.drain(..) {
            match token {
                Token::Client(c, conn) => self.client_reply(i, (c, conn), result),
                Token::Kv(to, b) => self.kv_reply(i, to, b, result),
                Token::Reconfig(g, ask) => self.reconfig_reply(g, ask, &result),
            }
        }
        for (peer, why) in out.resets.drain(..) {
            let id = self.nodes[i].id;
            let now = self.now;
            self.histories[0].violate(
                Checker::Codec,
                now,
                format!("n{id} could not decode a message from n{peer}: {why}"),
            );
        }
        // Snapshots are taken at once: the file is written and the core told in this instant.
        let now = self.local_now(i);
        for job in out.snapshots.drain(..) {
            let data = (job.make)();
            host.snapshot_done(now, job.group, Snapshot { at: job.at, data });
        }
        if let Some(fatal) = out.fatal.take() {
            let at = self.now;
            self.histories[0].violate(Checker::Panic, at, fatal);
            self.crash_node(i);
        }
    }

    fn on_observed(&mut self, i: usize, o: Observed) {
        let id = self.nodes[i].id;
        let now = self.now;
        match o {
            Observed::Submitted { group, id: cmd } => {
                self.histories[group as usize].submitted(cmd);
                self.tracef(|| format!("n{id} g{group} queues command {cmd}"));
            }
            Observed::Applied { group, at, id: cmd } => self.on_apply(i, group as usize, at, cmd),
            Observed::Restored { group, snapshot } => {
                let g = group as usize;
                let ids = Recorder::ids_of(&snapshot).expect("a snapshot the recorder wrote");
                let inc = self.nodes[i].incarnation;
                self.histories[g].restored(now, id, inc, &ids);
                self.tracef(|| {
                    format!(
                        "n{id} g{g} restores a snapshot at slot {}",
                        snapshot.at.slot
                    )
                });
            }
            Observed::Membership { group, membership } => {
                let g = group as usize;
                let leading = self.nodes[i].groups[g].role == Role::Leading;
                if leading && membership.pending.len() > 1 {
                    let versions = membership.versions();
                    self.histories[g].violate(
                        Checker::Config,
                        now,
                        format!("n{id} leads with configurations {versions:x?} in force: more than one change in flight"),
                    );
                }
                self.tracef(|| format!("n{id} g{group} membership {membership:?}"));
            }
            Observed::View { group, view: v } => {
                let g = group as usize;
                let m = &mut self.nodes[i].groups[g];
                m.leader = v.leader;
                m.epoch = v.epoch;
                m.role = v.role;
                if v.serving() && m.unrecovered {
                    m.unrecovered = false;
                    self.tracef(|| format!("n{id} g{g} recovered its lost state from its peers"));
                }
                if v.role == Role::Leading {
                    self.histories[g].leading(now, id, v.epoch);
                }
                self.tracef(|| {
                    format!(
                        "n{id} g{g} is {:?} (leader {:?}, epoch {})",
                        v.role, v.leader, v.epoch
                    )
                });
            }
            Observed::Mode { group, fallback } => {
                let key = if fallback {
                    "to-base"
                } else {
                    "back-to-variant"
                };
                *self.report.switches.entry(key).or_default() += 1;
                self.tracef(|| format!("n{id} g{group} switches the broadcast mode ({key})"));
            }
        }
    }

    /// Node `i`'s own clock now: what its host is told.
    pub(super) fn local_now(&self, i: usize) -> TimeUs {
        self.nodes[i].clock.local(self.now)
    }

    /// Make sure a timer event is scheduled no later than the host's deadline (a time on its
    /// node's clock).
    fn schedule_timer(&mut self, i: usize) {
        let n = &self.nodes[i];
        let Some(d) = n.host.as_ref().and_then(|h| h.deadline()) else {
            return;
        };
        let d = n.clock.global(d).max(self.now);
        if n.timer_at.is_some_and(|t| t <= d) {
            return; // an earlier (or equal) wake is already scheduled
        }
        self.nodes[i].timer_at = Some(d);
        let incarnation = self.nodes[i].incarnation;
        self.at(
            d,
            super::Ev::Timer {
                node: i,
                incarnation,
                at: d,
            },
        );
    }

    /// The crash-tolerance invariant for a delivery at replica `g` of node `i`. A copy that a
    /// disk fault destroyed still counts: the fault took it, not the protocol (a replica loses
    /// state only within the assumptions, at most f at a time, and knows it).
    fn durable_quorum(&self, i: usize, g: usize, at: Position, id: u64) -> bool {
        let lost_since = |m: &super::node::Member<P>| m.lost_copies.iter().any(|d| d.holds(at, id));
        let me = &self.nodes[i].groups[g];
        // Any replica that is not leading delivers as a follower (also while synchronising).
        if let (Some(k), false) = (self.cfg.follower_invariant, me.role == Role::Leading) {
            let leader = me.leader;
            let holders = self
                .nodes
                .iter()
                .filter(|n| {
                    Some(n.id) != leader
                        && (n.groups[g].durable.holds(at, id) || lost_since(&n.groups[g]))
                })
                .count();
            return holders >= k;
        }
        // A majority of the voters of the configuration in force before this slot, and of the
        // slot's own configuration when it is a change (reconfig.rs).
        let ledger = &self.ledgers[g];
        let held = |voters: &[synod_core::NodeId]| {
            let holders = voters
                .iter()
                .filter(|&&v| {
                    let m = &self.nodes[v as usize - 1].groups[g];
                    m.durable.holds(at, id) || lost_since(m)
                })
                .count();
            holders >= synod_core::quorum::majority(voters.len())
        };
        held(&ledger.before(at.slot).voters)
            && ledger
                .submitted
                .get(&id)
                .is_none_or(|(voters, _)| held(voters))
    }

    fn on_apply(&mut self, i: usize, g: usize, at: Position, cmd: u64) {
        let id = self.nodes[i].id;
        let now = self.now;
        let durable_quorum = self.durable_quorum(i, g, at, cmd);
        if let Some(c) = self.ledgers[g].delivered(at.slot, at.tag, cmd) {
            let c = format!("{c:?}");
            self.tracef(|| format!("g{g} configuration {c} delivered at slot {}", at.slot));
        }
        let inc = self.nodes[i].incarnation;
        self.histories[g].delivered(now, id, inc, at.slot, at.tag, cmd, durable_quorum);
        if let Some(x) = &mut self.cross {
            if let Some(detail) = x.delivered(g, id, at.slot, cmd) {
                self.histories[g].violate(Checker::CrossGroup, now, detail);
            }
        }
        self.report.deliveries += 1;
        self.timeline(i, (0, 1));
        if self.trace.is_some() {
            let slot = at.slot;
            self.tracef(|| format!("n{id} g{g} delivers slot {slot} (command {cmd})"));
        }
    }
}

impl<P: Hosted> World<P> {
    /// The role of node `i`'s replica of group `g`, as last reported.
    pub(super) fn role_of(&self, i: usize, g: usize) -> Role {
        self.nodes[i].groups[g].role
    }
}

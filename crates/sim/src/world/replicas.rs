//! The replicas: starting a node's replicas from its disk, crashing it, stepping one replica
//! (group `g` on node `i`) through the shared driver loop with the simulated environment, and
//! what the environment does with deliveries and events (the checkers see them here).

use super::node::Machine;
use super::{mix, Ev, Op, World, OUTBOX_LIMIT};
use synod_core::replica::{Env, Replica};
use synod_core::{
    Apply, Cluster, Envelope, Event, Input, NodeId, Position, Protocol, Role, Snapshot, TimeUs,
};

impl<P: Protocol> World<P> {
    /// Start node `i`: every group's replica restores from what the node's disk holds.
    pub(super) fn start_node(&mut self, i: usize) {
        self.nodes[i].new_incarnation();
        self.nodes[i].up = true;
        for g in 0..self.nodes[i].groups.len() {
            let n = &mut self.nodes[i];
            let (id, inc) = (n.id, n.incarnation);
            let m = &mut n.groups[g];
            m.leader = None;
            m.machine = m
                .durable
                .snapshot
                .as_ref()
                .map(Machine::restore)
                .unwrap_or_default();
            let members: Vec<NodeId> = (1..=self.cfg.nodes as NodeId).collect();
            let cluster = Cluster::new(id, members);
            let seed = mix(self.cfg.seed, (id as u64) << 32 | inc) ^ (g as u64) << 56;
            // `durable.lost` stays set until the core has written its hard state since (see
            // `disk_done`): a crash before that must not forget the loss.
            let core = P::restore(cluster, self.cfg.options.clone(), m.durable.clone(), seed);
            m.replica = Some(Replica::new(core, OUTBOX_LIMIT));
            let base = m.machine.ids.len() as u64;
            if base > 0 {
                let ids = m.machine.ids.clone();
                let now = self.now;
                self.histories[g].restored(now, id, inc, &ids);
            } else {
                self.histories[g].started(id, inc, 0);
            }
            self.tracef(|| format!("n{id} g{g} starts (incarnation {inc}, snapshot slot {base})"));
            self.schedule_timer(i, g);
        }
    }

    pub(super) fn crash_node(&mut self, i: usize) {
        if !self.nodes[i].up {
            return;
        }
        let id = self.nodes[i].id;
        self.tracef(|| format!("n{id} CRASHES"));
        self.land_torn_write(i);
        let n = &mut self.nodes[i];
        n.up = false;
        for m in &mut n.groups {
            m.replica = None;
        }
        // A lying disk's cache dies with the machine.
        n.volatile.clear();
        n.new_incarnation();
        // The process died: its connections break, and peers see them close.
        for j in 0..self.nodes.len() {
            if j != i {
                self.break_link(i, j);
                self.break_link(j, i);
                for g in 0..self.nodes[j].groups.len() {
                    self.step(j, g, Input::Disconnected { peer: id });
                }
            }
        }
    }

    /// Run `f` on replica `g` of node `i` with its environment, then note its view and
    /// deadline, charge the CPU it used, and offer the state machine's snapshot when one is due.
    pub(super) fn with_replica(
        &mut self,
        i: usize,
        g: usize,
        f: impl FnOnce(&mut Replica<P>, &mut SimEnv<'_, P>),
    ) {
        let Some(mut r) = self.nodes[i].groups[g].replica.take() else {
            self.step_cost_ns = 0;
            return;
        };
        f(&mut r, &mut SimEnv { w: self, i, g });
        self.nodes[i].groups[g].role = r.view().role;
        self.nodes[i].groups[g].replica = Some(r);
        let cost_us = std::mem::take(&mut self.step_cost_ns).div_ceil(1_000);
        if cost_us > 0 {
            let n = &mut self.nodes[i];
            n.busy_until = n.busy_until.max(self.now) + cost_us;
        }
        self.schedule_timer(i, g);
        if let Some(snap) = self.snapshot_due(i, g) {
            self.step(i, g, Input::Compact(snap));
        }
    }

    /// Feed one input to a replica and carry out what it asks for.
    pub(super) fn step(&mut self, i: usize, g: usize, input: Input<P::Message>) {
        let now = self.local_now(i);
        self.with_replica(i, g, |r, env| r.step(now, input, env));
    }

    pub(super) fn wake(&mut self, i: usize, g: usize) {
        let now = self.local_now(i);
        self.with_replica(i, g, |r, env| {
            r.wake(now, env);
        });
    }

    /// Node `i`'s own clock now: what its cores are told.
    pub(super) fn local_now(&self, i: usize) -> TimeUs {
        self.nodes[i].clock.local(self.now)
    }

    /// Make sure a timer event is scheduled no later than the replica's deadline (a time on
    /// its node's clock).
    fn schedule_timer(&mut self, i: usize, g: usize) {
        let m = &self.nodes[i].groups[g];
        let Some(d) = m.replica.as_ref().and_then(|r| r.deadline()) else {
            return;
        };
        let d = self.nodes[i].clock.global(d).max(self.now);
        if m.timer_at.is_some_and(|t| t <= d) {
            return; // an earlier (or equal) wake is already scheduled
        }
        self.nodes[i].groups[g].timer_at = Some(d);
        let incarnation = self.nodes[i].incarnation;
        self.at(
            d,
            Ev::Timer {
                node: i,
                group: g,
                incarnation,
                at: d,
            },
        );
    }

    fn snapshot_due(&mut self, i: usize, g: usize) -> Option<Snapshot> {
        let every = self.cfg.snapshot_every;
        let m = &mut self.nodes[i].groups[g].machine;
        let applied = m.ids.len() as u64;
        (every > 0 && applied >= m.last_snapshot + every).then(|| {
            m.last_snapshot = applied;
            m.snapshot()
        })
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
        let holders = self
            .nodes
            .iter()
            .filter(|n| n.groups[g].durable.holds(at, id) || lost_since(&n.groups[g]))
            .count();
        holders >= synod_core::quorum::majority(self.nodes.len())
    }

    fn on_apply(&mut self, i: usize, g: usize, a: Apply) {
        let id = self.nodes[i].id;
        let now = self.now;
        match a {
            Apply::Command { at, command } => {
                let durable_quorum = self.durable_quorum(i, g, at, command.id);
                let inc = self.nodes[i].incarnation;
                self.histories[g].delivered(
                    now,
                    id,
                    inc,
                    at.slot,
                    at.tag,
                    command.id,
                    durable_quorum,
                );
                if let Some(x) = &mut self.cross {
                    if let Some(detail) = x.delivered(g, id, at.slot, command.id) {
                        self.histories[g].violate(crate::Checker::CrossGroup, now, detail);
                    }
                }
                let m = &mut self.nodes[i].groups[g].machine;
                if m.ids.len() as u64 + 1 == at.slot {
                    m.ids.push(command.id);
                    m.last_tag = at.tag;
                }
                self.report.deliveries += 1;
                self.timeline(i, (0, 1));
                if self.trace.is_some() {
                    let (slot, cid) = (at.slot, command.id);
                    self.tracef(|| format!("n{id} g{g} delivers slot {slot} (command {cid})"));
                }
                self.client_delivered(i, g, command.id);
            }
            Apply::Restore(s) => {
                let m = Machine::restore(&s);
                let inc = self.nodes[i].incarnation;
                self.histories[g].restored(now, id, inc, &m.ids);
                self.tracef(|| format!("n{id} g{g} restores a snapshot at slot {}", s.at.slot));
                self.nodes[i].groups[g].machine = m;
            }
        }
    }

    fn on_event(&mut self, i: usize, g: usize, e: Event) {
        let id = self.nodes[i].id;
        let now = self.now;
        match e {
            Event::View(v) => {
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
            Event::Mode { fallback } => {
                let key = if fallback {
                    "to-base"
                } else {
                    "back-to-variant"
                };
                *self.report.switches.entry(key).or_default() += 1;
                self.tracef(|| format!("n{id} g{g} switches the broadcast mode ({key})"));
            }
            Event::Rejected { id: cmd, .. } => self.client_rejected(i, g, cmd),
        }
    }
}

/// The environment of replica `g` of node `i` while it steps: the node's simulated disk
/// (shared by its groups), the state machine, event observers and the network.
pub(super) struct SimEnv<'a, P: Protocol> {
    w: &'a mut World<P>,
    i: usize,
    g: usize,
}

impl<P: Protocol> Env<P> for SimEnv<'_, P> {
    fn persist(&mut self, ops: &mut Vec<Op<P>>) {
        let g = self.g;
        self.w.nodes[self.i]
            .disk_queue
            .extend(ops.drain(..).map(|op| (g, op)));
        self.w.kick_disk(self.i);
    }
    fn apply(&mut self, apply: Apply) {
        self.w.on_apply(self.i, self.g, apply);
    }
    fn event(&mut self, event: Event) {
        self.w.on_event(self.i, self.g, event);
    }
    fn transmit(&mut self, envelope: Envelope<P::Message>) {
        self.w.transmit(self.i, self.g, envelope);
    }
}

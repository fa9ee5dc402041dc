//! The nemesis: faults injected and healed as the schedule says, targets resolved when a fault
//! fires (often the current leader), and the settling of the cluster after the last fault.

use super::{Ev, World};
use crate::check::Checker;
use crate::faults::{Fault, FaultKind};
use rand_core::RngCore;
use rand_xoshiro::Xoshiro256PlusPlus;
use synod_core::{Input, Protocol, Role};

impl<P: Protocol> World<P> {
    pub(super) fn inject(&mut self, i: usize) {
        let f: Fault = self.schedule.faults[i].clone();
        let target = if f.resolved.is_empty() {
            self.resolve_target(&f)
        } else {
            f.resolved.clone()
        };
        self.schedule.faults[i].resolved = target.clone();
        self.tracef(|| format!("FAULT {} on {:?}", f.kind.name(), target));
        match f.kind {
            FaultKind::CrashPair => {
                for &t in &target {
                    self.crash_node(t);
                }
            }
            FaultKind::Crash => {
                for &t in &target {
                    // Processes executing the protocol: up and serving with a leader.
                    let executing = self
                        .nodes
                        .iter()
                        .filter(|n| {
                            n.replica.is_some() && matches!(n.role, Role::Leading | Role::Following)
                        })
                        .count();
                    let quorum = synod_core::quorum::majority(self.nodes.len());
                    if self.cfg.a12_crashes && executing <= quorum {
                        // A1.2: no crash while only a quorum executes.
                        self.tracef(|| format!("crash of n{} skipped (A1.2)", t + 1));
                        continue;
                    }
                    self.crash_node(t);
                }
            }
            FaultKind::Partition | FaultKind::OneWay => self.block(f.kind, &target, true),
            FaultKind::SlowNode => {
                for &t in &target {
                    self.nodes[t].slow_net = f.factor;
                }
            }
            FaultKind::SlowDisk => {
                for &t in &target {
                    self.nodes[t].slow_disk = f.factor;
                }
            }
            FaultKind::LinkReset => {
                let (a, b) = (target[0], target[1]);
                self.break_link(a, b);
                self.break_link(b, a);
                let (ida, idb) = (self.nodes[a].id, self.nodes[b].id);
                self.step(a, Input::Disconnected { peer: idb });
                self.step(b, Input::Disconnected { peer: ida });
            }
        }
    }

    fn resolve_target(&mut self, f: &Fault) -> Vec<usize> {
        let n = self.nodes.len();
        let leader = self.nodes.iter().position(|x| x.role == Role::Leading);
        let pick = |rng: &mut Xoshiro256PlusPlus| rng.next_u64() as usize % n;
        match f.kind {
            FaultKind::Crash | FaultKind::SlowNode | FaultKind::SlowDisk => {
                let t = match leader {
                    Some(l) if f.at_leader => l,
                    _ => pick(&mut self.rng),
                };
                vec![t]
            }
            FaultKind::Partition | FaultKind::OneWay => {
                // A random non-empty proper subset, often isolating the leader.
                let mut side: Vec<usize> =
                    (0..n).filter(|_| self.rng.next_u64() & 1 == 1).collect();
                if f.at_leader {
                    if let Some(l) = leader {
                        if !side.contains(&l) {
                            side.push(l);
                        }
                    }
                }
                if side.is_empty() || side.len() == n {
                    side = vec![pick(&mut self.rng)];
                }
                side
            }
            FaultKind::CrashPair => {
                let l = leader.unwrap_or_else(|| pick(&mut self.rng));
                // The follower holding the most: the one whose loss hurts.
                let f = (0..n)
                    .filter(|&i| i != l)
                    .max_by_key(|&i| (self.nodes[i].durable.last_key(), i))
                    .unwrap_or(l);
                vec![l, f]
            }
            FaultKind::LinkReset => {
                let a = leader.unwrap_or_else(|| pick(&mut self.rng));
                let mut b = pick(&mut self.rng);
                if b == a {
                    b = (a + 1) % n;
                }
                vec![a, b]
            }
        }
    }

    pub(super) fn heal(&mut self, i: usize) {
        let f = self.schedule.faults[i].clone();
        if self.schedule.faults[i].healed {
            return;
        }
        self.schedule.faults[i].healed = true;
        let target = f.resolved.clone();
        self.tracef(|| format!("HEAL {} on {:?}", f.kind.name(), target));
        match f.kind {
            FaultKind::Crash => {
                for &t in &target {
                    if self.nodes[t].replica.is_none()
                        && !(self.nodes[t].stays_down && self.healed_at.is_some())
                    {
                        self.start_node(t);
                    }
                }
            }
            FaultKind::Partition | FaultKind::OneWay => self.block(f.kind, &target, false),
            FaultKind::SlowNode => {
                for &t in &target {
                    self.nodes[t].slow_net = 1;
                }
            }
            FaultKind::SlowDisk => {
                for &t in &target {
                    self.nodes[t].slow_disk = 1;
                }
            }
            FaultKind::CrashPair => {
                if let Some(&l) = target.first() {
                    if self.nodes[l].replica.is_none() {
                        self.start_node(l);
                    }
                }
                if let Some(&f) = target.get(1) {
                    let at = self.now + 500_000;
                    self.at(at, Ev::Restart(f));
                }
            }
            FaultKind::LinkReset => {}
        }
    }

    pub(super) fn heal_all(&mut self) {
        for i in 0..self.schedule.faults.len() {
            if self.schedule.faults[i].start_us <= self.now
                && self.schedule.faults[i].kind != FaultKind::LinkReset
            {
                self.heal(i);
            }
        }
        // Faults scheduled after the window never start.
        self.schedule
            .faults
            .retain(|f| f.start_us <= self.cfg.fault_window_us);
        for i in 0..self.nodes.len() {
            if self.nodes[i].stays_down {
                self.crash_node(i);
            } else if self.nodes[i].replica.is_none() {
                self.start_node(i);
            }
        }
        self.healed_at = Some(self.now);
        self.tracef(|| "ALL FAULTS HEALED".to_string());
    }

    /// After healing: has the cluster settled on one leader followed by every live replica,
    /// without change for the settle window?
    pub(super) fn check_stable(&mut self) {
        let Some(h) = self.healed_at else {
            return;
        };
        if self.stable_at.is_some() {
            return;
        }
        let mut live = self.nodes.iter().filter(|n| !n.stays_down);
        let Some(first) = live.next() else {
            return;
        };
        let agreed = std::iter::once(first).chain(live).all(|n| {
            n.replica.is_some()
                && matches!(n.role, Role::Leading | Role::Following)
                && n.leader.is_some()
                && n.leader == first.leader
                && n.epoch == first.epoch
        }) && self
            .nodes
            .iter()
            .filter(|n| n.replica.is_some() && n.role == Role::Leading)
            .count()
            == 1;
        let now = self.now;
        if !agreed {
            self.settling = None;
            return;
        }
        let view = (first.leader, first.epoch);
        match self.settling {
            Some((v, _)) if v == view => {}
            _ => self.settling = Some((view, now)),
        }
        let since = self.settling.expect("set").1;
        if now - since < self.cfg.settle_window_us {
            return;
        }
        self.stable_at = Some(now);
        self.report.settle_us.push(since - h);
        self.tracef(|| "CLUSTER SETTLED".to_string());
        if since - h > self.cfg.liveness_bound_us {
            self.history.violate(
                Checker::Liveness,
                now,
                format!(
                    "the cluster took {}us to settle after the faults healed",
                    since - h
                ),
            );
        }
    }
}

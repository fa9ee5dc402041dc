//! The nemesis: faults injected and healed as the schedule says, targets resolved when a fault
//! fires (often the current leader), and the settling of the cluster after the last fault.

use super::node::DiskFault;
use super::{Ev, World};
use crate::check::Checker;
use crate::faults::{Fault, FaultKind};
use rand_core::RngCore;
use rand_xoshiro::Xoshiro256PlusPlus;
use synod_core::View;
use synod_host::Hosted;

impl<P: Hosted> World<P> {
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
                    // Processes executing the protocol: up and serving.
                    let executing = self
                        .nodes
                        .iter()
                        .filter(|n| n.up && n.groups[0].view().serving())
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
            FaultKind::Reconfig => self.reconfigure(&f),
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
            FaultKind::LinkReset | FaultKind::Replay => {
                let (a, b) = (target[0], target[1]);
                if f.kind == FaultKind::Replay {
                    self.replay_link(a, b);
                    self.replay_link(b, a);
                } else {
                    self.break_link(a, b);
                    self.break_link(b, a);
                }
                let (ida, idb) = (self.nodes[a].id, self.nodes[b].id);
                let now = self.local_now(a);
                self.with_host(a, |h| h.disconnected(now, idb));
                let now = self.local_now(b);
                self.with_host(b, |h| h.disconnected(now, ida));
            }
            FaultKind::Pause => {
                for &t in &target {
                    let n = &mut self.nodes[t];
                    n.busy_until = n.busy_until.max(f.end_us);
                }
            }
            FaultKind::ClockDrift => {
                // 2–10× fast or slow, from the drawn factor.
                let times = 2 + (f.factor as u64 % 9);
                for &t in &target {
                    let base = self.nodes[t].clock.base_ppm;
                    let rate = if f.factor.is_multiple_of(2) {
                        base * times
                    } else {
                        base / times
                    };
                    let now = self.now;
                    self.nodes[t].clock.set_rate(now, rate);
                }
            }
            FaultKind::DiskError => {
                for &t in &target {
                    self.nodes[t].disk_fault = DiskFault::Eio;
                }
            }
            FaultKind::LyingDisk => {
                for &t in &target {
                    self.nodes[t].disk_fault = DiskFault::Lying;
                }
            }
            FaultKind::Corrupt | FaultKind::Wipe | FaultKind::WipeMajority => {
                for &t in &target {
                    if f.kind != FaultKind::WipeMajority && !self.may_lose_state(t) {
                        // Within the assumptions at most f replicas have lost state and not
                        // yet recovered it from their peers (each is detected and abstains;
                        // more would leave no quorum that remembers).
                        self.tracef(|| {
                            format!("n{} keeps its disk: f replicas are recovering", t + 1)
                        });
                        *self.report.faults.entry("loss-skipped").or_default() += 1;
                        continue;
                    }
                    self.crash_node(t);
                    let lost = if f.kind == FaultKind::Corrupt {
                        self.corrupt_disk(t, f.factor as u64)
                    } else {
                        self.wipe_disk(t)
                    };
                    let id = self.nodes[t].id;
                    self.tracef(|| format!("n{id} lost its disk's {lost}"));
                }
            }
        }
    }

    /// Cut the log of one of node `i`'s groups at a record that failed its checksum (drawn
    /// from `pick`): that record and every later one are gone, and the replica will know it
    /// lost state. The cut falls after the snapshot's position: in the write-ahead log the
    /// snapshot's op follows the records it covers, so a cut below it would take the snapshot
    /// (and, on a real disk, bring back an older one with the records retained behind it). With
    /// nothing after the snapshot, the damaged block is the snapshot itself, and what is left
    /// cannot be replayed without it: the group's state is gone, as after a wipe.
    fn corrupt_disk(&mut self, i: usize, pick: u64) -> String {
        let g = (pick as usize) % self.nodes[i].groups.len();
        let r = self.rng.next_u64() as usize;
        let m = &mut self.nodes[i].groups[g];
        m.lost_copies.push(m.durable.clone());
        m.unrecovered = true;
        let d = &mut m.durable;
        let covered = d
            .snapshot
            .as_ref()
            .map_or(0, |s| <P::Record as synod_core::LogRecord>::key_of(s.at));
        let keys: Vec<u64> = d.records.keys().copied().filter(|&k| k > covered).collect();
        if keys.is_empty() {
            *d = Default::default();
            d.lost = true;
            return format!("group {g}'s snapshot, and with it its state");
        }
        d.lost = true;
        let cut = keys[r % keys.len()];
        let dropped = d.records.split_off(&cut).len();
        format!("group {g}'s {dropped} records from key {cut} on")
    }

    fn wipe_disk(&mut self, i: usize) -> String {
        for m in &mut self.nodes[i].groups {
            let copy = std::mem::take(&mut m.durable);
            m.lost_copies.push(copy);
            m.durable.lost = true;
            m.unrecovered = true;
        }
        "whole state (wiped)".to_string()
    }

    /// May node `t` lose disk state within the assumptions: fewer than f other nodes have
    /// lost state and not recovered it yet, or will be lost for good when the faults heal
    /// (`--stay-down`)?
    /// With configuration changes, the bound holds for the voters of every configuration a
    /// decision may need (the last delivered and those asked since), in every group.
    fn may_lose_state(&self, t: usize) -> bool {
        if self.nodes[t].stays_down {
            return false;
        }
        let lost = |j: usize| {
            let n = &self.nodes[j];
            n.stays_down || n.groups.iter().any(|m| m.unrecovered)
        };
        self.ledgers.iter().all(|ledger| {
            ledger.in_doubt().iter().all(|voters| {
                let f = (voters.len() - 1) / 2;
                let me = voters.contains(&self.nodes[t].id) as usize;
                let others = voters
                    .iter()
                    .filter(|&&v| v as usize - 1 != t && lost(v as usize - 1))
                    .count();
                others + me <= f
            })
        })
    }

    fn resolve_target(&mut self, f: &Fault) -> Vec<usize> {
        let n = self.nodes.len();
        let leader = self.named();
        let pick = |rng: &mut Xoshiro256PlusPlus| rng.next_u64() as usize % n;
        match f.kind {
            FaultKind::Crash
            | FaultKind::SlowNode
            | FaultKind::SlowDisk
            | FaultKind::Pause
            | FaultKind::ClockDrift
            | FaultKind::DiskError
            | FaultKind::Corrupt
            | FaultKind::Wipe => {
                let t = match leader {
                    Some(l) if f.at_named => l,
                    _ => pick(&mut self.rng),
                };
                vec![t]
            }
            FaultKind::Partition | FaultKind::OneWay => {
                // A random non-empty proper subset, often isolating the leader.
                let mut side: Vec<usize> =
                    (0..n).filter(|_| self.rng.next_u64() & 1 == 1).collect();
                if f.at_named {
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
                    .max_by_key(|&i| (self.nodes[i].groups[0].durable.last_key(), i))
                    .unwrap_or(l);
                vec![l, f]
            }
            FaultKind::LyingDisk | FaultKind::WipeMajority => {
                // A majority, the named leader among them when there is one.
                let mut all: Vec<usize> = (0..n).collect();
                let start = leader.unwrap_or_else(|| pick(&mut self.rng));
                all.rotate_left(start);
                all.truncate(synod_core::quorum::majority(n));
                all
            }
            // The group's leader is found when the change is asked.
            FaultKind::Reconfig => Vec::new(),
            FaultKind::LinkReset | FaultKind::Replay => {
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
            FaultKind::Crash
            | FaultKind::DiskError
            | FaultKind::Corrupt
            | FaultKind::Wipe
            | FaultKind::WipeMajority => {
                for &t in &target {
                    if f.kind == FaultKind::DiskError {
                        self.nodes[t].disk_fault = DiskFault::None;
                    }
                    let gone_for_good = self.nodes[t].stays_down && self.healed_at.is_some();
                    if !self.nodes[t].up && !gone_for_good {
                        self.start_node(t);
                    }
                }
            }
            FaultKind::LyingDisk => {
                // The nodes crash at the end of the fault: what their disks cached is gone.
                for &t in &target {
                    self.crash_node(t);
                    self.nodes[t].disk_fault = DiskFault::None;
                }
                for &t in &target {
                    if !(self.nodes[t].stays_down && self.healed_at.is_some()) {
                        self.start_node(t);
                    }
                }
            }
            FaultKind::Pause => {}
            FaultKind::ClockDrift => {
                for &t in &target {
                    let base = self.nodes[t].clock.base_ppm;
                    let now = self.now;
                    self.nodes[t].clock.set_rate(now, base);
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
                    if !self.nodes[l].up {
                        self.start_node(l);
                    }
                }
                if let Some(&f) = target.get(1) {
                    let at = self.now + 500_000;
                    self.at(at, Ev::Restart(f));
                }
            }
            FaultKind::LinkReset | FaultKind::Replay | FaultKind::Reconfig => {}
        }
    }

    pub(super) fn heal_all(&mut self) {
        for i in 0..self.schedule.faults.len() {
            if self.schedule.faults[i].start_us <= self.now
                && self.schedule.faults[i].kind.has_heal()
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
            } else if !self.nodes[i].up {
                self.start_node(i);
            }
        }
        self.healed_at = Some(self.now);
        self.tracef(|| "ALL FAULTS HEALED".to_string());
    }

    /// The node the live replicas of group 0 name as leader most often (a tie goes to the
    /// lower id), if it is up: "the current leader" of a leader-based protocol, the duty holder
    /// of a multi-leader one. Fault targets are named through it, never through a role.
    pub(super) fn named(&self) -> Option<usize> {
        let mut votes: std::collections::BTreeMap<synod_core::NodeId, usize> = Default::default();
        for n in self.nodes.iter().filter(|n| n.up) {
            if let Some(l) = n.groups[0].leader {
                *votes.entry(l).or_default() += 1;
            }
        }
        let (&id, _) = votes
            .iter()
            .max_by_key(|(id, c)| (**c, std::cmp::Reverse(**id)))?;
        let i = id as usize - 1;
        (i < self.nodes.len() && self.nodes[i].up).then_some(i)
    }

    /// After healing: do the views of every live replica satisfy the protocol's settled rule
    /// ([`Protocol::settled`]), unchanged for the settle window?
    pub(super) fn check_stable(&mut self) {
        let Some(h) = self.healed_at else {
            return;
        };
        if self.stable_at.is_some() {
            return;
        }
        let live: Vec<_> = self.nodes.iter().filter(|n| !n.stays_down).collect();
        // A group settles among the members of its last configuration: a node removed from it
        // no longer takes part.
        let views: Vec<Vec<View>> = (0..self.histories.len())
            .map(|g| {
                let members = self.final_members(g);
                live.iter()
                    .filter(|n| members.contains(&n.id))
                    .map(|n| n.groups[g].view())
                    .collect()
            })
            .collect();
        let agreed =
            !live.is_empty() && live.iter().all(|n| n.up) && views.iter().all(|v| P::settled(v));
        let now = self.now;
        if !agreed {
            self.settling = None;
            return;
        }
        match &self.settling {
            Some((v, _)) if *v == views => {}
            _ => self.settling = Some((views, now)),
        }
        let since = self.settling.as_ref().expect("set").1;
        if now - since < self.cfg.settle_window_us {
            return;
        }
        self.stable_at = Some(now);
        self.report.settle_us.push(since - h);
        self.tracef(|| "CLUSTER SETTLED".to_string());
        if since - h > self.cfg.liveness_bound_us {
            self.histories[0].violate(
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

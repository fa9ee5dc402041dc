//! A simulated node: one process with its disk, clock, network interface and CPU, running one
//! replica of every group ([`Member`]). The groups share the disk (one fsync serves all of
//! them), the network interface and the CPU, as the server's host of groups does.

use super::{Durable, Op};
use bytes::Bytes;
use std::collections::VecDeque;
use synod_core::replica::Replica;
use synod_core::{Command, NodeId, Protocol, Role, Snapshot, TimeUs, View};

/// The replicated state machine of the simulation: the sequence of command ids it applied.
#[derive(Clone, Default)]
pub(super) struct Machine {
    pub(super) ids: Vec<u64>,
    pub(super) last_tag: u64,
    pub(super) last_snapshot: u64,
}

impl Machine {
    pub(super) fn snapshot(&self) -> Snapshot {
        let mut data = Vec::with_capacity(self.ids.len() * 8);
        for id in &self.ids {
            data.extend_from_slice(&id.to_le_bytes());
        }
        Snapshot {
            at: synod_core::Position {
                slot: self.ids.len() as u64,
                tag: self.last_tag,
            },
            data: Bytes::from(data),
        }
    }
    pub(super) fn restore(s: &Snapshot) -> Self {
        let ids: Vec<u64> = s
            .data
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Machine {
            last_snapshot: ids.len() as u64,
            ids,
            last_tag: s.at.tag,
        }
    }
}

/// A node's replica of one group.
pub(super) struct Member<P: Protocol> {
    /// `None` while the node is down (and, briefly, while the replica steps).
    pub(super) replica: Option<Replica<P>>,
    pub(super) durable: Durable<P>,
    /// Commands submitted here and not yet handed to the core.
    pub(super) submits: VecDeque<Command>,
    pub(super) flush_pending: bool,
    /// The time of the timer event scheduled for this replica, if any.
    pub(super) timer_at: Option<TimeUs>,
    pub(super) machine: Machine,
    pub(super) role: Role,
    pub(super) leader: Option<NodeId>,
    pub(super) epoch: u64,
    /// What disk faults destroyed (the durable state just before each loss), for the
    /// crash-tolerance checker: a copy the fault took still counted when it was acknowledged.
    pub(super) lost_copies: Vec<Durable<P>>,
    /// A disk fault destroyed state and the replica has not served since (recovered it from
    /// its peers).
    pub(super) unrecovered: bool,
}

impl<P: Protocol> Member<P> {
    pub(super) fn new() -> Self {
        Member {
            replica: None,
            durable: Default::default(),
            submits: VecDeque::new(),
            flush_pending: false,
            timer_at: None,
            machine: Machine::default(),
            role: Role::Electing,
            leader: None,
            epoch: 0,
            lost_copies: Vec::new(),
            unrecovered: false,
        }
    }

    /// The view as last reported.
    pub(super) fn view(&self) -> View {
        View {
            role: self.role,
            leader: self.leader,
            epoch: self.epoch,
        }
    }
}

pub(super) struct Node<P: Protocol> {
    pub(super) id: NodeId,
    /// The process runs.
    pub(super) up: bool,
    pub(super) incarnation: u64,
    /// One replica per group, by group index.
    pub(super) groups: Vec<Member<P>>,
    /// Ops (with their group) waiting for the next fsync, and those of the fsync in progress.
    pub(super) disk_queue: Vec<(usize, Op<P>)>,
    pub(super) disk_busy: Vec<(usize, Op<P>)>,
    pub(super) slow_net: u32,
    pub(super) slow_disk: u32,
    /// Crashed for good when the faults heal (to test a cluster that lost replicas).
    pub(super) stays_down: bool,
    /// The process runs nothing before this time (a pause, or the CPU still busy with earlier
    /// messages under the cost model): its events wait, in order.
    pub(super) busy_until: TimeUs,
    /// Events that arrived while the node was busy, oldest first, and whether a wake-up is
    /// scheduled to run them.
    pub(super) backlog: std::collections::VecDeque<super::Ev<P::Message>>,
    pub(super) wake_pending: bool,
    /// When its network interface is free to send again (per-NIC bandwidth).
    pub(super) nic_free_at: TimeUs,
    /// The node's own clock, which its cores read (skew and drift).
    pub(super) clock: Clock,
    /// The fault behind the disk's misbehaviour, if any.
    pub(super) disk_fault: DiskFault,
    /// Writes the disk reported durable but kept in its cache (a lying disk): lost on a crash.
    pub(super) volatile: Vec<(usize, Op<P>)>,
}

impl<P: Protocol> Node<P> {
    pub(super) fn new(id: NodeId, groups: usize, clock: Clock, stays_down: bool) -> Self {
        Node {
            id,
            up: false,
            incarnation: 0,
            groups: (0..groups).map(|_| Member::new()).collect(),
            disk_queue: Vec::new(),
            disk_busy: Vec::new(),
            slow_net: 1,
            slow_disk: 1,
            stays_down,
            busy_until: 0,
            backlog: std::collections::VecDeque::new(),
            wake_pending: false,
            nic_free_at: 0,
            clock,
            disk_fault: DiskFault::None,
            volatile: Vec::new(),
        }
    }

    /// A crash or a start: everything not durable is gone, and events of the previous
    /// incarnation (disk completions, timers, flushes) no longer apply.
    pub(super) fn new_incarnation(&mut self) {
        self.incarnation += 1;
        self.disk_queue.clear();
        self.disk_busy.clear();
        self.busy_until = 0;
        // What waited for the CPU dies with the process (a pending wake-up finds nothing).
        self.backlog.clear();
        self.wake_pending = false;
        for m in &mut self.groups {
            m.submits.clear();
            m.flush_pending = false;
            m.timer_at = None;
            m.role = Role::Electing;
        }
    }
}

/// A node's clock: local = anchor_local + (global − anchor_global) × rate_ppm / 10⁶.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    anchor_global: TimeUs,
    anchor_local: TimeUs,
    rate_ppm: u64,
    /// The node's steady rate (drift), to which a clock-drift fault returns.
    pub(super) base_ppm: u64,
}

impl Clock {
    pub(super) fn new(offset_us: TimeUs, rate_ppm: u64) -> Self {
        Clock {
            anchor_global: 0,
            anchor_local: offset_us,
            rate_ppm: rate_ppm.max(1),
            base_ppm: rate_ppm.max(1),
        }
    }

    pub(super) fn local(&self, global: TimeUs) -> TimeUs {
        let d = global.saturating_sub(self.anchor_global) as u128;
        self.anchor_local + (d * self.rate_ppm as u128 / 1_000_000) as TimeUs
    }

    /// The first global time at which the local clock reads at least `local`.
    pub(super) fn global(&self, local: TimeUs) -> TimeUs {
        let d = local.saturating_sub(self.anchor_local) as u128;
        let rate = self.rate_ppm as u128;
        let elapsed = (d.saturating_mul(1_000_000).div_ceil(rate)).min(u64::MAX as u128 / 4);
        self.anchor_global.saturating_add(elapsed as TimeUs)
    }

    /// Change the rate from `now` on, keeping the clock continuous (and so monotonic).
    pub(super) fn set_rate(&mut self, now: TimeUs, rate_ppm: u64) {
        self.anchor_local = self.local(now);
        self.anchor_global = now;
        self.rate_ppm = rate_ppm.max(1);
    }
}

/// What the disk of a node does wrong at the moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DiskFault {
    None,
    /// The next fsync fails with EIO: the process stops (fail-stop on a write error).
    Eio,
    /// fsync returns before the data is on the medium: a crash loses it.
    Lying,
}

#[cfg(test)]
mod tests {
    use super::Clock;

    #[test]
    fn a_clock_is_monotonic_and_inverts_through_rate_changes() {
        let mut c = Clock::new(7_000_000, 1_000_500);
        assert_eq!(c.local(0), 7_000_000);
        assert_eq!(c.local(1_000_000), 8_000_500);
        // global() is the first instant the local clock reaches the time asked for.
        for l in [7_000_000, 7_000_001, 8_000_500, 9_123_456] {
            let g = c.global(l);
            assert!(c.local(g) >= l && (g == 0 || c.local(g - 1) < l), "{l} {g}");
        }
        let before = c.local(2_000_000);
        c.set_rate(2_000_000, 4_000_000); // four times fast
        assert_eq!(c.local(2_000_000), before);
        assert_eq!(c.local(2_000_010), before + 40);
        c.set_rate(3_000_000, 250_000); // four times slow
        assert!(c.local(3_000_004) > c.local(3_000_000));
        let l = c.local(3_000_000) + 1;
        assert_eq!(c.global(l), 3_000_004);
    }
}

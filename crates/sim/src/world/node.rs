//! A simulated node: one process with its disk, clock, network interface and CPU, running the
//! node's host (crates/host) with one replica of every group ([`Member`]). The groups share the
//! disk (one fsync serves all of them), the network interface and the CPU, exactly as in the
//! server: the host is the same code.

use super::{Durable, Token};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::sync::{Arc, Mutex};
use synod_core::wire::{get_bytes, get_count, get_u64, WireError, MAX_BYTES};
use synod_core::{
    Command, GroupMessage, NodeId, Position, Protocol, Role, Snapshot, StateMachine, TimeUs, View,
};
use synod_host::register::Register;
use synod_host::Host;
use synod_log::WalOp;

/// The checkers' window on a group's state machine, wrapping the real one: the ids of the
/// commands it applied, in slot order, carried in its snapshots (so that a restored snapshot
/// can be compared with the history), beside the real machine's own state.
pub(crate) struct Recorder {
    pub(crate) ids: Vec<u64>,
    last_tag: u64,
    inner: Box<dyn StateMachine>,
}

impl Recorder {
    pub(crate) fn new(inner: Box<dyn StateMachine>) -> Self {
        Recorder {
            ids: Vec::new(),
            last_tag: 0,
            inner,
        }
    }

    /// The ids a snapshot of a recorder holds.
    pub(crate) fn ids_of(s: &Snapshot) -> Result<Vec<u64>, WireError> {
        let mut b = s.data.clone();
        let n = get_count(&mut b, "ids", 8)?;
        (0..n).map(|_| get_u64(&mut b)).collect()
    }
}

impl StateMachine for Recorder {
    fn apply(&mut self, at: Position, command: &Command, out: &mut Vec<GroupMessage>) -> Bytes {
        if self.ids.len() as u64 + 1 == at.slot {
            self.ids.push(command.id);
            self.last_tag = at.tag;
        }
        self.inner.apply(at, command, out)
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        let ids = self.ids.clone();
        let inner = self.inner.snapshot_view();
        Box::new(move || {
            let data = inner();
            let mut b = BytesMut::with_capacity(8 + ids.len() * 8 + data.len());
            b.put_u32(ids.len() as u32);
            for id in ids {
                b.put_u64(id);
            }
            b.put_u32(data.len() as u32);
            b.put_slice(&data);
            b.freeze()
        })
    }

    fn restore(&mut self, s: &Snapshot) -> Result<(), WireError> {
        let mut b = s.data.clone();
        let n = get_count(&mut b, "ids", 8)?;
        let ids = (0..n)
            .map(|_| get_u64(&mut b))
            .collect::<Result<Vec<_>, _>>()?;
        let data = get_bytes(&mut b, "machine", MAX_BYTES)?;
        if b.has_remaining() {
            return Err(WireError::Trailing(b.remaining()));
        }
        self.inner.restore(&Snapshot { at: s.at, data })?;
        self.ids = ids;
        self.last_tag = s.at.tag;
        Ok(())
    }

    fn applied(&self) -> Position {
        Position {
            slot: self.ids.len() as u64,
            tag: self.last_tag,
        }
    }

    fn digest(&self) -> u64 {
        self.inner.digest()
    }

    fn pending(&self, out: &mut Vec<GroupMessage>) {
        self.inner.pending(out)
    }
}

/// A state machine that keeps nothing: the protocols' own checks run over opaque payloads, and
/// the recorder around it is the whole state.
#[derive(Default)]
pub(crate) struct Vacant {
    applied: Position,
}

impl StateMachine for Vacant {
    fn apply(&mut self, at: Position, _: &Command, _: &mut Vec<GroupMessage>) -> Bytes {
        self.applied = at;
        Bytes::new()
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        Box::new(Bytes::new)
    }

    fn restore(&mut self, s: &Snapshot) -> Result<(), WireError> {
        self.applied = s.at;
        Ok(())
    }

    fn applied(&self) -> Position {
        self.applied
    }

    fn digest(&self) -> u64 {
        0
    }
}

/// A machine the simulator also reads from outside (the register app's checks): the host's
/// group applies to it through this handle, the checkers read it through theirs.
pub(crate) struct Shared<S>(pub(crate) Arc<Mutex<S>>);

impl<S: StateMachine> StateMachine for Shared<S> {
    fn apply(&mut self, at: Position, command: &Command, out: &mut Vec<GroupMessage>) -> Bytes {
        self.0.lock().expect("machine").apply(at, command, out)
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        self.0.lock().expect("machine").snapshot_view()
    }

    fn restore(&mut self, s: &Snapshot) -> Result<(), WireError> {
        self.0.lock().expect("machine").restore(s)
    }

    fn applied(&self) -> Position {
        self.0.lock().expect("machine").applied()
    }

    fn digest(&self) -> u64 {
        self.0.lock().expect("machine").digest()
    }

    fn pending(&self, out: &mut Vec<GroupMessage>) {
        self.0.lock().expect("machine").pending(out)
    }
}

/// A node's replica of one group, as the simulator sees it from outside the host.
pub(super) struct Member<P: Protocol> {
    /// What the node's disk holds for the group: its ops as the log encoded them, decoded and
    /// applied as they land.
    pub(super) durable: Durable<P>,
    /// The group's state machine in the running host (replaced at every start).
    pub(super) machine: Arc<Mutex<Recorder>>,
    /// With the register app: the register machine inside it.
    pub(super) register: Option<Arc<Mutex<Register>>>,
    /// With the SconeKV app: the bucket inside it.
    pub(super) kv: Option<Arc<Mutex<synod_kv::KvMachine>>>,
    /// With the ZooKeeper app: the tree inside it.
    pub(super) zk: Option<Arc<Mutex<synod_zk::group::ZooKeeper>>>,
    /// With the etcd app: the store inside it.
    pub(super) etcd: Option<Arc<Mutex<synod_etcd::EtcdMachine>>>,
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
    pub(super) fn new(m: super::replicas::Machines) -> Self {
        Member {
            durable: Default::default(),
            machine: m.recorder,
            register: m.register,
            kv: m.kv,
            zk: m.zk,
            etcd: m.etcd,
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

    /// The ids the group's machine applied, in slot order.
    pub(super) fn ids(&self) -> Vec<u64> {
        self.machine.lock().expect("machine").ids.clone()
    }

    pub(super) fn applied_count(&self) -> u64 {
        self.machine.lock().expect("machine").ids.len() as u64
    }

    /// The machine's applied count and digest.
    pub(super) fn digest(&self) -> (u64, u64) {
        let m = self.machine.lock().expect("machine");
        (m.ids.len() as u64, m.digest())
    }

    /// Messages to other groups the register machine holds unacknowledged (0 for other apps).
    pub(super) fn unacknowledged(&self) -> usize {
        self.register
            .as_ref()
            .map_or(0, |r| r.lock().expect("register").unacknowledged())
    }
}

pub(super) struct Node<P: Protocol> {
    pub(super) id: NodeId,
    /// The process runs.
    pub(super) up: bool,
    pub(super) incarnation: u64,
    /// The node's host, while it runs (and briefly out while it is driven).
    pub(super) host: Option<Host<Token>>,
    /// One replica per group, by group index.
    pub(super) groups: Vec<Member<P>>,
    /// Ops waiting for the next fsync, and those of the fsync in progress (the log's ops of
    /// every group, with their group's sequence number).
    pub(super) disk_queue: Vec<(u64, WalOp)>,
    pub(super) disk_busy: Vec<(u64, WalOp)>,
    /// The time of the timer event scheduled for the host, if any.
    pub(super) timer_at: Option<TimeUs>,
    /// A flush of the host's queued commands is scheduled.
    pub(super) flush_pending: bool,
    /// Bytes of the client requests received since the last flush (the cost model charges
    /// them to the flush).
    pub(super) requests: Vec<usize>,
    pub(super) slow_net: u32,
    pub(super) slow_disk: u32,
    /// Crashed for good when the faults heal (to test a cluster that lost replicas).
    pub(super) stays_down: bool,
    /// The process runs nothing before this time (a pause, or the CPU still busy with earlier
    /// messages under the cost model): its events wait, in order.
    pub(super) busy_until: TimeUs,
    /// Events that arrived while the node was busy, oldest first, and whether a wake-up is
    /// scheduled to run them.
    pub(super) backlog: std::collections::VecDeque<super::Ev>,
    pub(super) wake_pending: bool,
    /// When its network interface is free to send again (per-NIC bandwidth).
    pub(super) nic_free_at: TimeUs,
    /// The node's own clock, which its cores read (skew and drift).
    pub(super) clock: Clock,
    /// The fault behind the disk's misbehaviour, if any.
    pub(super) disk_fault: DiskFault,
    /// Writes the disk reported durable but kept in its cache (a lying disk): lost on a crash.
    pub(super) volatile: Vec<(u64, WalOp)>,
}

impl<P: Protocol> Node<P> {
    pub(super) fn new(
        id: NodeId,
        machines: Vec<super::replicas::Machines>,
        clock: Clock,
        stays_down: bool,
    ) -> Self {
        Node {
            id,
            up: false,
            incarnation: 0,
            host: None,
            groups: machines.into_iter().map(Member::new).collect(),
            disk_queue: Vec::new(),
            disk_busy: Vec::new(),
            timer_at: None,
            flush_pending: false,
            requests: Vec::new(),
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
        self.host = None;
        self.disk_queue.clear();
        self.disk_busy.clear();
        self.busy_until = 0;
        self.timer_at = None;
        self.flush_pending = false;
        self.requests.clear();
        // What waited for the CPU dies with the process (a pending wake-up finds nothing).
        self.backlog.clear();
        self.wake_pending = false;
        for m in &mut self.groups {
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

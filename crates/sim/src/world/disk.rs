//! The simulated disk of a node, shared by its groups: group commit (an idle disk starts one
//! fsync covering every op queued, of every group), a random fsync latency, a crash that loses
//! every op not yet durable (or lands part of the fsync in progress), EIO, and a lying cache.

use super::node::DiskFault;
use super::{Ev, World};
use crate::check::Checker;
use synod_core::StorageOp;
use synod_host::Hosted;
use synod_log::WalOp;

impl<P: Hosted> World<P> {
    pub(super) fn kick_disk(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if !n.disk_busy.is_empty() || n.disk_queue.is_empty() {
            return;
        }
        // Group commit: one fsync covers every op queued while the previous one ran, of
        // every group on the node.
        std::mem::swap(&mut n.disk_busy, &mut n.disk_queue);
        let slow = n.slow_disk as u64;
        let inc = n.incarnation;
        let lat = self.rand_between(self.cfg.disk.fsync_min_us, self.cfg.disk.fsync_max_us) * slow;
        let now = self.now;
        self.at(
            now + lat,
            Ev::DiskDone {
                node: i,
                incarnation: inc,
            },
        );
    }

    pub(super) fn disk_done(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        // The highest op of each group in this fsync.
        let mut upto: Vec<(synod_core::GroupId, u64)> = Vec::new();
        for (seq, op) in &n.disk_busy {
            match upto.iter_mut().find(|(g, _)| *g == op.group) {
                Some(e) => e.1 = e.1.max(*seq),
                None => upto.push((op.group, *seq)),
            }
        }
        match n.disk_fault {
            DiskFault::Eio => {
                // fsync failed: the process cannot know what landed (part of it may have), and
                // stops rather than carry on with a page cache it cannot trust.
                n.disk_fault = DiskFault::None;
                *self.report.faults.entry("eio-stop").or_default() += 1;
                let id = n.id;
                self.tracef(|| format!("n{id} fsync fails (EIO): the process stops"));
                self.crash_node(i);
                return;
            }
            DiskFault::Lying => {
                // Reported durable, kept in the disk's cache.
                n.volatile.append(&mut n.disk_busy);
            }
            DiskFault::None => {
                let ops: Vec<(u64, WalOp)> =
                    n.volatile.drain(..).chain(n.disk_busy.drain(..)).collect();
                for (_, op) in ops {
                    self.land(i, &op);
                }
            }
        }
        let now = self.local_now(i);
        // Each replica releases what waited for this write (in order), then learns of it.
        self.with_host(i, |h| h.durable(now, &upto));
        self.kick_disk(i);
    }

    /// One op reaches the medium, as the log encoded it: decoded with the group's codec and
    /// applied to what the disk holds for the group. Once a replica that lost state has written
    /// its hard state again (recording that it is recovering), the driver no longer needs to
    /// report the loss.
    fn land(&mut self, i: usize, op: &WalOp) {
        let g = op.group as usize;
        let decoded = match synod_log::typed::decode::<P::Record, P::Hard>(op) {
            Ok(d) => d,
            Err(e) => {
                let now = self.now;
                let id = self.nodes[i].id;
                let h = g.min(self.histories.len() - 1);
                self.histories[h].violate(
                    Checker::Codec,
                    now,
                    format!("n{id} wrote a storage op of group {g} its own codec cannot read: {e}"),
                );
                return;
            }
        };
        let hard = matches!(decoded, StorageOp::SetHard(_));
        let d = &mut self.nodes[i].groups[g].durable;
        d.apply_owned(decoded);
        if hard {
            d.lost = false;
        }
    }
}

impl<P: Hosted> World<P> {
    /// A crash during an fsync: with torn writes on, a random prefix of the group commit in
    /// progress reached the medium (each op is one checksummed log record, so a record lands
    /// whole or not at all). Nothing acknowledged depends on it: the replica was never told.
    pub(super) fn land_torn_write(&mut self, i: usize) {
        if !self.cfg.disk.torn_writes
            || self.nodes[i].disk_busy.is_empty()
            || self.nodes[i].disk_fault == DiskFault::Lying
        {
            return; // (a lying disk's writes sit in its cache, which the crash loses)
        }
        let len = self.nodes[i].disk_busy.len() as u64;
        let landed = self.rand_between(0, len) as usize;
        if landed == 0 {
            return;
        }
        *self.report.faults.entry("torn-write").or_default() += 1;
        let ops: Vec<(u64, WalOp)> = self.nodes[i].disk_busy.drain(..landed).collect();
        for (_, op) in ops {
            self.land(i, &op);
        }
    }
}

//! The simulated disk of a node, shared by its groups: group commit (an idle disk starts one
//! fsync covering every op queued, of every group), a random fsync latency, a crash that loses
//! every op not yet durable (or lands part of the fsync in progress), EIO, and a lying cache.

use super::node::DiskFault;
use super::{Ev, Op, World};
use synod_core::{Protocol, StorageOp};

impl<P: Protocol> World<P> {
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
        let mut upto: Vec<Option<u64>> = vec![None; n.groups.len()];
        for (g, p) in &n.disk_busy {
            upto[*g] = Some(p.seq);
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
                let ops: Vec<(usize, Op<P>)> =
                    n.volatile.drain(..).chain(n.disk_busy.drain(..)).collect();
                for (g, p) in ops {
                    self.land(i, g, &p);
                }
            }
        }
        let now = self.local_now(i);
        // Each replica releases what waited for this write (in order), then learns of it.
        for (g, upto) in upto.into_iter().enumerate() {
            if let Some(upto) = upto {
                self.with_replica(i, g, |r, env| r.durable(now, upto, env));
            }
        }
        self.kick_disk(i);
    }

    /// One op reaches the medium. Once a replica that lost state has written its hard state
    /// again (recording that it is recovering), the driver no longer needs to report the loss.
    fn land(&mut self, i: usize, g: usize, p: &Op<P>) {
        let d = &mut self.nodes[i].groups[g].durable;
        d.apply(&p.op);
        if matches!(p.op, StorageOp::SetHard(_)) {
            d.lost = false;
        }
    }
}

impl<P: Protocol> World<P> {
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
        let ops: Vec<(usize, Op<P>)> = self.nodes[i].disk_busy.drain(..landed).collect();
        for (g, p) in ops {
            self.land(i, g, &p);
        }
    }
}

//! The simulated disk: group commit (an idle disk starts one fsync covering every op queued),
//! a random fsync latency, and a crash that loses every op not yet durable.

use super::{Ev, World};
use synod_core::Protocol;

impl<P: Protocol> World<P> {
    pub(super) fn kick_disk(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if !n.disk_busy.is_empty() || n.disk_queue.is_empty() {
            return;
        }
        // Group commit: one fsync covers every op queued while the previous one ran.
        std::mem::swap(&mut n.disk_busy, &mut n.disk_queue);
        let upto = n.disk_busy.last().expect("non-empty").seq;
        let slow = n.slow_disk as u64;
        let inc = n.incarnation;
        let lat = self.rand_between(self.cfg.disk.fsync_min_us, self.cfg.disk.fsync_max_us) * slow;
        let now = self.now;
        self.at(
            now + lat,
            Ev::DiskDone {
                node: i,
                incarnation: inc,
                upto,
            },
        );
    }

    pub(super) fn disk_done(&mut self, i: usize, upto: u64) {
        let n = &mut self.nodes[i];
        for p in n.disk_busy.drain(..) {
            n.durable.apply(&p.op);
        }
        let now = self.now;
        // The replica releases what waited for this write (in order), then learns of it.
        self.with_replica(i, |r, env| r.durable(now, upto, env));
        self.kick_disk(i);
    }
}

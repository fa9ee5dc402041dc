//! Durability by restart: at the end of every run, every replica is restarted from its disk
//! image alone (what it made durable; nothing in memory, nothing in flight), on a healed
//! network and with no clients, and must recover every slot ever delivered anywhere. Unlike
//! the end-of-run durability check, this one holds whether or not a majority was up at the end,
//! and it is what catches a disk that lost acknowledged writes.

use super::World;
use synod_host::Hosted;

impl<P: Hosted> World<P> {
    pub(super) fn restart_from_disk(&mut self) {
        let expected: Vec<u64> = self.histories.iter().map(|h| h.max_slot()).collect();
        self.tracef(|| format!("RESTART EVERY REPLICA FROM DISK (history: {expected:?} slots)"));
        // Stop the clients and forget every pending event: messages, timers, disk completions
        // and faults belong to processes that are about to die.
        self.queue.clear();
        self.workload_end = self.now;
        for i in 0..self.nodes.len() {
            self.crash_node(i);
        }
        // Every connection died with its node (`crash_node`), and nothing is in flight.
        for link in &mut self.links {
            link.blocked = 0;
        }
        for n in &mut self.nodes {
            n.stays_down = false;
            n.slow_net = 1;
            n.slow_disk = 1;
            n.disk_fault = super::node::DiskFault::None;
            n.busy_until = 0;
            let base = n.clock.base_ppm;
            n.clock.set_rate(self.now, base);
        }
        for i in 0..self.nodes.len() {
            self.start_node(i);
        }
        let deadline = self.now + 2 * self.cfg.liveness_bound_us.max(2_000_000);
        // Every replica must reach the whole history: what was delivered before the restart, and
        // what the machines' resent messages to other groups add after it.
        // (Of the members of each group's last configuration: a removed node keeps what it had.)
        let members: Vec<Vec<synod_core::NodeId>> = (0..self.histories.len())
            .map(|g| self.final_members(g))
            .collect();
        let recovered = |w: &Self| {
            w.nodes.iter().all(|n| {
                n.groups
                    .iter()
                    .zip(&expected)
                    .zip(&w.histories)
                    .zip(&members)
                    .all(|(((m, &e), h), ms)| {
                        !ms.contains(&n.id) || m.applied_count() >= e.max(h.max_slot())
                    })
            })
        };
        if !recovered(self) {
            self.drive(deadline, recovered);
        }
        let now = self.now;
        for i in 0..self.nodes.len() {
            let id = self.nodes[i].id;
            for (g, ms) in members.iter().enumerate() {
                if ms.contains(&id) {
                    let ids = self.nodes[i].groups[g].ids();
                    self.histories[g].recovered(now, id, &ids);
                }
            }
        }
    }
}

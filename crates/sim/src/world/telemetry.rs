//! What the hosts count for the simulator's report: messages received and sent by the role of
//! the replica at that moment (and received by kind), and the batches handed to the cores. One
//! set of counts for the whole world, shared by every node's host.

use super::{role_index, RoleCounts};
use std::sync::{Arc, Mutex};
use synod_core::{GroupId, Role};
use synod_host::Telemetry;

pub(super) struct SimTelemetry(pub(super) Arc<Mutex<RoleCounts>>);

impl Telemetry for SimTelemetry {
    fn batch(&mut self, _: GroupId, _: usize) {
        self.0.lock().expect("counts").batches += 1;
    }

    fn received(&mut self, _: GroupId, role: Role, kind: &'static str, _: usize) {
        let mut c = self.0.lock().expect("counts");
        let r = role_index(role);
        c.msgs_in[r] += 1;
        c.kind_in(r, kind);
    }

    fn sent(&mut self, _: GroupId, role: Role, _: &'static str, copies: usize, _: usize) {
        self.0.lock().expect("counts").msgs_out[role_index(role)] += copies as u64;
    }
}

//! The thesis's testbed (zab.md §8.2–8.3) as a simulator configuration, shared by
//! `synod sim --experiment thesis` and the tests of the Zab variants' behaviour.

use synod_sim::{CostModel, DiskModel, FaultSet, NetModel, SimConfig};

/// The per-message CPU cost that reproduces the thesis's testbed (JGroups over UDP, Java, a
/// 2.8 GHz Core i7): calibrated so that Zab at N = 3, WR = 100 %, 250 clients with zero wait
/// delivers about the 4046 abds/s of [T] Fig 5.11 (and ZabCT_u's followers measure d close to
/// the 13–18 ms of its Tables F.1/F.9). `synod sim --experiment thesis --cost R,S,B` tries others.
pub fn thesis_cost() -> CostModel {
    CostModel {
        receive_ns: 30_000,
        send_ns: 30_000,
        byte_ns: 0,
    }
}

/// A 100 Mbit/s switched Ethernet LAN, one NIC per node, a few hundred µs a hop before
/// queueing: the testbed of both theses (zab.md §8.2, pft.md §5.1).
pub fn lan_100mbit() -> NetModel {
    NetModel {
        latency_min_us: 100,
        latency_max_us: 300,
        bandwidth_bytes_per_s: 12_500_000,
        wan: None,
    }
}

/// The thesis's testbed (zab.md §8.2–8.3): 100 Mbit/s switched Ethernet (one NIC per node),
/// JGroups over UDP (a few hundred µs a hop before queueing), 1 KB requests, 250 closed-loop
/// clients sending each request to the next server in turn, zero wait or a wait uniform on
/// (25, 75) ms, proposals logged in memory only ("Net-Only"), one request per proposal, and a
/// CPU cost per message.
pub fn testbed(n: usize, wr: u32, wait: bool, clients: usize, cost: &CostModel) -> SimConfig<()> {
    let mut cfg = SimConfig::new(n, 0, ());
    cfg.faults = FaultSet::none();
    cfg.net = lan_100mbit();
    cfg.disk = DiskModel {
        fsync_min_us: 1,
        fsync_max_us: 5,
        torn_writes: true,
    };
    cfg.cost = cost.clone();
    cfg.workload.clients = clients;
    cfg.workload.round_robin = true;
    if wait {
        cfg.workload.think_us = 25_000;
        cfg.workload.think_max_us = 75_000;
    } else {
        cfg.workload.think_us = 0;
    }
    cfg.workload.payload_bytes = 1000;
    cfg.workload.write_ratio = wr as f64 / 100.0;
    cfg.workload.client_timeout_us = 10_000_000;
    cfg.fault_window_us = 10_000_000;
    // Measured over 2.5 s after a 1.5 s warm-up (the thesis measured after one): election,
    // and ZabCT's first computation of p at the end of its first one-second window.
    cfg.run_for_us = Some(4_000_000);
    cfg.warmup_us = 1_500_000;
    cfg.snapshot_every = 0;
    // A measurement: the safety checkers run on every delivery, the restart from disk at the
    // end is left to the sweeps.
    cfg.restart_check = false;
    // The thesis's protocols propose one request at a time.
    cfg.batch_commands = 1;
    cfg
}

/// The thesis's failure detector is JGroups' (FD_ALL: 40 s by default, zab.md §8.1); under a
/// CPU-bound leader our LAN defaults (400 ms) would elect again for nothing.
pub fn jgroups_timeouts(o: &mut synod_zab::Options) {
    o.heartbeat_us = 200_000;
    o.follower_timeout_us = 2_000_000;
    o.leader_timeout_us = 2_000_000;
}

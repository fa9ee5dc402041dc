//! Every fault of the simulator happens when asked for (the run's report counts it), Zab
//! survives those within its assumptions, and the checkers catch the loss that the faults
//! beyond them cause (docs/simulator.md lists each fault with the assumption it encodes).

mod common;

use common::{assert_clean, fired, threads};
use synod_protocols::{run_named_one, run_named_seeds};
use synod_sim::faults::Scripted;
use synod_sim::{Checker, CostModel, FaultKind, FaultSet, NetModel, Report, SimConfig, Wan};

fn only(kinds: &str) -> SimConfig<()> {
    let mut cfg = SimConfig::new(3, 0, ());
    cfg.faults = kinds.parse::<FaultSet>().unwrap();
    cfg.fault_window_us = 3_000_000;
    cfg
}

fn sweep(cfg: &SimConfig<()>, seeds: std::ops::Range<u64>) -> Report {
    run_named_seeds("zab", cfg, seeds, threads()).unwrap()
}

fn count(r: &Report, what: &str) -> u64 {
    r.faults.get(what).copied().unwrap_or(0)
}

fn script(kind: FaultKind, start_ms: u64, end_ms: u64, targets: Vec<usize>) -> Scripted {
    Scripted {
        kind,
        start_us: start_ms * 1_000,
        end_us: end_ms * 1_000,
        targets,
        factor: 10,
    }
}

#[test]
fn pauses_happen_and_zab_survives_them() {
    let r = sweep(&only("pause"), 0..60);
    assert_clean(&r);
    assert!(count(&r, "pause") > 60, "{:?}", r.faults);
}

#[test]
fn clock_drift_and_skew_happen_and_zab_survives_them() {
    let mut cfg = only("clock-drift,crash");
    cfg.clock.max_offset_us = 30_000_000;
    cfg.clock.max_drift_ppm = 100_000; // 10 %: far beyond a real crystal
    let r = sweep(&cfg, 0..60);
    assert_clean(&r);
    assert!(count(&r, "clock-drift") > 30, "{:?}", r.faults);
}

#[test]
fn a_fast_clock_makes_a_follower_suspect_a_healthy_leader() {
    // The same run with and without a follower's clock at ten times speed: its timeouts fire
    // early, it leaves a leader that is fine, and more elections happen; nothing is unsafe.
    // No clients: the follower hears only the leader's heartbeats (every 50 ms), and its
    // 400 ms timeout runs out in 40 ms at ten times speed.
    let mut cfg = only("none");
    cfg.clock.max_drift_ppm = 0;
    cfg.workload.clients = 0;
    cfg.workload.liveness_commands = 0;
    cfg.script = vec![Scripted {
        factor: 8, // even: fast, by 2 + 8 mod 9 = 10 times
        ..script(FaultKind::ClockDrift, 500, 2_500, vec![0])
    }];
    let base = {
        let mut c = cfg.clone();
        c.script.clear();
        run_named_one("zab", &c).unwrap().0
    };
    let (drift, _) = run_named_one("zab", &cfg).unwrap();
    assert!(drift.violations.is_empty(), "{:?}", drift.violations);
    let electing = |r: &Report| r.msgs_out.get("electing").copied().unwrap_or(0);
    assert!(
        electing(&drift) > electing(&base),
        "election messages: {} with the fast clock, {} without",
        electing(&drift),
        electing(&base)
    );
}

#[test]
fn disk_errors_stop_the_process_and_zab_survives_them() {
    let r = sweep(&only("disk-error"), 0..60);
    assert_clean(&r);
    assert!(count(&r, "disk-error") > 60, "{:?}", r.faults);
    assert!(count(&r, "eio-stop") > 30, "{:?}", r.faults);
}

#[test]
fn crashes_during_an_fsync_land_torn_writes_and_lose_nothing() {
    let mut cfg = only("crash");
    cfg.workload.clients = 16;
    cfg.workload.think_us = 0;
    let r = sweep(&cfg, 0..60);
    assert_clean(&r);
    assert!(count(&r, "torn-write") > 10, "{:?}", r.faults);
}

#[test]
fn replayed_connections_deliver_late_and_twice_and_zab_survives_them() {
    let mut cfg = only("replay,crash");
    cfg.workload.clients = 16;
    cfg.workload.think_us = 0;
    let r = sweep(&cfg, 0..50);
    assert_clean(&r);
    assert!(count(&r, "replay") > 50, "{:?}", r.faults);
    assert!(count(&r, "replayed-message") > 50, "{:?}", r.faults);
}

#[test]
fn a_corrupt_record_or_a_wiped_disk_on_one_replica_is_recovered_from_its_peers() {
    let mut cfg = only("corrupt,wipe,crash");
    cfg.workload.clients = 16;
    cfg.workload.think_us = 0;
    let r = sweep(&cfg, 0..50);
    assert_clean(&r);
    assert!(count(&r, "corrupt") > 25, "{:?}", r.faults);
    assert!(count(&r, "wipe") > 25, "{:?}", r.faults);
}

/// A lying disk on a majority (fsync returns before the data is safe) while the third
/// replica is down: the majority acknowledges writes, then crashes and loses them. Beyond the
/// assumptions; the crash-tolerance checker sees it at delivery, and without it the
/// durability and recovery checkers see the loss.
#[test]
fn a_lying_disk_on_a_majority_loses_writes_and_the_checkers_catch_it() {
    let mut cfg = only("none");
    cfg.workload.clients = 8;
    cfg.script = vec![
        script(FaultKind::Crash, 300, 2_600, vec![2]),
        script(FaultKind::LyingDisk, 500, 2_000, vec![0, 1]),
    ];
    let r = sweep(&cfg, 0..5);
    assert!(
        fired(&r).contains(&Checker::CrashTolerance),
        "{:?}",
        fired(&r)
    );
    cfg.disabled = vec![Checker::CrashTolerance];
    let r = sweep(&cfg, 0..5);
    let f = fired(&r);
    // The new leader reuses the lost slots for other commands (agreement), or nobody holds
    // them at the end (durability, recovery).
    assert!(
        [Checker::Agreement, Checker::Durability, Checker::Recovery]
            .iter()
            .any(|c| f.contains(c)),
        "{f:?}"
    );
    assert!(count(&r, "lying-disk") == 5, "{:?}", r.faults);
    // The same schedule with honest disks loses nothing.
    cfg.script[1].kind = FaultKind::SlowDisk;
    cfg.disabled.clear();
    assert_clean(&sweep(&cfg, 0..5));
}

/// Wiping the disks of a majority while the third replica is down: what only they held is
/// gone. The recovery checker (every replica restarted from its disk) catches it.
#[test]
fn wiping_a_majority_loses_writes_and_the_checkers_catch_it() {
    let mut cfg = only("none");
    cfg.workload.clients = 8;
    cfg.script = vec![
        script(FaultKind::Crash, 300, 2_600, vec![2]),
        script(FaultKind::WipeMajority, 1_500, 2_000, vec![0, 1]),
    ];
    let r = sweep(&cfg, 0..5);
    assert!(fired(&r).contains(&Checker::Recovery), "{:?}", fired(&r));
    assert_eq!(count(&r, "wipe-majority"), 5, "{:?}", r.faults);
}

/// The recovery checker runs even when a majority is down at the end (the end-of-run
/// durability check cannot), and without it a lost write goes unnoticed: the two replicas
/// that held the writes lose them (their disks lied) as the faults heal and stay down; the
/// third never saw them.
#[test]
fn the_recovery_checker_is_what_sees_a_loss_when_a_majority_stays_down() {
    let mut cfg = only("none");
    cfg.workload.clients = 8;
    cfg.stay_down = 2;
    cfg.script = vec![
        script(FaultKind::Crash, 300, 3_000, vec![2]),
        script(FaultKind::LyingDisk, 500, 3_000, vec![0, 1]),
    ];
    cfg.disabled = vec![Checker::CrashTolerance, Checker::Liveness];
    let r = sweep(&cfg, 0..3);
    assert!(fired(&r).contains(&Checker::Recovery), "{:?}", fired(&r));
    cfg.restart_check = false;
    let r = sweep(&cfg, 0..3);
    assert!(!fired(&r).contains(&Checker::Recovery), "{:?}", fired(&r));
    assert!(!fired(&r).contains(&Checker::Durability), "{:?}", fired(&r));
}

#[test]
fn the_cost_model_slows_a_saturated_cluster_and_messages_are_not_free() {
    let mut cfg = only("none");
    cfg.workload.clients = 32;
    cfg.workload.think_us = 0;
    cfg.run_for_us = Some(1_000_000);
    let free = run_named_one("zab", &cfg).unwrap().0;
    cfg.cost = CostModel {
        receive_ns: 20_000,
        send_ns: 20_000,
        byte_ns: 0,
    };
    let costly = run_named_one("zab", &cfg).unwrap().0;
    assert!(costly.violations.is_empty(), "{:?}", costly.violations);
    assert!(
        costly.completed * 4 < free.completed * 3,
        "20 µs per message: {} commands, free: {}",
        costly.completed,
        free.completed
    );
}

#[test]
fn one_interface_per_node_makes_a_leaders_fan_out_share_its_bandwidth() {
    // 1 KiB commands through a 10 Mbit/s interface: the leader sends each to N − 1 followers
    // over one interface, so five nodes commit fewer commands than three.
    let run = |nodes: usize| {
        let mut cfg = only("none");
        cfg.nodes = nodes;
        cfg.net.bandwidth_bytes_per_s = 1_250_000;
        cfg.workload.clients = 32;
        cfg.workload.think_us = 0;
        cfg.workload.payload_bytes = 1_024;
        cfg.run_for_us = Some(2_000_000);
        run_named_one("zab", &cfg).unwrap().0.completed
    };
    let (three, five) = (run(3), run(5));
    assert!(
        five * 10 < three * 8,
        "three nodes {three}, five nodes {five}"
    );
}

#[test]
fn a_wan_puts_its_latency_on_every_commit() {
    let mut cfg = only("none");
    cfg.net = NetModel::wan(Wan::three_sites(3));
    cfg.workload.clients = 3;
    cfg.liveness_bound_us = 10_000_000;
    let (r, _) = run_named_one("zab", &cfg).unwrap();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // A commit needs a round trip to another site (100 ms), plus a forward for followers.
    let p50 = r.percentile_us(0.5);
    assert!((100_000..400_000).contains(&p50), "p50 {p50} µs");
}

#[test]
fn a_wan_link_that_slows_down_mid_run_slows_the_commits() {
    let text =
        "node 1 A\nnode 2 B\nnode 3 C\nlink * * 10ms 100mbps\nat 1s link * * 100ms 100mbps\n";
    let wan = Wan::parse(text, 3).unwrap();
    let mut cfg = only("none");
    cfg.net = NetModel::wan(wan);
    cfg.workload.clients = 3;
    cfg.liveness_bound_us = 20_000_000;
    let (r, _) = run_named_one("zab", &cfg).unwrap();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // Early commits take a round trip of 20 ms (40 from a follower), later ones at least 200.
    let h = r.latency.as_ref().unwrap();
    assert!(
        h.min() < 50_000 && h.max() >= 200_000,
        "{} .. {}",
        h.min(),
        h.max()
    );
}

struct NothingInGroupOne;

impl synod_sim::CrossCheck for NothingInGroupOne {
    fn delivered(&mut self, group: usize, node: u32, slot: u64, _: u64) -> Option<String> {
        (group == 1).then(|| format!("n{node} delivered slot {slot} of group 1"))
    }
}

#[test]
fn many_groups_share_the_nodes_and_each_is_checked() {
    let mut cfg = only("crash,partition,disk-error,pause");
    cfg.groups = 3;
    cfg.workload.clients = 9;
    let r = sweep(&cfg, 0..40);
    assert_clean(&r);
    assert!(r.committed > 0);
    // The cross-group hook sees every group's deliveries (a checker that objects to any
    // delivery in group 1 fires, naming it).
    cfg.cross_check = Some(|| Box::new(NothingInGroupOne));
    let r = sweep(&cfg, 0..2);
    assert_eq!(fired(&r), vec![Checker::CrossGroup]);
    assert!(
        r.failures[0].1.detail.starts_with("group 1:"),
        "{}",
        r.failures[0].1
    );
}

#[test]
fn pipelining_sessions_are_ordered_as_submitted_under_every_fault() {
    let mut cfg = only("all");
    cfg.workload.pipeline = 4;
    cfg.workload.clients = 8;
    let r = sweep(&cfg, 0..100);
    assert_clean(&r);
    assert!(r.completed > 100_000, "completed {}", r.completed);
}

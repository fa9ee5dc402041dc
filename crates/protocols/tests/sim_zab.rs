//! Zab in the simulator: every checker over hundreds of seeds with every fault kind, and proof
//! that the checkers catch deliberately broken protocols.

mod common;

use common::{assert_clean, config, fired, sweep};
use synod_protocols::run_named_one;
use synod_sim::{Checker, FaultSet, SimConfig};

#[test]
fn zab_three_nodes_200_seeds_all_faults() {
    let r = sweep("zab", &config(3), 0..200);
    assert_clean(&r);
    assert_eq!(r.runs, 200);
    // The schedule really injected every kind of fault.
    let kinds = synod_sim::FaultKind::ALL.map(|k| k.name());
    for kind in kinds.iter().chain(&["restart"]) {
        assert!(
            r.faults.get(kind).copied().unwrap_or(0) > 20,
            "{kind}: {:?}",
            r.faults
        );
    }
    assert!(r.committed > 100_000, "committed {}", r.committed);
}

#[test]
fn zab_five_nodes_100_seeds_all_faults() {
    let r = sweep("zab", &config(5), 1_000..1_100);
    assert_clean(&r);
}

#[test]
fn zab_seven_nodes_100_seeds_all_faults() {
    let r = sweep("zab", &config(7), 2_000..2_100);
    assert_clean(&r);
}

#[test]
fn each_fault_kind_alone() {
    for kind in synod_sim::FaultKind::ALL.map(|k| k.name()) {
        let mut cfg = config(3);
        cfg.faults = kind.parse().unwrap();
        let r = sweep("zab", &cfg, 0..40);
        assert_clean(&r);
        assert!(
            r.faults.get(kind).copied().unwrap_or(0) >= 40,
            "{kind}: {:?}",
            r.faults
        );
    }
}

/// Seeds that once failed (each fixed by a change to the Zab core) stay in the suite forever.
#[test]
fn regression_seeds() {
    // 43, 83, 166: plan_sync chose a snapshot older than the follower's state; the follower
    //              refused it and the leader re-sent it forever (fixed by exact log matching).
    // 414: a replica that had accepted epoch 3 from a failed candidate could never join the
    //      leader of epoch 3 (fixed: the leader steps down so a higher epoch is chosen).
    // 6 (3 s fault window): a one-way partition dropped a follower's UPTODATE while later
    //      messages passed; it stayed synchronised, acking, and never served (fixed: a
    //      heartbeat of its leader's epoch stands in for the lost UPTODATE).
    for (nodes, seed, window_us) in [
        (3, 43, 4_000_000),
        (3, 83, 4_000_000),
        (3, 166, 4_000_000),
        (3, 414, 4_000_000),
        (3, 6, 3_000_000),
    ] {
        let mut cfg = SimConfig::new(nodes, seed, ());
        cfg.fault_window_us = window_us;
        // The runs as they were found: the fault kinds of that time, exact clocks, no torn
        // writes (each draws from the run's generator and would change the schedule).
        cfg.faults = "crash,partition,one-way,slow-node,slow-disk,link-reset"
            .parse()
            .unwrap();
        cfg.clock.max_offset_us = 0;
        cfg.clock.max_drift_ppm = 0;
        cfg.disk.torn_writes = false;
        let (r, _) = run_named_one("zab", &cfg).unwrap();
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

/// Seeds that failed with the simulator of issue 12 (its full fault set and defaults).
#[test]
#[allow(clippy::single_element_loop)] // the list grows as seeds are found
fn regression_seeds_of_the_full_fault_set() {
    // zab-aa, N = 3, seed 8324: a corrupt record was cut below the replica's snapshot, leaving
    // a snapshot ahead of its log; the leader's older snapshot was refused forever (fixed in
    // the simulator: in the log a snapshot's op follows the records it covers, so a cut
    // falls after it, or takes the snapshot and the group's state with it).
    for (name, nodes, seed) in [("zab-aa", 3, 8324)] {
        let mut cfg = SimConfig::new(nodes, seed, ());
        cfg.faults = FaultSet::all();
        let (r, _) = run_named_one(name, &cfg).unwrap();
        assert!(
            r.violations.is_empty(),
            "{name} seed {seed}: {:?}",
            r.violations
        );
    }
}

/// Seeds that failed on the WAN model (three sites, 50 ms, replayed connections) with one
/// command per proposal.
#[test]
fn regression_seeds_of_the_wan_model() {
    // zab N = 5 seed 160, zab-ct N = 5 seed 49: a late ACKNEWLEADER from an earlier
    // synchronisation of the same epoch (a replayed connection) credited a re-joining follower
    // with the leader's current log, and the leader committed what only two replicas held
    // (fixed: ACKNEWLEADER names the NEWLEADER it answers).
    // zab-ct N = 5 seed 726 (batching on): a follower still synchronising (recovering from a
    // wiped disk) acked the leader's switch to Zab; only a synchronised follower acks now.
    for (name, nodes, seed, batch) in [
        ("zab", 5, 160, 1),
        ("zab-ct", 5, 49, 1),
        ("zab-ct", 5, 726, 512),
    ] {
        let mut cfg = SimConfig::new(nodes, seed, ());
        cfg.faults = FaultSet::all();
        cfg.net = synod_sim::NetModel::wan(synod_sim::Wan::three_sites(nodes));
        cfg.batch_commands = batch;
        let (r, _) = run_named_one(name, &cfg).unwrap();
        assert!(
            r.violations.is_empty(),
            "{name} seed {seed}: {:?}",
            r.violations
        );
    }
}

#[test]
fn same_seed_same_run() {
    let mut cfg = config(5);
    cfg.seed = 7;
    cfg.trace = true;
    let (a, ta) = run_named_one("zab", &cfg).unwrap();
    let (b, tb) = run_named_one("zab", &cfg).unwrap();
    let (ta, tb) = (ta.unwrap(), tb.unwrap());
    assert!(ta.lines().count() > 1_000);
    assert_eq!(ta, tb, "the trace of a seed is reproducible");
    assert_eq!(a.committed, b.committed);
    assert_eq!(a.msgs_out, b.msgs_out);
    cfg.seed = 8;
    let (_, tc) = run_named_one("zab", &cfg).unwrap();
    assert_ne!(ta, tc.unwrap(), "another seed is another run");
}

#[test]
fn crash_tolerance_catches_commit_on_own_ack() {
    let r = sweep("zab-bug-commit-own-ack", &config(3), 0..20);
    assert!(fired(&r).contains(&Checker::CrashTolerance));
}

#[test]
fn agreement_or_durability_catch_commit_on_own_ack_without_the_direct_check() {
    let mut cfg = config(3);
    cfg.faults = "crash,partition".parse().unwrap();
    cfg.disabled = vec![Checker::CrashTolerance];
    // Agreement fires on seeds 1, 3, 5, 6, 10, 12 and 16 of 0..20 (and on about half of the
    // seeds after); 0..100 took a minute of the CI budget.
    let r = sweep("zab-bug-commit-own-ack", &cfg, 0..20);
    let fired = fired(&r);
    assert!(
        fired.contains(&Checker::Agreement) || fired.contains(&Checker::Durability),
        "{fired:?}"
    );
}

#[test]
fn crash_tolerance_catches_ack_before_durable() {
    let r = sweep("zab-bug-ack-before-durable", &config(3), 0..20);
    assert!(fired(&r).contains(&Checker::CrashTolerance));
}

#[test]
fn agreement_and_durability_catch_a_leader_without_the_committed_history() {
    // Durability first fires on seed 4, agreement on 21 (then 37, 39, 43).
    let r = sweep("zab-bug-elect-anyone", &config(3), 0..50);
    let fired = fired(&r);
    assert!(fired.contains(&Checker::Agreement), "{fired:?}");
    assert!(fired.contains(&Checker::Durability), "{fired:?}");
}

#[test]
fn integrity_catches_a_command_delivered_twice() {
    let mut cfg = config(3);
    cfg.faults = FaultSet::none();
    let r = sweep("zab-bug-forward-twice", &cfg, 0..5);
    assert_eq!(fired(&r), vec![Checker::Integrity]);
}

#[test]
fn liveness_fires_when_the_bound_cannot_be_met() {
    let mut cfg = config(3);
    cfg.liveness_bound_us = 1;
    let r = sweep("zab", &cfg, 0..5);
    assert_eq!(fired(&r), vec![Checker::Liveness]);
}

#[test]
fn liveness_fires_when_a_quorum_never_comes_back() {
    let mut cfg = config(3);
    cfg.stay_down = 2;
    let r = sweep("zab", &cfg, 0..3);
    assert_eq!(fired(&r), vec![Checker::Liveness]);
}

#[test]
fn a_minority_lost_for_good_loses_nothing() {
    // Durability: with a quorum recovering, nothing delivered anywhere is lost, even when the
    // other replicas never come back (and may have been the leader).
    for nodes in [3, 5] {
        let mut cfg = config(nodes);
        cfg.stay_down = nodes / 2;
        let r = sweep("zab", &cfg, 0..60);
        assert_clean(&r);
    }
}

/// Every protocol of the Zab family over 50 seeds with every fault its assumptions allow,
/// for N = 3, 5, 7 (ZabAc: N = 3 only). CI's share: the full sweeps are `synod sim --protocol
/// NAME --nodes N --seeds 0..10000` (docs/testing.md).
#[test]
fn zab_variants_50_seeds_each() {
    for (name, variant) in synod_zab::Variant::ALL {
        if variant == synod_zab::Variant::Zab {
            continue; // swept on its own above
        }
        for nodes in [3, 5, 7] {
            if !variant.supports(nodes) {
                continue;
            }
            let mut cfg = config(nodes);
            cfg.fault_window_us = 2_000_000;
            let r = sweep(name, &cfg, 0..50);
            assert!(
                r.failures.is_empty(),
                "{name} N={nodes}: seed {} {}",
                r.failures[0].0,
                r.failures[0].1
            );
        }
    }
}

/// Plain Zab survives the adversarial correlated crash of the leader and its most up-to-date
/// follower (a majority for N = 3), under load.
#[test]
fn zab_survives_crashing_the_leader_with_its_best_follower() {
    let mut cfg = config(3);
    cfg.faults = "crash-pair,slow-node".parse().unwrap();
    cfg.workload.clients = 32;
    cfg.workload.think_us = 0;
    cfg.max_faults = 16;
    let r = sweep("zab", &cfg, 0..40);
    assert_clean(&r);
    assert!(r.faults.get("crash-pair").copied().unwrap_or(0) > 40);
}

/// The restricted variants are safe only under A1.1 and A1.2 (zab.md §3.3, §10 item 4). With
/// both broken — a recovered leader takes part at once, and the leader crashes together with
/// the follower that delivered on its own log — a new epoch overwrites what that follower
/// delivered. The same script leaves Zab, and the variants that keep Zab's invariant, intact.
#[test]
fn restricted_variants_fail_when_their_assumptions_are_broken() {
    use synod_sim::faults::Scripted;
    let script = vec![
        // The leader (n3 wins the first election: equal logs, highest id) writes slowly.
        Scripted {
            kind: synod_sim::FaultKind::SlowDisk,
            start_us: 1_000_000,
            end_us: 3_000_000,
            targets: vec![2],
            factor: 50,
        },
        // n1 hears the leader late.
        Scripted {
            kind: synod_sim::FaultKind::SlowNode,
            start_us: 1_000_000,
            end_us: 3_000_000,
            targets: vec![0],
            factor: 40,
        },
        // The leader and its most up-to-date follower crash together; the leader returns first.
        Scripted {
            kind: synod_sim::FaultKind::CrashPair,
            start_us: 1_500_000,
            end_us: 1_600_000,
            targets: vec![],
            factor: 1,
        },
    ];
    let mut cfg = config(3);
    cfg.script = script;
    cfg.workload.clients = 32;
    cfg.workload.think_us = 0;
    let broken = sweep("zab-ac-unrestricted", &cfg, 0..10);
    let fired = fired(&broken);
    assert!(
        fired.contains(&Checker::Agreement) || fired.contains(&Checker::Durability),
        "ZabAc without A1.1/A1.2 loses a delivered proposal: {fired:?}"
    );
    for safe in ["zab", "zab-aa", "zab-aa-leader-first", "zab-ct"] {
        let r = sweep(safe, &cfg, 0..10);
        assert_clean(&r);
    }
}

/// ZabCT with a follower crash (zab.md §6.2, §7): the leader, missing a follower its coin's n
/// counts, switches the epoch to Zab (and the surviving follower, told so by a heartbeat,
/// votes Zab); once the crashed follower is back and everyone has been present for a while, a
/// unanimous vote returns the cluster to ZabCT. No checker fires.
///
/// The network is the thesis's kind (millisecond delays), where the adaptive coin finds a
/// feasible p; on a sub-millisecond LAN ZabCT cannot beat Zab and rightly stays with Zab.
#[test]
fn zab_ct_switches_to_zab_on_a_follower_crash_and_back() {
    use synod_sim::faults::Scripted;
    let mut cfg = config(3);
    cfg.net.latency_min_us = 2_000;
    cfg.net.latency_max_us = 6_000;
    cfg.workload.clients = 12;
    // The thesis's protocol proposes one request at a time. With batches, λ counts batches and
    // at this load it falls so low that the coin finds no p better than Zab's (ZabCT then
    // rightly stays in Zab); the switching under test is the thesis's, so batching is off.
    cfg.batch_commands = 1;
    // Enough work after healing for the returning follower's coin to become feasible again.
    cfg.workload.liveness_commands = 3_000;
    // n1 is a follower (n3 wins the first election with equal logs and the highest id).
    cfg.script = vec![Scripted {
        kind: synod_sim::FaultKind::Crash,
        start_us: 1_000_000,
        end_us: 1_800_000,
        targets: vec![0],
        factor: 1,
    }];
    for seed in 0..10 {
        cfg.seed = seed;
        let (r, _) = synod_protocols::run_named_one("zab-ct", &cfg).unwrap();
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        assert!(
            r.switches.get("to-base").copied().unwrap_or(0) >= 1,
            "seed {seed}: switched to Zab: {:?}",
            r.switches
        );
        assert!(
            r.switches.get("back-to-variant").copied().unwrap_or(0) >= 1,
            "seed {seed}: switched back: {:?}",
            r.switches
        );
    }
}

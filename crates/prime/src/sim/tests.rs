use super::*;

fn small(nodes: usize, seed: u64) -> Plan {
    let mut p = Plan::new(nodes, seed);
    p.churn_us = 10_000_000;
    p.patience_us = 120_000_000;
    p
}

#[test]
fn prime_reaches_a_consistent_view_after_every_phase() {
    let run = run(&Prime(node::Options::THESIS), small(40, 1));
    for p in &run.phases {
        assert!(
            p.settled_us.is_some(),
            "{}: never consistent: {p:?}",
            p.name
        );
    }
    assert!(run.view_sequence.len() >= 2);
}

/// The reduced form of the 1,000-node run that CI runs: 200 nodes, every phase, both designs.
#[test]
fn two_hundred_nodes_reach_a_consistent_view_after_every_phase() {
    for run in [
        run(&Prime(node::Options::THESIS), Plan::new(200, 1)),
        run(
            &Central(central::Options::ZOOKEEPER_LIKE),
            Plan::new(200, 1),
        ),
    ] {
        for p in &run.phases {
            assert!(
                p.settled_us.is_some(),
                "{}: {}: never consistent: {p:?}",
                run.design,
                p.name
            );
        }
    }
}

/// The consistency check catches a broken membership: nodes that never apply a LEAVE keep
/// failed nodes in their view, and the crash phase never settles.
#[test]
fn a_planted_bug_that_keeps_failed_nodes_is_caught() {
    let opts = node::Options {
        plant: Some(node::Plant::IgnoreLeaves),
        ..node::Options::THESIS
    };
    let mut plan = small(40, 1);
    plan.patience_us = 30_000_000;
    let (run, _) = run_phases(&Prime(opts), plan, 3);
    assert!(run.phases[0].settled_us.is_some(), "joins still work");
    assert!(
        run.phases[2].settled_us.is_none(),
        "crashed nodes stay: {:?}",
        run.phases[2]
    );
}

#[test]
fn the_central_design_reaches_a_consistent_view_after_every_phase() {
    let run = run(&Central(central::Options::ZOOKEEPER_LIKE), small(40, 1));
    for p in &run.phases {
        assert!(
            p.settled_us.is_some(),
            "{}: never consistent: {p:?}",
            p.name
        );
    }
}

//! etcd's store on whole nodes: clients put, run Txns comparing a mod revision, delete, use
//! leases, compact, read after a barrier and keep watches open, under every fault; the log is
//! replayed on a model of etcd written apart, and the revisions, linearizability and watch
//! checkers compare (crates/sim/src/world/etcd.rs). A planted revision gap and a planted
//! out-of-order watch are caught.

mod common;

use common::{config, fired, sweep};
use synod_sim::{App, Checker, EtcdApp, EtcdPlant, SimConfig};

fn etcd(plant: Option<EtcdPlant>) -> SimConfig<()> {
    let mut cfg = config(3);
    cfg.app = App::Etcd(EtcdApp {
        plant,
        ..EtcdApp::default()
    });
    cfg
}

#[test]
fn etcd_on_every_family_is_clean_under_all_faults() {
    for p in ["zab", "paxos", "mencius"] {
        let r = sweep(p, &etcd(None), 0..30);
        common::assert_clean(&r);
        assert!(r.committed > 1000, "{p}: {}", r.committed);
    }
}

#[test]
fn the_revision_checker_catches_a_revision_gap() {
    let r = sweep("zab", &etcd(Some(EtcdPlant::RevisionGap)), 0..5);
    assert!(fired(&r).contains(&Checker::Revisions), "{:?}", fired(&r));
}

#[test]
fn the_watch_checker_catches_revisions_out_of_order() {
    let r = sweep("zab", &etcd(Some(EtcdPlant::WatchOutOfOrder)), 0..10);
    assert!(fired(&r).contains(&Checker::Watch), "{:?}", fired(&r));
}

#[test]
fn the_linearizability_checker_catches_reads_without_their_barrier() {
    let r = sweep("zab", &etcd(Some(EtcdPlant::LocalRead)), 0..20);
    assert!(
        fired(&r).contains(&Checker::Linearizable),
        "{:?}",
        fired(&r)
    );
}

//! The ZooKeeper data tree on whole nodes: every client a session writing keys, reading them at
//! its replica and sometimes syncing first, checked session by session (reads never go back;
//! sync + read sees every write acknowledged before the sync), beside the protocol checkers.

mod common;

use common::{config, fired, sweep};
use synod_sim::{App, Checker, SimConfig, ZkApp, ZkPlant};

fn zk(plant: Option<ZkPlant>, groups: usize) -> SimConfig<()> {
    let mut cfg = config(3);
    cfg.app = App::ZooKeeper(ZkApp {
        plant,
        ..ZkApp::default()
    });
    cfg.groups = groups;
    cfg
}

#[test]
fn zookeeper_sessions_on_every_family_are_clean() {
    for p in ["zab", "paxos", "mencius"] {
        let r = sweep(p, &zk(None, 3), 0..30);
        common::assert_clean(&r);
        assert!(r.committed > 0, "{p}");
    }
}

#[test]
fn the_session_checker_catches_reads_from_a_replica_behind_the_session() {
    // A front end that lets a session read at a replica behind what it saw: after a move, its
    // reads go back.
    let r = sweep("zab", &zk(Some(ZkPlant::StaleReads), 1), 0..40);
    assert!(fired(&r).contains(&Checker::Session), "{:?}", fired(&r));
}

#[test]
fn the_session_checker_catches_a_sync_answered_without_ordering() {
    // The server's `stale-sync` bug: a read after such a sync misses writes acknowledged
    // before the sync began.
    let r = sweep("zab", &zk(Some(ZkPlant::LocalSync), 1), 0..40);
    assert!(fired(&r).contains(&Checker::Session), "{:?}", fired(&r));
}

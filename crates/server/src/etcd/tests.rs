//! The etcd services' own rules, apart from the store (crates/etcd tests those, tests/etcd the
//! whole API against a real etcd).

use super::EtcdNode;
use crate::config::EtcdConfig;
use crate::host::GroupHandle;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use synod_core::{Role, View};
use synod_etcd::EtcdMachine;

/// Node `me`'s etcd services over an empty store, in group 900, with the sender of its view
/// (no leader until the test says so).
fn node(me: u32) -> (Arc<EtcdNode>, tokio::sync::watch::Sender<View>) {
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let (view, view_rx) = tokio::sync::watch::channel(View::default());
    let handle = GroupHandle::new(900, me, tx, view_rx);
    let machine = Arc::new(Mutex::new(EtcdMachine::new()));
    let node = EtcdNode::new(
        me,
        "c",
        handle,
        machine,
        EtcdConfig::default(),
        BTreeMap::new(),
    );
    (node, view)
}

#[test]
fn hasleader_is_refused_while_the_group_has_no_leader() {
    let (node, view) = node(1);
    let mut asks = tonic::Request::new(());
    asks.metadata_mut()
        .insert("hasleader", "true".parse().expect("ascii"));
    let e = node.check_leader(&asks).expect_err("no leader");
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.message(), "etcdserver: no leader");
    // A client that does not ask is served (a serializable read needs no leader).
    assert!(node.check_leader(&tonic::Request::new(())).is_ok());
    view.send_replace(View {
        role: Role::Following,
        leader: Some(2),
        epoch: 1,
    });
    assert!(node.check_leader(&asks).is_ok());
}

#[test]
fn lease_ids_chosen_here_print_as_sixteen_hex_digits_and_never_repeat() {
    let (node, _view) = node(3);
    let ids: Vec<i64> = (0..1000).map(|_| node.next_lease_id()).collect();
    assert!(ids
        .iter()
        .all(|&id| id > 0 && format!("{id:x}").len() == 16));
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len());
}

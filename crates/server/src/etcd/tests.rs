//! The etcd services' own rules, apart from the store (crates/etcd tests those, tests/etcd the
//! whole API against a real etcd).

use super::EtcdNode;
use crate::config::EtcdConfig;
use crate::host::GroupHandle;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use synod_core::{Role, View};
use synod_etcd::EtcdMachine;

#[test]
fn hasleader_is_refused_while_the_group_has_no_leader() {
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let (view, view_rx) = tokio::sync::watch::channel(View::default());
    let handle = GroupHandle::new(900, 1, tx, view_rx);
    let machine = Arc::new(Mutex::new(EtcdMachine::new()));
    let node = EtcdNode::new(
        1,
        "c",
        handle,
        machine,
        EtcdConfig::default(),
        BTreeMap::new(),
    );
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
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let (_view, view_rx) = tokio::sync::watch::channel(View::default());
    let handle = GroupHandle::new(900, 3, tx, view_rx);
    let machine = Arc::new(Mutex::new(EtcdMachine::new()));
    let node = EtcdNode::new(
        3,
        "c",
        handle,
        machine,
        EtcdConfig::default(),
        BTreeMap::new(),
    );
    let ids: Vec<i64> = (0..1000).map(|_| node.next_lease_id()).collect();
    assert!(ids
        .iter()
        .all(|&id| id > 0 && format!("{id:x}").len() == 16));
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len());
}

//! `POST /v1/backup`: a consistent backup of the ZooKeeper group, taken by this replica.
//!
//! The request first orders a sync through the group (an empty touch, a command like any
//! other): once this replica delivers it, every write acknowledged to any client before the
//! request began has been delivered here too. The state machine is then serialised as of its
//! delivered position (the snapshot encoding the log uses, taken under the machine's lock in
//! O(1) and written out on a blocking thread while writes go on), and returned as one backup
//! file (synod_zk::backup: header, state, checksum).
//!
//! Bounded: one backup at a time per node (a second request gets 429), and the file is the
//! only copy of the state the request makes; `synod backup` caps what it accepts.
//! Register groups and SconeKV buckets are not included (docs/operations.md).

use crate::admin::{submit_error, AdminState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use synod_zk::backup::{self, Header};
use synod_zk::machine::Txn;
use tokio::sync::Semaphore;
use tracing::info;

/// One backup at a time on a node.
static RUNNING: Semaphore = Semaphore::const_new(1);

pub(crate) async fn backup(State(s): State<Arc<AdminState>>) -> Response {
    let Ok(_permit) = RUNNING.try_acquire() else {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            "a backup is already running on this node; retry when it is done\n",
        )
            .into_response();
    };
    let sync = Txn::Touch {
        sessions: Vec::new(),
    };
    let synced = match s.zookeeper.submit(sync.encode()).await {
        Ok(a) => a.at,
        Err(e) => return submit_error(e),
    };
    let (view, at, zxid) = {
        let m = s.machine.lock().expect("machine");
        let at = crate::machine::StateMachine::applied(&*m);
        (m.snapshot_view(), at, m.applied_zxid)
    };
    debug_assert!(at.slot >= synced.slot, "the sync was delivered here");
    let (cluster_id, node, protocol) = {
        let st = s.status.lock().expect("status");
        (st.cluster_id.clone(), st.node_id, st.protocol.clone())
    };
    let header = Header {
        cluster_id,
        source: format!("synod:{protocol}"),
        node,
        group: 0,
        slot: at.slot,
        tag: at.tag,
        zxid,
        created_ms: crate::now_ms(),
    };
    let file = match tokio::task::spawn_blocking(move || {
        let state = view();
        backup::encode(&header, &state)
    })
    .await
    {
        Ok(f) => f,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the snapshot failed: {e}\n"),
            )
                .into_response()
        }
    };
    info!(
        slot = at.slot,
        zxid = format!("{zxid:#x}"),
        bytes = file.len(),
        "backup taken"
    );
    (
        StatusCode::OK,
        [
            ("content-type", "application/octet-stream".to_string()),
            ("x-synod-slot", at.slot.to_string()),
            ("x-synod-zxid", format!("{zxid:#x}")),
        ],
        file,
    )
        .into_response()
}

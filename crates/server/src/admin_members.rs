//! Membership over the admin port (docs/membership.md): what `synod member` calls.
//!
//! * `GET /v1/members/:group`: the group's configurations in force here, and whom this node
//!   follows: `{"group", "version", "voters", "learners", "pending", "leader", "role"}`.
//! * `POST /v1/members/:group/:action/:node[?expect_version=V]`, `action` one of `add` (as a
//!   voter), `add-learner`, `promote`, `demote`, `remove`: the change is computed from the
//!   committed configuration this node knows, asked of the group through its log, and answered
//!   once delivered here (200, with the new configuration), or refused with the core's reason
//!   (409: not the leader, stale version, a change in flight, no quorum of the new voters, …).
//!   The version it was computed from travels with it, so a change computed from a stale view
//!   is refused rather than applied to a newer configuration.

use crate::admin::{submit_error, AdminState};
use crate::host::GroupHandle;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Arc;
use synod_core::wire::Wire;
use synod_core::{Change, NodeId};
use synod_host::register::RegisterCmd;
use synod_host::ConfigStatus;
use synod_zk::machine::Txn;

fn json(code: StatusCode, v: serde_json::Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        format!("{v}\n"),
    )
        .into_response()
}

/// The group's configuration as this node last reported it, with its view.
fn known(s: &AdminState, group: u32) -> Option<(ConfigStatus, Option<NodeId>, String)> {
    let st = s.status.lock().expect("status");
    let g = st.groups.iter().find(|g| g.host.id == group)?;
    Some((g.host.config.clone()?, g.host.leader, g.host.role.clone()))
}

fn handle(s: &AdminState, group: u32) -> Option<&GroupHandle> {
    if group == 0 {
        return Some(&s.zookeeper);
    }
    s.registers.get(&group).map(|r| &r.handle)
}

pub(crate) async fn list(State(s): State<Arc<AdminState>>, Path(group): Path<u32>) -> Response {
    let Some((c, leader, role)) = known(&s, group) else {
        return (
            StatusCode::NOT_FOUND,
            "no such group on this node, or its protocol does not change its configuration\n",
        )
            .into_response();
    };
    json(
        StatusCode::OK,
        serde_json::json!({
            "group": group,
            "version": c.version,
            "voters": c.voters,
            "learners": c.learners,
            "pending": c.pending,
            "leader": leader,
            "role": role,
        }),
    )
}

/// The new voters and learners after `action` on `node`, or why it makes no sense.
pub(crate) fn apply_action(
    c: &ConfigStatus,
    action: &str,
    node: NodeId,
) -> Result<(Vec<NodeId>, Vec<NodeId>), String> {
    let (mut voters, mut learners) = (c.voters.clone(), c.learners.clone());
    let voter = voters.contains(&node);
    let learner = learners.contains(&node);
    match action {
        "add" if voter => return Err(format!("node {node} is already a voter")),
        "add" if learner => return Err(format!("node {node} is a learner: promote it")),
        "add" => voters.push(node),
        "add-learner" if voter || learner => {
            return Err(format!("node {node} is already a member"))
        }
        "add-learner" => learners.push(node),
        "promote" if !learner => return Err(format!("node {node} is not a learner")),
        "promote" => {
            learners.retain(|&l| l != node);
            voters.push(node);
        }
        "demote" if !voter => return Err(format!("node {node} is not a voter")),
        "demote" => {
            voters.retain(|&v| v != node);
            learners.push(node);
        }
        "remove" if !voter && !learner => return Err(format!("node {node} is not a member")),
        "remove" => {
            voters.retain(|&v| v != node);
            learners.retain(|&l| l != node);
        }
        other => {
            return Err(format!(
                "unknown action '{other}' (add, add-learner, promote, demote, remove)"
            ))
        }
    }
    voters.sort_unstable();
    learners.sort_unstable();
    Ok((voters, learners))
}

pub(crate) async fn change(
    State(s): State<Arc<AdminState>>,
    Path((group, action, node)): Path<(u32, String, NodeId)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let (Some((c, _, _)), Some(h)) = (known(&s, group), handle(&s, group)) else {
        return (
            StatusCode::NOT_FOUND,
            "no such group on this node, or its protocol does not change its configuration\n",
        )
            .into_response();
    };
    let expect_version = match q.get("expect_version").map(|v| v.parse::<u64>()) {
        None => c.version,
        Some(Ok(v)) => v,
        Some(Err(_)) => {
            return (StatusCode::BAD_REQUEST, "expect_version: not a number\n").into_response()
        }
    };
    let (voters, learners) = match apply_action(&c, &action, node) {
        Ok(x) => x,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    // The command the group's state machine receives with the change: one that changes
    // nothing (ZooKeeper's reconfig transaction, which rewrites /zookeeper/config, is the
    // ZooKeeper front's).
    let payload = if group == 0 {
        Txn::Touch {
            sessions: Vec::new(),
        }
        .encode()
    } else {
        RegisterCmd::Put {
            key: "synod.reconfig".into(),
            value: Bytes::from(format!("{action} {node}")),
        }
        .to_bytes()
    };
    let change = Change {
        expect_version: Some(expect_version),
        voters: voters.clone(),
        learners: learners.clone(),
    };
    match h.reconfigure(payload, change).await {
        Ok(applied) => json(
            StatusCode::OK,
            serde_json::json!({
                "group": group,
                "version": applied.at.tag,
                "slot": applied.at.slot,
                "voters": voters,
                "learners": learners,
            }),
        ),
        Err(e) => submit_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_compute_the_new_configuration_or_say_why_not() {
        let c = ConfigStatus {
            version: 7,
            voters: vec![1, 2, 3],
            learners: vec![4],
            pending: vec![],
        };
        assert_eq!(apply_action(&c, "add", 5), Ok((vec![1, 2, 3, 5], vec![4])));
        assert_eq!(
            apply_action(&c, "add-learner", 5),
            Ok((vec![1, 2, 3], vec![4, 5]))
        );
        assert_eq!(
            apply_action(&c, "promote", 4),
            Ok((vec![1, 2, 3, 4], vec![]))
        );
        assert_eq!(apply_action(&c, "demote", 2), Ok((vec![1, 3], vec![2, 4])));
        assert_eq!(apply_action(&c, "remove", 4), Ok((vec![1, 2, 3], vec![])));
        assert_eq!(apply_action(&c, "remove", 1), Ok((vec![2, 3], vec![4])));
        for (action, node) in [
            ("add", 1),
            ("add", 4),
            ("add-learner", 2),
            ("promote", 2),
            ("demote", 4),
            ("remove", 9),
            ("evict", 1),
        ] {
            assert!(apply_action(&c, action, node).is_err(), "{action} {node}");
        }
    }
}

//! etcd's Maintenance and Cluster services: Status (the version clients gate features on),
//! alarms, defragmentation, hashes, snapshots, and the member list. Membership changes and
//! leader moves are refused with a reason: the store's group changes members with `synod
//! member` (docs/membership.md), and Zab has no leader transfer yet.

use super::{status, Answer, EtcdNode, ETCD_VERSION};
use std::pin::Pin;
use std::sync::Arc;
use synod_etcd::errors;
use synod_etcd::etcdserverpb::{
    cluster_server, maintenance_server, AlarmRequest, AlarmResponse, DefragmentRequest,
    DefragmentResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse, Member,
    MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, MoveLeaderRequest, MoveLeaderResponse,
    SnapshotRequest, SnapshotResponse, StatusRequest, StatusResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

pub struct Maintenance(pub Arc<EtcdNode>);
pub struct Cluster(pub Arc<EtcdNode>);

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

/// Bytes per snapshot message (etcd sends 32 KiB).
const SNAPSHOT_CHUNK: usize = 32 << 10;

fn refused(what: &str) -> Status {
    Status::unimplemented(format!(
        "synod: {what} is not served over etcd's API yet (docs/etcd-compatibility.md)"
    ))
}

#[tonic::async_trait]
impl maintenance_server::Maintenance for Maintenance {
    async fn alarm(&self, req: Request<AlarmRequest>) -> Answer<AlarmResponse> {
        self.0.check_leader(&req)?;
        // No alarm is ever raised: a full disk stops the node's writes instead (docs/etcd.md).
        Ok(Response::new(AlarmResponse {
            header: self.0.current_header(),
            alarms: Vec::new(),
        }))
    }

    async fn status(&self, req: Request<StatusRequest>) -> Answer<StatusResponse> {
        let n = &self.0;
        n.check_leader(&req)?;
        let view = n.handle.view();
        let (applied, size) = {
            let m = n.machine.lock().expect("etcd machine");
            (
                synod_core::StateMachine::applied(&*m).slot,
                m.store().size_bytes() as i64,
            )
        };
        Ok(Response::new(StatusResponse {
            header: n.current_header(),
            version: ETCD_VERSION.into(),
            db_size: size,
            leader: view.leader.map_or(0, |l| l as u64),
            raft_index: applied,
            raft_term: view.epoch,
            raft_applied_index: applied,
            errors: Vec::new(),
            db_size_in_use: size,
            is_learner: false,
        }))
    }

    async fn defragment(&self, req: Request<DefragmentRequest>) -> Answer<DefragmentResponse> {
        self.0.check_leader(&req)?;
        // The store is in memory and its log is compacted by snapshots: nothing to do.
        Ok(Response::new(DefragmentResponse {
            header: self.0.current_header(),
        }))
    }

    async fn hash(&self, req: Request<HashRequest>) -> Answer<HashResponse> {
        let n = &self.0;
        n.check_leader(&req)?;
        let hash = {
            let m = n.machine.lock().expect("etcd machine");
            m.store().hash_kv(m.store().revision())
        };
        Ok(Response::new(HashResponse {
            header: n.current_header(),
            hash,
        }))
    }

    async fn hash_kv(&self, req: Request<HashKvRequest>) -> Answer<HashKvResponse> {
        let n = &self.0;
        n.check_leader(&req)?;
        let rev = req.into_inner().revision;
        let (hash, compact) = {
            let m = n.machine.lock().expect("etcd machine");
            let rev = m.store().read_revision(rev).map_err(status)?;
            (m.store().hash_kv(rev), m.store().compacted())
        };
        Ok(Response::new(HashKvResponse {
            header: n.current_header(),
            hash,
            compact_revision: compact,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(&self, req: Request<SnapshotRequest>) -> Answer<Self::SnapshotStream> {
        let n = self.0.clone();
        n.check_leader(&req)?;
        let view = {
            let m = n.machine.lock().expect("etcd machine");
            synod_core::StateMachine::snapshot_view(&*m)
        };
        let header = n.current_header();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let Ok(data) = tokio::task::spawn_blocking(view).await else {
                return;
            };
            let mut left = data.len();
            for chunk in data.chunks(SNAPSHOT_CHUNK) {
                left -= chunk.len();
                let r = SnapshotResponse {
                    header,
                    remaining_bytes: left as u64,
                    blob: bytes::Bytes::copy_from_slice(chunk),
                };
                if tx.send(Ok(r)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn move_leader(&self, _: Request<MoveLeaderRequest>) -> Answer<MoveLeaderResponse> {
        Err(refused("moving the leader"))
    }
}

#[tonic::async_trait]
impl cluster_server::Cluster for Cluster {
    async fn member_add(&self, _: Request<MemberAddRequest>) -> Answer<MemberAddResponse> {
        Err(refused(
            "MemberAdd (use `synod member --group <etcd.group>`)",
        ))
    }

    async fn member_remove(&self, _: Request<MemberRemoveRequest>) -> Answer<MemberRemoveResponse> {
        Err(refused(
            "MemberRemove (use `synod member --group <etcd.group>`)",
        ))
    }

    async fn member_update(&self, _: Request<MemberUpdateRequest>) -> Answer<MemberUpdateResponse> {
        Err(refused("MemberUpdate"))
    }

    async fn member_list(&self, req: Request<MemberListRequest>) -> Answer<MemberListResponse> {
        let n = &self.0;
        n.check_leader(&req)?;
        let members = n
            .peer_urls
            .iter()
            .map(|(id, peer)| Member {
                id: *id as u64,
                name: format!("node-{id}"),
                peer_ur_ls: vec![peer.clone()],
                client_ur_ls: n.client_urls.get(id).cloned().into_iter().collect(),
                is_learner: false,
            })
            .collect();
        Ok(Response::new(MemberListResponse {
            header: n.current_header(),
            members,
        }))
    }

    async fn member_promote(
        &self,
        _: Request<MemberPromoteRequest>,
    ) -> Answer<MemberPromoteResponse> {
        Err(status(errors::MEMBER_NOT_FOUND))
    }
}

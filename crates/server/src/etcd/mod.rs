//! etcd's v3 API on this node (docs/etcd.md): the gRPC services of etcd's vendored `.proto`
//! files over this node's replica of the etcd store (crates/etcd, one group on every node).
//!
//! * Writes (Put, DeleteRange, a Txn that can write, Compact, lease grants, revokes and
//!   keep-alives) are proposed to the store's group from any node and answered when applied here.
//! * Linearizable reads (etcd's default) wait for a barrier: a no-op ordered after every write
//!   that completed before the read arrived, applied here ([`EtcdNode::linearize`]); reads that
//!   arrive while one barrier is in flight share the next one, as etcd batches ReadIndex.
//!   Serializable reads are served from this replica at once.
//! * Watches read the store's index by revision from where each watcher stands ([`watch`]).
//! * The lessor ([`lessor`]) keeps lease clocks; the node that leads the group revokes expired
//!   leases through the log.

// tonic fixes the error type of every handler (`tonic::Status`, large); the helpers return it too.
#![allow(clippy::result_large_err)]

pub mod kv;
pub mod lease;
pub mod lessor;
pub mod maintenance;
#[cfg(test)]
mod tests;
pub mod watch;

use crate::host::{GroupHandle, SubmitError};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::NodeId;
use synod_etcd::errors::{self, Failure};
use synod_etcd::etcdserverpb::ResponseHeader;
use synod_etcd::synod::etcd::v1::{self as log, command::Request as C, reply::Result as R};
use synod_etcd::EtcdMachine;
use tokio::sync::Semaphore;

/// The etcd API version this server answers to Status: clients gate features on it
/// (Kubernetes asks for watch progress only from 3.4.31, which this server serves exactly).
pub const ETCD_VERSION: &str = "3.4.31";

/// Everything the etcd services of this node share.
pub struct EtcdNode {
    pub me: NodeId,
    /// etcd's cluster id: a hash of the cluster's name.
    pub cluster_id: u64,
    pub handle: GroupHandle,
    pub machine: Arc<Mutex<EtcdMachine>>,
    pub cfg: crate::config::EtcdConfig,
    /// Every node's peer and client URLs, for MemberList.
    pub peer_urls: BTreeMap<NodeId, String>,
    pub client_urls: BTreeMap<NodeId, String>,
    timeout: Duration,
    inflight: Semaphore,
    /// Linearizable reads: asked (a ticket each) and covered by a completed barrier.
    asked: AtomicU64,
    covered: AtomicU64,
    barrier: tokio::sync::Mutex<()>,
    /// Lease ids chosen here: a clock-seeded counter ([`EtcdNode::next_lease_id`]).
    lease_ids: AtomicU64,
    pub lessor: Arc<lessor::Clocks>,
    pub streams: Arc<Semaphore>,
}

pub type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

/// etcd's error as gRPC carries it.
pub fn status(f: Failure) -> tonic::Status {
    tonic::Status::new(tonic::Code::from(f.code), f.message)
}

fn submit_failure(e: SubmitError) -> Failure {
    match e {
        SubmitError::NoLeader => errors::NO_LEADER,
        SubmitError::Busy => errors::TOO_MANY_REQUESTS,
        SubmitError::Timeout => errors::TIMEOUT,
        SubmitError::ShuttingDown => errors::STOPPED,
        SubmitError::NoSuchGroup | SubmitError::Config(_) => errors::NOT_CAPABLE,
    }
}

/// FNV-1a of the cluster's name: etcd's cluster id is a 64-bit number.
pub fn cluster_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

impl EtcdNode {
    pub fn new(
        me: NodeId,
        cluster: &str,
        handle: GroupHandle,
        machine: Arc<Mutex<EtcdMachine>>,
        cfg: crate::config::EtcdConfig,
        peer_urls: BTreeMap<NodeId, String>,
    ) -> Arc<Self> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Arc::new(EtcdNode {
            me,
            cluster_id: cluster_id(cluster),
            handle,
            machine,
            client_urls: cfg.addresses(),
            peer_urls,
            timeout: Duration::from_millis(cfg.request_timeout_ms),
            inflight: Semaphore::new(cfg.max_inflight),
            streams: Arc::new(Semaphore::new(cfg.max_streams)),
            cfg,
            asked: AtomicU64::new(0),
            covered: AtomicU64::new(0),
            barrier: tokio::sync::Mutex::new(()),
            lease_ids: AtomicU64::new(seed & ((1 << 48) - 1)),
            lessor: Arc::new(lessor::Clocks::default()),
        })
    }

    /// A response header: the revision given, the cluster, this member, the group's epoch.
    pub fn header(&self, h: Option<ResponseHeader>) -> Option<ResponseHeader> {
        let revision = h.map_or(0, |h| h.revision);
        Some(ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.me as u64,
            revision,
            raft_term: self.handle.view().epoch,
        })
    }

    /// The header at this replica's current revision.
    pub fn current_header(&self) -> Option<ResponseHeader> {
        let revision = self
            .machine
            .lock()
            .expect("etcd machine")
            .store()
            .revision();
        self.header(Some(ResponseHeader {
            revision,
            ..ResponseHeader::default()
        }))
    }

    /// etcd's `hasleader` metadata: a client that asks for it is refused while the group has
    /// no leader.
    pub fn check_leader<T>(&self, req: &tonic::Request<T>) -> Result<(), tonic::Status> {
        let asks = req
            .metadata()
            .get("hasleader")
            .is_some_and(|v| v.as_bytes() == b"true");
        if asks && self.handle.view().leader.is_none() {
            return Err(status(errors::NO_LEADER));
        }
        Ok(())
    }

    /// Order `cmd` in the store's log and return what it answered here.
    pub async fn propose(&self, cmd: C) -> Result<R, tonic::Status> {
        let Ok(_permit) = self.inflight.try_acquire() else {
            return Err(status(errors::TOO_MANY_REQUESTS));
        };
        let payload = prost::Message::encode_to_vec(&log::Command { request: Some(cmd) });
        if payload.len() > synod_etcd::MAX_REQUEST_BYTES {
            return Err(status(errors::REQUEST_TOO_LARGE));
        }
        let applied = tokio::time::timeout(self.timeout, self.handle.submit(payload.into()))
            .await
            .map_err(|_| status(errors::TIMEOUT))?
            .map_err(|e| status(submit_failure(e)))?;
        let reply: log::Reply =
            prost::Message::decode(applied.result).map_err(|_| status(errors::NOT_CAPABLE))?;
        match reply.result {
            Some(R::Failure(f)) => {
                Err(status(Failure::from_log(&f).unwrap_or(errors::NOT_CAPABLE)))
            }
            Some(r) => Ok(r),
            None => Err(status(errors::NOT_CAPABLE)),
        }
    }

    /// Wait until every write that completed before this call is applied here.
    pub async fn linearize(&self) -> Result<(), tonic::Status> {
        let ticket = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let _turn = tokio::time::timeout(self.timeout, self.barrier.lock())
            .await
            .map_err(|_| status(errors::TIMEOUT))?;
        if self.covered.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        // This barrier is proposed after every read asked so far arrived: it covers them.
        let upto = self.asked.load(Ordering::SeqCst);
        match self.propose(C::Barrier(log::Barrier {})).await? {
            R::Barrier(_) => {
                self.covered.fetch_max(upto, Ordering::SeqCst);
                Ok(())
            }
            _ => Err(status(errors::NOT_CAPABLE)),
        }
    }

    /// A lease id for a grant that names none: positive, bit 62 set (sixteen hex digits, as
    /// etcd's ids print: clients name keys after them), the node in bits 48..61, a counter below.
    pub fn next_lease_id(&self) -> i64 {
        let n = self.lease_ids.fetch_add(1, Ordering::Relaxed) & ((1 << 48) - 1);
        (1 << 62) | ((self.me as i64) & 0x3FFF) << 48 | n as i64
    }
}

/// The etcd services of this node, ready to serve on a listener.
pub fn router(node: Arc<EtcdNode>) -> tonic::transport::server::Router {
    use synod_etcd::etcdserverpb::{
        cluster_server::ClusterServer, kv_server::KvServer, lease_server::LeaseServer,
        maintenance_server::MaintenanceServer, watch_server::WatchServer,
    };
    let max = synod_etcd::MAX_REQUEST_BYTES + (64 << 10);
    tonic::transport::Server::builder()
        .add_service(KvServer::new(kv::Kv(node.clone())).max_decoding_message_size(max))
        .add_service(WatchServer::new(watch::Watch(node.clone())).max_decoding_message_size(max))
        .add_service(LeaseServer::new(lease::Lease(node.clone())).max_decoding_message_size(max))
        .add_service(
            ClusterServer::new(maintenance::Cluster(node.clone())).max_decoding_message_size(max),
        )
        .add_service(
            MaintenanceServer::new(maintenance::Maintenance(node)).max_decoding_message_size(max),
        )
}

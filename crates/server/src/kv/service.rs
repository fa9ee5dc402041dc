//! The KV gRPC service (proto/synod_kv.proto) over this node's bucket replicas.
//!
//! Reads are served from the local replica's state (the master's unless the client accepts any
//! replica); commits, aborts and single-key writes are submitted to the coordinator bucket's
//! group from any of its replicas (the host forwards them to the master) and answered when the
//! decision is applied at this replica. A node that holds no replica of the bucket a request
//! needs answers WRONG_NODE with the view; a read at a replica that is not master answers
//! NOT_MASTER with the view, so the client re-routes in one step.

use crate::host::{GroupHandle, SubmitError};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use synod_core::wire::Wire;
use synod_core::NodeId;
use synod_kv::route::bucket_of;
use synod_kv::txn::{MAX_KEY_BYTES, MAX_OPS, MAX_TXN_BYTES, MAX_VALUE_BYTES};
use synod_kv::KvMachine;
use synod_kv::{Cmd, Decided, Op, OpKind, Outcome, Reply, TxnId};
use synod_kv_client::proto::{self, kv_server::Kv};
use tokio::sync::Semaphore;
use tonic::{Request, Response};

/// One bucket replica on this node.
pub struct LocalBucket {
    pub handle: GroupHandle,
    pub machine: Arc<Mutex<KvMachine>>,
}

pub struct KvService {
    me: NodeId,
    buckets: u32,
    group_base: u32,
    placement: Vec<BTreeSet<NodeId>>,
    addresses: BTreeMap<NodeId, String>,
    local: BTreeMap<u32, LocalBucket>,
    commit_timeout: Duration,
    inflight: Semaphore,
    /// Last transaction id issued here: (microseconds, counter).
    ids: Mutex<(u64, u32)>,
}

/// The view version: the placement is fixed by the configuration (runtime membership changes
/// are future work), so every node serves version 1.
const VIEW_VERSION: u64 = 1;

type Answer<T> = Result<Response<T>, tonic::Status>;

fn status(
    error: proto::Error,
    detail: impl Into<String>,
    view: Option<proto::View>,
) -> Option<proto::Status> {
    Some(proto::Status {
        error: error as i32,
        detail: detail.into(),
        view,
    })
}

impl KvService {
    pub fn new(
        me: NodeId,
        cfg: &crate::config::KvConfig,
        nodes: &BTreeSet<NodeId>,
        local: BTreeMap<u32, LocalBucket>,
    ) -> Self {
        KvService {
            me,
            buckets: cfg.buckets,
            group_base: cfg.group_base,
            placement: cfg.placement(nodes),
            addresses: cfg.addresses(),
            local,
            commit_timeout: Duration::from_millis(cfg.commit_timeout_ms),
            inflight: Semaphore::new(cfg.max_inflight),
            ids: Mutex::new((0, 0)),
        }
    }

    fn view(&self) -> proto::View {
        proto::View {
            version: VIEW_VERSION,
            nodes: self
                .addresses
                .iter()
                .map(|(id, a)| proto::Node {
                    id: *id,
                    address: a.clone(),
                })
                .collect(),
            buckets: self
                .placement
                .iter()
                .enumerate()
                .map(|(b, members)| {
                    let master = self
                        .local
                        .get(&(b as u32))
                        .and_then(|l| {
                            let v = l.handle.view();
                            v.serving().then_some(v.leader).flatten()
                        })
                        .unwrap_or(0);
                    proto::Bucket {
                        index: b as u32,
                        group: self.group_base + b as u32,
                        members: members.iter().copied().collect(),
                        master,
                    }
                })
                .collect(),
        }
    }

    /// A new transaction id: this node's clock in microseconds, never repeating or going back.
    fn next_id(&self) -> TxnId {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let mut g = self.ids.lock().expect("ids");
        let time = now.max(g.0);
        if time == g.0 {
            g.1 = g.1.wrapping_add(1);
        } else {
            g.1 = 0;
        }
        g.0 = time;
        TxnId {
            time,
            node: (self.me as u64) << 32 | g.1 as u64,
        }
    }

    /// The request's view must be current (0: the client has none yet, which is fine).
    fn check_view(&self, version: u64) -> Option<proto::Status> {
        (version != 0 && version != VIEW_VERSION)
            .then(|| {
                status(
                    proto::Error::StaleView,
                    "the view changed",
                    Some(self.view()),
                )
            })
            .flatten()
    }

    fn local(&self, bucket: u32) -> Result<&LocalBucket, Option<proto::Status>> {
        self.local.get(&bucket).ok_or_else(|| {
            status(
                proto::Error::WrongNode,
                format!("node {} holds no replica of bucket {bucket}", self.me),
                Some(self.view()),
            )
        })
    }

    fn check_key(key: &[u8]) -> Option<proto::Status> {
        if key.is_empty() {
            return status(proto::Error::Invalid, "empty key", None);
        }
        if key.len() > MAX_KEY_BYTES {
            return status(
                proto::Error::TooLarge,
                format!("key longer than {MAX_KEY_BYTES} bytes"),
                None,
            );
        }
        None
    }

    /// Submit `cmd` to `bucket`'s group and wait for the decision of `id` at this replica;
    /// counted in `synod_kv_commits_total`, `synod_kv_aborts_total{reason}` or
    /// `synod_kv_undecided_total`.
    async fn decide(
        &self,
        bucket: &LocalBucket,
        id: TxnId,
        cmd: Cmd,
    ) -> Result<Decided, Option<proto::Status>> {
        let r = self.decide_uncounted(bucket, id, cmd).await;
        let counters = crate::metrics::kv();
        match &r {
            Ok(d) if d.outcome == Outcome::Committed => counters.committed(),
            Ok(d) => counters.aborted(&d.reason),
            Err(_) => counters.undecided(),
        }
        r
    }

    async fn decide_uncounted(
        &self,
        bucket: &LocalBucket,
        id: TxnId,
        cmd: Cmd,
    ) -> Result<Decided, Option<proto::Status>> {
        let Ok(_permit) = self.inflight.try_acquire() else {
            return Err(status(
                proto::Error::Busy,
                "too many requests in flight at this node",
                None,
            ));
        };
        let waiter = bucket
            .machine
            .lock()
            .expect("kv machine")
            .wait(id)
            .map_err(|e| status(proto::Error::Busy, e, None))?;
        let deadline = tokio::time::Instant::now() + self.commit_timeout;
        let submitted =
            tokio::time::timeout_at(deadline, bucket.handle.submit(cmd.to_bytes())).await;
        let result = match submitted {
            Err(_) => Err(status(
                proto::Error::Unavailable,
                "no decision in time: retry (commits are idempotent)",
                None,
            )),
            Ok(Err(e)) => Err(submit_error(e)),
            Ok(Ok(applied)) => match Reply::from_bytes(applied.result) {
                Ok(Reply::Decided(d)) => Ok(d),
                Ok(Reply::Refused(why)) => Err(status(proto::Error::Invalid, why, None)),
                Ok(Reply::Pending) => match tokio::time::timeout_at(deadline, waiter).await {
                    Ok(Ok(d)) => return Ok(d),
                    _ => Err(status(
                        proto::Error::Unavailable,
                        "no decision in time: retry (commits are idempotent)",
                        None,
                    )),
                },
                Ok(Reply::Internal) | Err(_) => Err(status(
                    proto::Error::Unavailable,
                    "unexpected reply from the bucket",
                    None,
                )),
            },
        };
        bucket.machine.lock().expect("kv machine").forget(&id);
        result
    }

    /// The answer to a commit or abort; `order[i]` is the index, in the decision's versions
    /// (parts in bucket order), of the request's op `i`.
    fn commit_response(
        r: Result<Decided, Option<proto::Status>>,
        order: &[usize],
    ) -> proto::CommitResponse {
        match r {
            Ok(d) => proto::CommitResponse {
                status: None,
                outcome: match d.outcome {
                    Outcome::Committed => proto::Outcome::Committed,
                    Outcome::Aborted => proto::Outcome::Aborted,
                } as i32,
                reason: d.reason,
                versions: if d.versions.len() == order.len() {
                    order.iter().map(|&i| d.versions[i]).collect()
                } else {
                    Vec::new()
                },
            },
            Err(s) => proto::CommitResponse {
                status: s,
                outcome: proto::Outcome::Unknown as i32,
                reason: String::new(),
                versions: Vec::new(),
            },
        }
    }

    /// A single-key write as a one-key transaction of its bucket.
    async fn single(&self, view_version: u64, key: Bytes, op: Op) -> proto::WriteResponse {
        let fail = |s| proto::WriteResponse {
            status: s,
            done: false,
            version: 0,
        };
        if let Some(s) = self
            .check_view(view_version)
            .or_else(|| Self::check_key(&key))
        {
            return fail(Some(s));
        }
        if op.value.len() > MAX_VALUE_BYTES {
            return fail(status(
                proto::Error::TooLarge,
                format!("value longer than {MAX_VALUE_BYTES} bytes"),
                None,
            ));
        }
        let b = bucket_of(&key, self.buckets);
        let local = match self.local(b) {
            Ok(l) => l,
            Err(s) => return fail(s),
        };
        let id = self.next_id();
        match self
            .decide(
                local,
                id,
                Cmd::Commit {
                    id,
                    parts: vec![(b, vec![op])],
                },
            )
            .await
        {
            Ok(d) => proto::WriteResponse {
                status: None,
                done: d.outcome == Outcome::Committed,
                version: d.version,
            },
            Err(s) => fail(s),
        }
    }
}

fn txn_id(id: Option<proto::TxnId>) -> Option<TxnId> {
    id.map(|i| TxnId {
        time: i.time,
        node: i.node,
    })
}

fn submit_error(e: SubmitError) -> Option<proto::Status> {
    let detail = match e {
        SubmitError::NoLeader => "the bucket has no master right now: retry",
        SubmitError::Busy => "the bucket is busy: retry",
        SubmitError::Timeout => "the bucket did not order the request in time: retry",
        SubmitError::ShuttingDown => "this node is shutting down",
        SubmitError::NoSuchGroup => "this node does not run the bucket",
        SubmitError::Config(_) => "the bucket refused a configuration change",
    };
    status(proto::Error::Unavailable, detail, None)
}

// tonic's trait fixes the error type (`tonic::Status`, large); the helpers below return it too.
#[allow(clippy::result_large_err)]
#[tonic::async_trait]
impl Kv for KvService {
    async fn get_view(&self, _: Request<proto::GetViewRequest>) -> Answer<proto::View> {
        Ok(Response::new(self.view()))
    }

    async fn begin(&self, _: Request<proto::BeginRequest>) -> Answer<proto::BeginResponse> {
        let id = self.next_id();
        Ok(Response::new(proto::BeginResponse {
            status: None,
            id: Some(proto::TxnId {
                time: id.time,
                node: id.node,
            }),
        }))
    }

    async fn read(&self, r: Request<proto::ReadRequest>) -> Answer<proto::ReadResponse> {
        let r = r.into_inner();
        let fail = |s| {
            Ok(Response::new(proto::ReadResponse {
                status: s,
                found: false,
                value: Bytes::new(),
                version: 0,
            }))
        };
        if let Some(s) = self
            .check_view(r.view_version)
            .or_else(|| Self::check_key(&r.key))
        {
            return fail(Some(s));
        }
        let b = bucket_of(&r.key, self.buckets);
        let local = match self.local(b) {
            Ok(l) => l,
            Err(s) => return fail(s),
        };
        let v = local.handle.view();
        let master_here = v.serving() && v.leader == Some(self.me);
        if !(r.any_replica || master_here) {
            return fail(status(
                proto::Error::NotMaster,
                format!("node {} is not the master of bucket {b}", self.me),
                Some(self.view()),
            ));
        }
        let (value, version) = local
            .machine
            .lock()
            .expect("kv machine")
            .bucket()
            .read(&r.key);
        Ok(Response::new(proto::ReadResponse {
            status: None,
            found: value.is_some(),
            value: value.unwrap_or_default(),
            version,
        }))
    }

    async fn commit(&self, r: Request<proto::CommitRequest>) -> Answer<proto::CommitResponse> {
        let r = r.into_inner();
        let refuse = |s| Ok(Response::new(Self::commit_response(Err(s), &[])));
        if let Some(s) = self.check_view(r.view_version) {
            return refuse(Some(s));
        }
        let Some(id) = txn_id(r.id) else {
            return refuse(status(
                proto::Error::Invalid,
                "a commit needs the transaction id from Begin",
                None,
            ));
        };
        if r.ops.is_empty() {
            return refuse(status(proto::Error::Invalid, "an empty transaction", None));
        }
        if r.ops.len() > MAX_OPS {
            return refuse(status(
                proto::Error::TooLarge,
                format!("more than {MAX_OPS} keys in one transaction"),
                None,
            ));
        }
        let bytes: usize = r.ops.iter().map(|o| o.key.len() + o.value.len()).sum();
        if bytes > MAX_TXN_BYTES {
            return refuse(status(
                proto::Error::TooLarge,
                format!("more than {MAX_TXN_BYTES} bytes of keys and values in one transaction"),
                None,
            ));
        }
        let mut parts: BTreeMap<u32, Vec<Op>> = BTreeMap::new();
        let mut keys = BTreeSet::new();
        // (bucket, index in its part) of each request op, to answer versions in request order.
        let mut at = Vec::with_capacity(r.ops.len());
        for op in r.ops {
            if let Some(s) = Self::check_key(&op.key) {
                return refuse(Some(s));
            }
            if op.value.len() > MAX_VALUE_BYTES {
                return refuse(status(
                    proto::Error::TooLarge,
                    format!("value longer than {MAX_VALUE_BYTES} bytes"),
                    None,
                ));
            }
            if !keys.insert(op.key.clone()) {
                return refuse(status(
                    proto::Error::Invalid,
                    "a key twice in one transaction",
                    None,
                ));
            }
            let kind = match proto::OpKind::try_from(op.kind) {
                Ok(proto::OpKind::Read) => OpKind::Read,
                Ok(proto::OpKind::Write) => OpKind::Write,
                Ok(proto::OpKind::Delete) => OpKind::Delete,
                Err(_) => return refuse(status(proto::Error::Invalid, "unknown op kind", None)),
            };
            if op.blind && kind == OpKind::Read {
                return refuse(status(proto::Error::Invalid, "a blind read", None));
            }
            let b = bucket_of(&op.key, self.buckets);
            let part = parts.entry(b).or_default();
            at.push((b, part.len()));
            part.push(Op {
                key: op.key,
                kind,
                version: op.version,
                value: op.value,
                blind: op.blind,
            });
        }
        let mut offset = BTreeMap::new();
        let mut total = 0;
        for (b, ops) in &parts {
            offset.insert(*b, total);
            total += ops.len();
        }
        let order: Vec<usize> = at.iter().map(|(b, i)| offset[b] + i).collect();
        let coordinator = *parts.keys().next().expect("non-empty");
        let local = match self.local(coordinator) {
            Ok(l) => l,
            Err(s) => return refuse(s),
        };
        let cmd = Cmd::Commit {
            id,
            parts: parts.into_iter().collect(),
        };
        Ok(Response::new(Self::commit_response(
            self.decide(local, id, cmd).await,
            &order,
        )))
    }

    async fn abort(&self, r: Request<proto::AbortRequest>) -> Answer<proto::CommitResponse> {
        let r = r.into_inner();
        let refuse = |s| Ok(Response::new(Self::commit_response(Err(s), &[])));
        if let Some(s) = self.check_view(r.view_version) {
            return refuse(Some(s));
        }
        let Some(id) = txn_id(r.id) else {
            return refuse(status(
                proto::Error::Invalid,
                "an abort needs the transaction id",
                None,
            ));
        };
        let Some(&coordinator) = r.buckets.iter().min() else {
            return refuse(status(
                proto::Error::Invalid,
                "an abort needs the buckets the transaction touched",
                None,
            ));
        };
        if coordinator >= self.buckets {
            return refuse(status(proto::Error::Invalid, "no such bucket", None));
        }
        let local = match self.local(coordinator) {
            Ok(l) => l,
            Err(s) => return refuse(s),
        };
        Ok(Response::new(Self::commit_response(
            self.decide(local, id, Cmd::Abort { id }).await,
            &[],
        )))
    }

    async fn put(&self, r: Request<proto::PutRequest>) -> Answer<proto::WriteResponse> {
        let r = r.into_inner();
        let op = Op {
            key: r.key.clone(),
            kind: OpKind::Write,
            version: 0,
            value: r.value,
            blind: true,
        };
        Ok(Response::new(self.single(r.view_version, r.key, op).await))
    }

    async fn delete(&self, r: Request<proto::DeleteRequest>) -> Answer<proto::WriteResponse> {
        let r = r.into_inner();
        let op = Op {
            key: r.key.clone(),
            kind: OpKind::Delete,
            version: 0,
            value: Bytes::new(),
            blind: true,
        };
        Ok(Response::new(self.single(r.view_version, r.key, op).await))
    }

    async fn compare_and_set(
        &self,
        r: Request<proto::CompareAndSetRequest>,
    ) -> Answer<proto::WriteResponse> {
        let r = r.into_inner();
        let op = Op {
            key: r.key.clone(),
            kind: OpKind::Write,
            version: r.expected_version,
            value: r.value,
            blind: false,
        };
        Ok(Response::new(self.single(r.view_version, r.key, op).await))
    }
}

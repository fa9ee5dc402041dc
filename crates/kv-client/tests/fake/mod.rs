//! An in-process fake SconeKV cluster for the client's tests: `n` gRPC servers on 127.0.0.1
//! sharing one in-memory model (values with versions and tombstones; commits validated by exact
//! version equality and remembered by id). Each node checks what a real one would check: the
//! request's view version, and that it is the master of the bucket (for commits, of the lowest
//! bucket among the keys). Every call is logged for the tests' assertions, and a few faults can
//! be injected.

#![allow(dead_code)]

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_kv::route::bucket_of;
use synod_kv_client::proto::kv_server::{Kv, KvServer};
use synod_kv_client::proto::*;
use tonic::{Request, Response};

/// One RPC as a node received it.
#[derive(Clone, Debug)]
pub struct Call {
    pub node: u32,
    pub rpc: &'static str,
    pub key: Option<Bytes>,
    pub txn: Option<(u64, u64)>,
    pub ops: Vec<Op>,
}

#[derive(Default)]
pub struct Model {
    pub view: View,
    /// key → (value, version); a deleted key keeps its version with no value.
    pub data: HashMap<Bytes, (Option<Bytes>, u64)>,
    /// Decisions by id: outcome, reason, the versions the ops left (committed only).
    pub decided: HashMap<(u64, u64), (Outcome, String, Vec<u64>)>,
    pub calls: Vec<Call>,
    pub next_txn: u64,
    /// Commits still to answer UNAVAILABLE after deciding (a deadline passed after the decision).
    pub commit_unavailable_after_decide: u32,
    /// Commits still to answer only after this long (after deciding).
    pub commit_delay: Option<(u32, Duration)>,
}

impl Model {
    fn status(&self, error: Error) -> Option<Status> {
        Some(Status {
            error: error as i32,
            detail: format!("{error:?}"),
            view: Some(self.view.clone()),
        })
    }

    fn master(&self, bucket: u32) -> u32 {
        self.view.buckets[bucket as usize].master
    }

    fn bucket(&self, key: &[u8]) -> u32 {
        bucket_of(key, self.view.buckets.len() as u32)
    }

    /// A refusal if `view_version` is old or `node` does not master `bucket`.
    fn check(&self, node: u32, view_version: u64, bucket: u32) -> Option<Option<Status>> {
        if view_version < self.view.version {
            return Some(self.status(Error::StaleView));
        }
        if self.master(bucket) != node {
            return Some(self.status(Error::NotMaster));
        }
        None
    }

    fn current(&self, key: &[u8]) -> (Option<Bytes>, u64) {
        self.data.get(key).cloned().unwrap_or((None, 0))
    }

    fn write(&mut self, key: &Bytes, value: Option<Bytes>) -> u64 {
        let v = self.current(key).1 + 1;
        self.data.insert(key.clone(), (value, v));
        v
    }
}

pub struct Node {
    pub id: u32,
    pub model: Arc<Mutex<Model>>,
}

impl Node {
    fn log(&self, rpc: &'static str, key: Option<&Bytes>, txn: Option<&TxnId>, ops: &[Op]) {
        self.model.lock().unwrap().calls.push(Call {
            node: self.id,
            rpc,
            key: key.cloned(),
            txn: txn.map(|t| (t.time, t.node)),
            ops: ops.to_vec(),
        });
    }
}

type R<T> = Result<Response<T>, tonic::Status>;

#[tonic::async_trait]
impl Kv for Node {
    async fn get_view(&self, _: Request<GetViewRequest>) -> R<View> {
        self.log("GetView", None, None, &[]);
        Ok(Response::new(self.model.lock().unwrap().view.clone()))
    }

    async fn begin(&self, _: Request<BeginRequest>) -> R<BeginResponse> {
        self.log("Begin", None, None, &[]);
        let mut m = self.model.lock().unwrap();
        m.next_txn += 1;
        let id = TxnId {
            time: m.next_txn,
            node: (self.id as u64) << 32 | m.next_txn,
        };
        Ok(Response::new(BeginResponse {
            status: None,
            id: Some(id),
        }))
    }

    async fn read(&self, req: Request<ReadRequest>) -> R<ReadResponse> {
        let req = req.into_inner();
        self.log("Read", Some(&req.key), None, &[]);
        let m = self.model.lock().unwrap();
        let bucket = m.bucket(&req.key);
        let refused = if req.any_replica {
            (req.view_version < m.view.version).then(|| m.status(Error::StaleView))
        } else {
            m.check(self.id, req.view_version, bucket)
        };
        if let Some(status) = refused {
            return Ok(Response::new(ReadResponse {
                status,
                ..Default::default()
            }));
        }
        let (value, version) = m.current(&req.key);
        Ok(Response::new(ReadResponse {
            status: None,
            found: value.is_some(),
            value: value.unwrap_or_default(),
            version,
        }))
    }

    async fn commit(&self, req: Request<CommitRequest>) -> R<CommitResponse> {
        let req = req.into_inner();
        let id = req.id.unwrap();
        self.log("Commit", None, Some(&id), &req.ops);
        let delay = {
            let mut m = self.model.lock().unwrap();
            let coordinator = req.ops.iter().map(|o| m.bucket(&o.key)).min().unwrap();
            if let Some(status) = m.check(self.id, req.view_version, coordinator) {
                return Ok(Response::new(CommitResponse {
                    status,
                    ..Default::default()
                }));
            }
            let key = (id.time, id.node);
            if !m.decided.contains_key(&key) {
                let stale = req
                    .ops
                    .iter()
                    .find(|o| !o.blind && m.current(&o.key).1 != o.version);
                let decision = match stale {
                    Some(o) => (
                        Outcome::Aborted,
                        format!("version of {:?} changed", o.key),
                        vec![],
                    ),
                    None => {
                        let mut versions = vec![];
                        for o in &req.ops {
                            versions.push(match OpKind::try_from(o.kind).unwrap() {
                                OpKind::Read => m.current(&o.key).1,
                                OpKind::Write => m.write(&o.key, Some(o.value.clone())),
                                OpKind::Delete => m.write(&o.key, None),
                            });
                        }
                        (Outcome::Committed, String::new(), versions)
                    }
                };
                m.decided.insert(key, decision);
                if m.commit_unavailable_after_decide > 0 {
                    m.commit_unavailable_after_decide -= 1;
                    return Ok(Response::new(CommitResponse {
                        status: Some(Status {
                            error: Error::Unavailable as i32,
                            detail: "deadline passed".into(),
                            view: None,
                        }),
                        ..Default::default()
                    }));
                }
            }
            match &mut m.commit_delay {
                Some((n, d)) if *n > 0 => {
                    *n -= 1;
                    Some(*d)
                }
                _ => None,
            }
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let m = self.model.lock().unwrap();
        let (outcome, reason, versions) = m.decided[&(id.time, id.node)].clone();
        Ok(Response::new(CommitResponse {
            status: None,
            outcome: outcome as i32,
            reason,
            versions,
        }))
    }

    async fn abort(&self, req: Request<AbortRequest>) -> R<CommitResponse> {
        let req = req.into_inner();
        let id = req.id.unwrap();
        self.log("Abort", None, Some(&id), &[]);
        let mut m = self.model.lock().unwrap();
        let (outcome, reason, versions) = m
            .decided
            .entry((id.time, id.node))
            .or_insert((Outcome::Aborted, "aborted by client".into(), vec![]))
            .clone();
        Ok(Response::new(CommitResponse {
            status: None,
            outcome: outcome as i32,
            reason,
            versions,
        }))
    }

    async fn put(&self, req: Request<PutRequest>) -> R<WriteResponse> {
        let req = req.into_inner();
        self.log("Put", Some(&req.key), None, &[]);
        let mut m = self.model.lock().unwrap();
        let bucket = m.bucket(&req.key);
        if let Some(status) = m.check(self.id, req.view_version, bucket) {
            return Ok(Response::new(WriteResponse {
                status,
                ..Default::default()
            }));
        }
        let version = m.write(&req.key, Some(req.value));
        Ok(Response::new(WriteResponse {
            status: None,
            done: true,
            version,
        }))
    }

    async fn delete(&self, req: Request<DeleteRequest>) -> R<WriteResponse> {
        let req = req.into_inner();
        self.log("Delete", Some(&req.key), None, &[]);
        let mut m = self.model.lock().unwrap();
        let bucket = m.bucket(&req.key);
        if let Some(status) = m.check(self.id, req.view_version, bucket) {
            return Ok(Response::new(WriteResponse {
                status,
                ..Default::default()
            }));
        }
        let version = m.write(&req.key, None);
        Ok(Response::new(WriteResponse {
            status: None,
            done: true,
            version,
        }))
    }

    async fn compare_and_set(&self, req: Request<CompareAndSetRequest>) -> R<WriteResponse> {
        let req = req.into_inner();
        self.log("CompareAndSet", Some(&req.key), None, &[]);
        let mut m = self.model.lock().unwrap();
        let bucket = m.bucket(&req.key);
        if let Some(status) = m.check(self.id, req.view_version, bucket) {
            return Ok(Response::new(WriteResponse {
                status,
                ..Default::default()
            }));
        }
        let current = m.current(&req.key).1;
        if current != req.expected_version {
            return Ok(Response::new(WriteResponse {
                status: None,
                done: false,
                version: current,
            }));
        }
        let version = m.write(&req.key, Some(req.value));
        Ok(Response::new(WriteResponse {
            status: None,
            done: true,
            version,
        }))
    }
}

/// A running fake cluster.
pub struct Cluster {
    pub model: Arc<Mutex<Model>>,
    /// `host:port` of node `i + 1`.
    pub addresses: Vec<String>,
}

impl Cluster {
    /// `nodes` servers (ids 1..=nodes) and `buckets` buckets; bucket `b` is mastered by node
    /// `b % nodes + 1` and replicated on every node. View version 1.
    pub async fn start(nodes: u32, buckets: u32) -> Cluster {
        let model = Arc::new(Mutex::new(Model::default()));
        let mut addresses = Vec::new();
        let mut listeners = Vec::new();
        for _ in 0..nodes {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addresses.push(l.local_addr().unwrap().to_string());
            listeners.push(l);
        }
        model.lock().unwrap().view = View {
            version: 1,
            nodes: (1..=nodes)
                .map(|id| synod_kv_client::proto::Node {
                    id,
                    address: addresses[id as usize - 1].clone(),
                })
                .collect(),
            buckets: (0..buckets)
                .map(|index| Bucket {
                    index,
                    group: index,
                    members: (1..=nodes).collect(),
                    master: index % nodes + 1,
                })
                .collect(),
        };
        for (i, l) in listeners.into_iter().enumerate() {
            let node = Node {
                id: i as u32 + 1,
                model: model.clone(),
            };
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(KvServer::new(node))
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
            );
        }
        Cluster { model, addresses }
    }

    /// The seeds a client connects with.
    pub fn seeds(&self) -> Vec<String> {
        self.addresses.clone()
    }

    /// A new view: bucket `b`'s master becomes `master(b)`.
    pub fn remaster(&self, master: impl Fn(u32) -> u32) {
        self.model.lock().unwrap().view.version += 1;
        self.move_masters(master);
    }

    /// Bucket `b`'s master becomes `master(b)` (0: none) in the same view version, as a leader
    /// election inside a bucket's group does.
    pub fn move_masters(&self, master: impl Fn(u32) -> u32) {
        let mut m = self.model.lock().unwrap();
        for b in &mut m.view.buckets {
            b.master = master(b.index);
        }
    }

    /// The calls so far, then forgets them.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.model.lock().unwrap().calls)
    }

    /// The calls of one RPC so far (kept).
    pub fn calls(&self, rpc: &str) -> Vec<Call> {
        let m = self.model.lock().unwrap();
        m.calls.iter().filter(|c| c.rpc == rpc).cloned().collect()
    }

    pub fn value(&self, key: &str) -> (Option<Bytes>, u64) {
        self.model.lock().unwrap().current(key.as_bytes())
    }

    /// The node that masters `key`'s bucket.
    pub fn master_of(&self, key: &[u8]) -> u32 {
        let m = self.model.lock().unwrap();
        m.master(m.bucket(key))
    }

    pub fn bucket_of(&self, key: &[u8]) -> u32 {
        self.model.lock().unwrap().bucket(key)
    }
}

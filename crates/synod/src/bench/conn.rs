//! One client's connection: a ZooKeeper session, or an etcd client (etcd's v3 gRPC API, the
//! client crates/etcd generates from etcd's own .proto files).

use anyhow::{Context, Result};
use std::time::Duration;
use synod_etcd::etcdserverpb::{
    compare::{CompareResult, CompareTarget, TargetUnion},
    kv_client::KvClient,
    request_op, response_op, Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest,
};
use tonic::transport::Channel;

use super::load::key_path;
use super::Proto;
use crate::zkclient::ZkSession;

/// One client's connection: a ZooKeeper session, or an etcd client.
pub(super) enum Conn {
    Zk(ZkSession),
    Etcd(KvClient<Channel>),
}

/// What the etcd-protocol benchmark runs (`synod bench etcd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EtcdOp {
    /// Put one key.
    Put,
    /// A linearizable Range of one key (etcd's default read).
    Range,
    /// Txn: if the key's mod revision is the one this client last saw, put it, else get it
    /// (Kubernetes' update).
    TxnCas,
    /// Txn of puts of four keys (with buckets, on different ones).
    TxnMulti,
}

impl EtcdOp {
    pub(super) fn named(s: &str) -> Option<EtcdOp> {
        Some(match s {
            "put" => EtcdOp::Put,
            "range" => EtcdOp::Range,
            "txn-cas" => EtcdOp::TxnCas,
            "txn-multi" => EtcdOp::TxnMulti,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            EtcdOp::Put => "put",
            EtcdOp::Range => "range",
            EtcdOp::TxnCas => "txn-cas",
            EtcdOp::TxnMulti => "txn-multi",
        }
    }
}

fn put_op(key: String, value: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.into(),
            value: value.to_vec().into(),
            ..Default::default()
        })),
    }
}

impl Conn {
    pub(super) async fn open(proto: Proto, addr: &str, timeout: Duration) -> Result<Conn> {
        match proto {
            Proto::Zk => Ok(Conn::Zk(
                ZkSession::connect(addr, 30_000, None, 0, timeout).await?,
            )),
            Proto::Etcd => {
                let url = if addr.contains("://") {
                    addr.to_string()
                } else {
                    format!("http://{addr}")
                };
                let channel = Channel::from_shared(url)
                    .with_context(|| format!("etcd endpoint {addr}"))?
                    .connect_timeout(timeout)
                    .connect()
                    .await
                    .with_context(|| format!("connect to {addr}"))?;
                Ok(Conn::Etcd(
                    KvClient::new(channel).max_decoding_message_size(4 << 20),
                ))
            }
        }
    }

    /// setData (version −1) / put.
    pub(super) async fn set(&mut self, key: &str, value: &[u8]) -> Result<bool> {
        match self {
            Conn::Zk(s) => Ok(s.set_data(key, value, -1).await?.0.err == 0),
            Conn::Etcd(c) => {
                c.put(PutRequest {
                    key: key.as_bytes().to_vec().into(),
                    value: value.to_vec().into(),
                    ..Default::default()
                })
                .await?;
                Ok(true)
            }
        }
    }

    /// getData / get. etcd's reads are serializable here: served by the member itself, as
    /// ZooKeeper and synod serve getData (etcd's default read is [`Conn::etcd_op`]'s Range).
    pub(super) async fn get(&mut self, key: &str) -> Result<bool> {
        match self {
            Conn::Zk(s) => Ok(s.get_data(key).await?.0.err == 0),
            Conn::Etcd(c) => {
                c.range(RangeRequest {
                    key: key.as_bytes().to_vec().into(),
                    serializable: true,
                    ..Default::default()
                })
                .await?;
                Ok(true)
            }
        }
    }

    /// Create a private key, then delete it.
    pub(super) async fn create_delete(&mut self, key: &str, value: &[u8]) -> Result<bool> {
        match self {
            Conn::Zk(s) => {
                if s.create(key, value, 0).await?.err != 0 {
                    return Ok(false);
                }
                Ok(s.delete(key, -1).await?.err == 0)
            }
            Conn::Etcd(c) => {
                c.put(PutRequest {
                    key: key.as_bytes().to_vec().into(),
                    value: value.to_vec().into(),
                    ..Default::default()
                })
                .await?;
                c.delete_range(DeleteRangeRequest {
                    key: key.as_bytes().to_vec().into(),
                    ..Default::default()
                })
                .await?;
                Ok(true)
            }
        }
    }

    /// One etcd-protocol operation on `keys` (the first for single-key ops); `seen` is the
    /// mod revision this client last saw of `keys[0]` (TxnCas compares against it and learns
    /// the new one).
    pub(super) async fn etcd_op(
        &mut self,
        op: EtcdOp,
        keys: &[String],
        value: &[u8],
        seen: &mut i64,
    ) -> Result<bool> {
        let Conn::Etcd(c) = self else {
            anyhow::bail!("etcd operations need an etcd connection");
        };
        match op {
            EtcdOp::Put => {
                c.put(PutRequest {
                    key: keys[0].clone().into(),
                    value: value.to_vec().into(),
                    ..Default::default()
                })
                .await?;
            }
            EtcdOp::Range => {
                c.range(RangeRequest {
                    key: keys[0].clone().into(),
                    ..Default::default()
                })
                .await?;
            }
            EtcdOp::TxnCas => {
                let r = c
                    .txn(TxnRequest {
                        compare: vec![Compare {
                            result: CompareResult::Equal as i32,
                            target: CompareTarget::Mod as i32,
                            key: keys[0].clone().into(),
                            target_union: Some(TargetUnion::ModRevision(*seen)),
                            range_end: Default::default(),
                        }],
                        success: vec![put_op(keys[0].clone(), value)],
                        failure: vec![RequestOp {
                            request: Some(request_op::Request::RequestRange(RangeRequest {
                                key: keys[0].clone().into(),
                                ..Default::default()
                            })),
                        }],
                    })
                    .await?
                    .into_inner();
                *seen = if r.succeeded {
                    r.header.map_or(0, |h| h.revision)
                } else {
                    match r.responses.first().and_then(|o| o.response.as_ref()) {
                        Some(response_op::Response::ResponseRange(rr)) => {
                            rr.kvs.first().map_or(0, |kv| kv.mod_revision)
                        }
                        _ => 0,
                    }
                };
            }
            EtcdOp::TxnMulti => {
                c.txn(TxnRequest {
                    success: keys.iter().map(|k| put_op(k.clone(), value)).collect(),
                    ..Default::default()
                })
                .await?;
            }
        }
        Ok(true)
    }

    pub(super) async fn close(self) {
        match self {
            Conn::Zk(s) => {
                let _ = tokio::time::timeout(Duration::from_secs(1), s.close()).await;
            }
            Conn::Etcd(_) => {}
        }
    }
}

/// Create the keys in etcd.
pub(super) async fn setup_etcd(servers: &[String], keys: usize, value: &[u8]) -> Result<()> {
    let mut c = Conn::open(Proto::Etcd, &servers[0], Duration::from_secs(10)).await?;
    for i in 0..keys {
        c.set(&key_path(i), value).await?;
    }
    Ok(())
}

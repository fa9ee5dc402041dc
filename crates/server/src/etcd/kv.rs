//! etcd's KV service: Range, Put, DeleteRange, Txn and Compact.

use super::{status, Answer, EtcdNode};
use std::sync::Arc;
use synod_etcd::apply;
use synod_etcd::etcdserverpb::{
    kv_server, request_op, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, TxnRequest,
    TxnResponse,
};
use synod_etcd::synod::etcd::v1::{command::Request as C, reply::Result as R};
use tonic::{Request, Response, Status};

pub struct Kv(pub Arc<EtcdNode>);

/// Whether a read-only Txn may skip the linearizable barrier: etcd's rule (isTxnSerializable)
/// is that every op is a Range asking to be serializable (so a nested Txn never may, and a Txn
/// without ops may).
fn serializable(t: &TxnRequest) -> bool {
    t.success.iter().chain(&t.failure).all(
        |op| matches!(&op.request, Some(request_op::Request::RequestRange(r)) if r.serializable),
    )
}

fn unexpected() -> Status {
    status(synod_etcd::errors::NOT_CAPABLE)
}

#[tonic::async_trait]
impl kv_server::Kv for Kv {
    async fn range(&self, req: Request<RangeRequest>) -> Answer<RangeResponse> {
        crate::metrics::etcd().request("Range");
        let n = &self.0;
        n.check_leader(&req)?;
        let r = req.into_inner();
        apply::check_range(&r).map_err(status)?;
        if !r.serializable {
            n.linearize().await?;
        }
        let mut resp = {
            let m = n.machine.lock().expect("etcd machine");
            apply::range(m.store(), m.store().revision(), &r).map_err(status)?
        };
        resp.header = n.header(resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, req: Request<PutRequest>) -> Answer<PutResponse> {
        crate::metrics::etcd().request("Put");
        let n = &self.0;
        n.check_leader(&req)?;
        let r = req.into_inner();
        apply::check_put(&r).map_err(status)?;
        match n.propose(C::Put(r)).await? {
            R::Put(mut p) => {
                p.header = n.header(p.header);
                Ok(Response::new(p))
            }
            _ => Err(unexpected()),
        }
    }

    async fn delete_range(&self, req: Request<DeleteRangeRequest>) -> Answer<DeleteRangeResponse> {
        crate::metrics::etcd().request("DeleteRange");
        let n = &self.0;
        n.check_leader(&req)?;
        let r = req.into_inner();
        apply::check_delete(&r).map_err(status)?;
        match n.propose(C::DeleteRange(r)).await? {
            R::DeleteRange(mut d) => {
                d.header = n.header(d.header);
                Ok(Response::new(d))
            }
            _ => Err(unexpected()),
        }
    }

    async fn txn(&self, req: Request<TxnRequest>) -> Answer<TxnResponse> {
        crate::metrics::etcd().request("Txn");
        let n = &self.0;
        n.check_leader(&req)?;
        let t = req.into_inner();
        apply::check_txn(&t).map_err(status)?;
        let mut resp = if apply::txn_is_read_only(&t) {
            if !serializable(&t) {
                n.linearize().await?;
            }
            let m = n.machine.lock().expect("etcd machine");
            apply::txn_read(m.store(), &t).map_err(status)?
        } else {
            match n.propose(C::Txn(t)).await? {
                R::Txn(t) => t,
                _ => return Err(unexpected()),
            }
        };
        resp.header = n.header(resp.header);
        Ok(Response::new(resp))
    }

    async fn compact(&self, req: Request<CompactionRequest>) -> Answer<CompactionResponse> {
        crate::metrics::etcd().request("Compact");
        let n = &self.0;
        n.check_leader(&req)?;
        match n.propose(C::Compaction(req.into_inner())).await? {
            R::Compaction(mut c) => {
                c.header = n.header(c.header);
                Ok(Response::new(c))
            }
            _ => Err(unexpected()),
        }
    }
}

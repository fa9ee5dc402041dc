//! etcd's Lease service: Grant, Revoke, the KeepAlive stream, TimeToLive and Leases.

use super::{status, Answer, EtcdNode};
use std::pin::Pin;
use std::sync::Arc;
use synod_etcd::errors;
use synod_etcd::etcdserverpb::{
    lease_server, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest,
    LeaseKeepAliveResponse, LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, LeaseStatus, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use synod_etcd::synod::etcd::v1::{command::Request as C, reply::Result as R};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

pub struct Lease(pub Arc<EtcdNode>);

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

/// Responses queued on one keep-alive stream.
const STREAM_QUEUE: usize = 64;

#[tonic::async_trait]
impl lease_server::Lease for Lease {
    async fn lease_grant(&self, req: Request<LeaseGrantRequest>) -> Answer<LeaseGrantResponse> {
        crate::metrics::etcd().request("LeaseGrant");
        let n = &self.0;
        n.check_leader(&req)?;
        let r = req.into_inner();
        let chosen = r.id != 0;
        // An id chosen here may (rarely) be taken: choose again.
        for _ in 0..3 {
            let id = if chosen { r.id } else { n.next_lease_id() };
            match n
                .propose(C::LeaseGrant(LeaseGrantRequest { ttl: r.ttl, id }))
                .await
            {
                Ok(R::LeaseGrant(mut g)) => {
                    g.header = n.header(g.header);
                    return Ok(Response::new(g));
                }
                Err(e) if !chosen && e.message() == errors::LEASE_EXIST.message => continue,
                Err(e) => return Err(e),
                Ok(_) => return Err(status(errors::NOT_CAPABLE)),
            }
        }
        Err(status(errors::LEASE_EXIST))
    }

    async fn lease_revoke(&self, req: Request<LeaseRevokeRequest>) -> Answer<LeaseRevokeResponse> {
        crate::metrics::etcd().request("LeaseRevoke");
        let n = &self.0;
        n.check_leader(&req)?;
        match n.propose(C::LeaseRevoke(req.into_inner())).await? {
            R::LeaseRevoke(mut r) => {
                r.header = n.header(r.header);
                Ok(Response::new(r))
            }
            _ => Err(status(errors::NOT_CAPABLE)),
        }
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Answer<Self::LeaseKeepAliveStream> {
        crate::metrics::etcd().request("LeaseKeepAlive");
        let n = self.0.clone();
        n.check_leader(&req)?;
        let Ok(permit) = n.streams.clone().try_acquire_owned() else {
            return Err(status(errors::TOO_MANY_REQUESTS));
        };
        let mut input = req.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        tokio::spawn(async move {
            let _permit = permit;
            while let Ok(Some(k)) = input.message().await {
                // etcd answers a lease it does not know with a TTL of 0 (the client's lease
                // expired), not an error.
                let (ttl, header) = match n.propose(C::LeaseRenew(k.id)).await {
                    Ok(R::LeaseRenew(ttl)) => (ttl, n.current_header()),
                    Err(e) if e.message() == errors::LEASE_NOT_FOUND.message => {
                        (0, n.current_header())
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    Ok(_) => (0, n.current_header()),
                };
                let resp = LeaseKeepAliveResponse {
                    header,
                    id: k.id,
                    ttl,
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<LeaseTimeToLiveRequest>,
    ) -> Answer<LeaseTimeToLiveResponse> {
        crate::metrics::etcd().request("LeaseTimeToLive");
        let n = &self.0;
        n.check_leader(&req)?;
        let r = req.into_inner();
        n.linearize().await?;
        let found = {
            let m = n.machine.lock().expect("etcd machine");
            m.leases().get(r.id).map(|l| {
                (
                    l.ttl,
                    if r.keys {
                        l.keys.iter().cloned().collect()
                    } else {
                        Vec::new()
                    },
                )
            })
        };
        let resp = match found {
            Some((granted, keys)) => LeaseTimeToLiveResponse {
                header: n.current_header(),
                id: r.id,
                ttl: n.lessor.remaining_s(r.id).unwrap_or(granted),
                granted_ttl: granted,
                keys,
            },
            // etcd: an unknown lease has a TTL of -1 (not an error).
            None => LeaseTimeToLiveResponse {
                header: n.current_header(),
                id: r.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            },
        };
        Ok(Response::new(resp))
    }

    async fn lease_leases(&self, req: Request<LeaseLeasesRequest>) -> Answer<LeaseLeasesResponse> {
        crate::metrics::etcd().request("LeaseLeases");
        let n = &self.0;
        n.check_leader(&req)?;
        n.linearize().await?;
        let leases = {
            let m = n.machine.lock().expect("etcd machine");
            m.leases()
                .iter()
                .map(|(id, _)| LeaseStatus { id })
                .collect()
        };
        Ok(Response::new(LeaseLeasesResponse {
            header: n.current_header(),
            leases,
        }))
    }
}

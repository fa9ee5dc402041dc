//! Lease clocks (not replicated, as in etcd): every node notes when it last saw each lease
//! granted or kept alive, and the node that leads the store's group revokes, through the log,
//! the leases whose TTL has run out. A node that becomes leader first gives every lease a full
//! TTL (etcd's lessor Promote), so a lease never expires early because its leader changed.

use super::EtcdNode;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_etcd::etcdserverpb::LeaseRevokeRequest;
use synod_etcd::synod::etcd::v1::command::Request as C;

/// How often the lessor looks.
const TICK: Duration = Duration::from_millis(250);
/// How long a revoke may be in flight before it is proposed again.
const RETRY: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Clocks {
    expiry: Mutex<HashMap<i64, Instant>>,
}

impl Clocks {
    /// Seconds until the lease expires (0 once it has), `None` for a lease this node has not
    /// seen.
    pub fn remaining_s(&self, id: i64) -> Option<i64> {
        let e = *self.expiry.lock().expect("lease clocks").get(&id)?;
        Some(e.saturating_duration_since(Instant::now()).as_secs() as i64)
    }
}

pub async fn run(node: Arc<EtcdNode>) {
    let mut leading = false;
    let mut revoking: HashMap<i64, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let view = node.handle.view();
        let lead_now = view.serving() && view.leader == Some(node.me);
        let ((renewed, all), live) = {
            let mut m = node.machine.lock().expect("etcd machine");
            let live: Vec<(i64, i64)> = m.leases().iter().map(|(id, l)| (id, l.ttl)).collect();
            (m.take_renewed(), live)
        };
        let expired: Vec<i64> = {
            let mut clocks = node.lessor.expiry.lock().expect("lease clocks");
            let ids: HashSet<i64> = live.iter().map(|(id, _)| *id).collect();
            clocks.retain(|id, _| ids.contains(id));
            revoking.retain(|id, _| ids.contains(id));
            for &(id, ttl) in &live {
                let full = now + Duration::from_secs(ttl.max(0) as u64);
                let e = clocks.entry(id).or_insert(full);
                if all || renewed.contains(&id) || (lead_now && !leading) {
                    *e = (*e).max(full);
                }
            }
            if lead_now {
                clocks
                    .iter()
                    .filter(|(id, e)| {
                        **e <= now && revoking.get(id).is_none_or(|t| now >= *t + RETRY)
                    })
                    .map(|(id, _)| *id)
                    .collect()
            } else {
                Vec::new()
            }
        };
        leading = lead_now;
        for id in expired {
            revoking.insert(id, now);
            let node = node.clone();
            tokio::spawn(async move {
                // A lease revoked meanwhile (by a client) answers "not found": nothing to do.
                let _ = node
                    .propose(C::LeaseRevoke(LeaseRevokeRequest { id }))
                    .await;
            });
        }
    }
}

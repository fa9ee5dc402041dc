//! What the transactional clients and the end-of-run checks need from the world they run in:
//! the bucket-level world of this module ([`super::world::World`], where a bucket is a master
//! that fails over, for the scaling experiment), or the whole-node simulator (crates/sim, where
//! every bucket is a group of real replicas on real cores under its faults).

use super::world::{ReplyTo, WorldStats};
use crate::{Bucket, Decided, TxnId};
use bytes::Bytes;

/// The clients' side of a world.
pub trait ClientEnv {
    /// The time now (virtual microseconds).
    fn now(&self) -> u64;
    fn rng_u64(&mut self) -> u64;
    /// A uniform draw in `lo..=hi`.
    fn between(&mut self, (lo, hi): (u64, u64)) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.rng_u64() % (hi - lo + 1)
        }
    }
    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.rng_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    /// A client's timer, `after` microseconds from now.
    fn wake(&mut self, client: u32, tag: u64, after: u64);
    /// A client sends `payload` to bucket `to`; the reply (if any) comes as a client event.
    fn submit(&mut self, to: u32, payload: Bytes, reply_to: Option<ReplyTo>);
    /// One way between a client and a bucket, uniform in this range.
    fn client_net_us(&self) -> (u64, u64);
    /// Under a CPU cost model: how long a read from bucket `b`'s master waits for its CPU
    /// (`None`: no cost model, a read is served at once).
    fn serve_read(&mut self, _bucket: u32) -> Option<u64> {
        None
    }
    /// Whether a CPU cost model is on.
    fn costed(&self) -> bool {
        false
    }
    /// Whether bucket `b` has a master (a replica that orders its commands) now.
    fn master_up(&self, bucket: u32) -> bool;
    /// What a client reading `key` of `bucket` gets: from the master's committed state, or from
    /// a lagging replica; `None` if it asked the master and there is none.
    fn read(&mut self, bucket: u32, key: &[u8], replica: bool) -> Option<(Option<Bytes>, u64)>;
}

/// The end-of-run checks' side of a world.
pub trait StoreView {
    fn now(&self) -> u64;
    fn buckets(&self) -> u32;
    /// The decision of `id` and when its coordinator first applied it.
    fn decision(&self, id: &TxnId) -> Option<(Decided, u64)>;
    /// Bucket `b`'s state as its master holds it (once quiet, every replica's).
    fn bucket(&self, b: u32) -> Option<Bucket>;
    /// How long a bucket keeps a decision (a retry older than this may be refused).
    fn retain_us(&self) -> u64;
    /// What the world itself found wrong.
    fn violations(&self) -> Vec<String>;
    fn stats(&self) -> WorldStats;
    /// Whether the bucket's master is up (for the report of an unsettled world).
    fn master_up(&self, b: u32) -> bool;
}

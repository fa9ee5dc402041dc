//! SconeKV on the host: bucket groups running [`synod_kv::KvMachine`], and the KV gRPC service
//! ([`service::KvService`]) that clients reach.

pub mod service;

pub use service::{KvService, LocalBucket};
pub use synod_kv::KvMachine;

//! SconeKV on the host: bucket groups running [`machine::KvMachine`], and the KV gRPC service
//! ([`service::KvService`]) that clients reach.

pub mod machine;
pub mod service;

pub use machine::KvMachine;
pub use service::{KvService, LocalBucket};

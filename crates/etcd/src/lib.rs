//! etcd's v3 API as a deterministic state machine (docs/etcd.md).
//!
//! * [`store`]: the multi-version store: one global revision, every key's history of versions
//!   and deletions, ranges at any revision since the compaction point, compaction.
//! * [`apply`]: etcd's requests (Put, DeleteRange, Txn with compares and nested ops, Compact)
//!   evaluated on the store, with etcd's checks and etcd's exact error strings ([`errors`]).
//! * [`lease`]: leases and the keys attached to them.
//! * [`machine`]: the replicated state machine a group applies the log to.
//!
//! The generated code of etcd's vendored `.proto` files (proto/etcd) is in [`etcdserverpb`],
//! [`mvccpb`] and [`authpb`]; synod's log command in [`synod::etcd::v1`].

pub mod apply;
pub mod errors;
pub mod lease;
pub mod machine;
pub mod store;
#[cfg(test)]
mod tests;
pub mod watch;

#[allow(clippy::all, missing_docs)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}
#[allow(clippy::all, missing_docs)]
pub mod authpb {
    tonic::include_proto!("authpb");
}
#[allow(clippy::all, missing_docs)]
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}
pub mod synod {
    pub mod etcd {
        #[allow(clippy::all, missing_docs)]
        pub mod v1 {
            tonic::include_proto!("synod.etcd.v1");
        }
    }
}

pub use errors::Failure;
pub use machine::EtcdMachine;

/// etcd's limits (its defaults): operations in one Txn (`--max-txn-ops`), bytes in one request
/// (`--max-request-bytes`, 1.5 MiB).
pub const MAX_TXN_OPS: usize = 128;
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;
/// The largest lease TTL etcd grants, in seconds.
pub const MAX_LEASE_TTL_S: i64 = 9_000_000_000;

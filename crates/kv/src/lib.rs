//! SconeKV (sconekv.md): a sharded key-value store with serializable multi-key transactions.
//!
//! The key space is hashed into buckets ([`route`]); each bucket is a replicated group whose
//! state machine ([`bucket::Bucket`]) holds the bucket's keys with 64-bit versions that never
//! reset, its lock table, and the transactions it takes part in. The machine is deterministic:
//! every replica applies the same commands and emits the same messages to other buckets, which
//! the host delivers (reliably, through per-channel sequence numbers and acknowledgements), so a
//! vote or a decision leaves a bucket only once it is committed in the bucket's log (the
//! thesis's "replicate before you act", §11.1). docs/protocols/sconekv.md maps every algorithm
//! of the thesis to its function here.

pub mod bucket;
pub mod channel;
pub mod locks;
pub mod machine;
pub mod route;
pub mod sim;
pub mod twopc;
pub mod txn;

pub use bucket::Bucket;
pub use channel::Out;
pub use machine::KvMachine;
pub use txn::{Cmd, Decided, Msg, Op, OpKind, Outcome, Reply, TxnId};

#[cfg(test)]
mod tests;

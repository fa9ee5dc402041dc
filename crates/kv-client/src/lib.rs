//! The client of synod's native key-value API (SconeKV): serializable multi-key transactions
//! over a sharded store, spoken over gRPC (`proto/synod_kv.proto`, generated into [`proto`]).
//!
//! The store hashes keys into buckets ([`Routing::bucket_of`]); each bucket is a replicated
//! group whose leader is its master. A transaction buffers its writes at the client and
//! records the version of every key it touched; at commit the store checks each version is
//! still current and runs two-phase commit between the buckets (sconekv.md §3, §5, §8.5).
//!
//! ```no_run
//! # async fn demo() -> synod_kv_client::Result<()> {
//! use synod_kv_client::{Client, Outcome};
//! let client = Client::connect(&["127.0.0.1:2479".to_string()]).await?;
//! let mut txn = client.begin().await?;
//! let balance = txn.get("alice").await?;          // one Read at the key's bucket master
//! txn.put("alice", "90").await?;                  // coalesced: no request, keeps the version
//! txn.put("bob", "110").await?;                   // one Read for bob's version; value buffered
//! match txn.commit().await? {                     // one CommitRequest, to the coordinator
//!     Outcome::Committed => println!("moved 10 (was {balance:?})"),
//!     Outcome::Aborted { reason } => println!("retry later: {reason}"),
//! }
//! let version = client.put("counter", "1").await?; // single-key fast path
//! # let _ = version; Ok(()) }
//! ```
//!
//! Modules, one job each: [`client`] (view, routing, retries, single-key operations), [`txn`]
//! (the read/write set and commit), [`history`] (the recorder hook for history checkers),
//! [`limits`], [`routing`], [`error`]; `transport` holds the gRPC channels and the retry
//! budget.
//!
//! **Retries.** Every request carries the client's view version. A node that answers
//! `STALE_VIEW`, `NOT_MASTER` or `WRONG_NODE` sends its view; the client keeps it if it is
//! newer, or takes its masters if it has the same version (a master can change without a new
//! view version: [`Routing::merge`]), and retries at once; if the view taught nothing, it
//! refreshes the view from another node and backs off. A bucket whose master is unknown is
//! sent to one of its replicas, which forwards a commit or write, or redirects a read.
//! Timeouts and `UNAVAILABLE` back off and retry, within [`ClientConfig::retries`]. A commit is
//! retried with the same id (the coordinator answers a repeated id with its decision); when the
//! retries run out after an attempt that may have arrived, the outcome is [`Error::Unknown`].
//! Single-key writes are not repeated after such an attempt (a repeated compare-and-set could
//! report its own write as a mismatch): they return [`Error::Unknown`] at once.

pub mod proto {
    //! The code generated from `proto/synod_kv.proto` (package `synod.kv.v1`): messages,
    //! [`kv_client::KvClient`] and the server trait [`kv_server::Kv`] with
    //! [`kv_server::KvServer`]. `bytes` fields are [`bytes::Bytes`].
    #![allow(clippy::all)]
    tonic::include_proto!("synod.kv.v1");
}

pub mod client;
pub mod error;
pub mod history;
pub mod limits;
pub mod routing;
mod transport;
pub mod txn;

pub use client::{Client, ClientConfig, ClientTls, Versioned};
pub use error::{Error, Result};
pub use history::{RecordedOp, RecordedOutcome, Recorder, TxnRecord};
pub use limits::{MAX_KEY_BYTES, MAX_TXN_OPS, MAX_VALUE_BYTES};
pub use proto::OpKind;
pub use routing::Routing;
pub use txn::{Outcome, Txn, TxnId};

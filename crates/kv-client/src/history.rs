//! The history recorder hook: for each finished transaction the client hands a [`TxnRecord`]
//! to the [`Recorder`] configured in [`crate::ClientConfig`]. A chaos tester collects them and
//! checks the history for serializability.
//!
//! A transaction is recorded exactly once, when it is finished: decided by a commit or an
//! abort, aborted locally, or dropped (a dropped transaction whose commit outcome was unknown
//! is recorded as [`RecordedOutcome::Unknown`]; one never committed as aborted). Single-key
//! operations outside transactions are not recorded.

use crate::proto::OpKind;
use crate::txn::TxnId;
use bytes::Bytes;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// How a recorded transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordedOutcome {
    Committed,
    /// Aborted by the store, by the client, or never committed: none of its writes applied.
    Aborted,
    /// The commit was sent and its outcome never learned: its writes may or may not apply.
    Unknown,
}

/// One operation of a recorded transaction.
///
/// A key that was read and then written appears twice, a `READ` (with the value read) followed
/// by the `WRITE` or `DELETE`, both with the version observed by the read (on the wire the two
/// are one op: the thesis's coalescing). Reads answered from the transaction's own buffer are
/// not recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedOp {
    pub key: Bytes,
    pub kind: OpKind,
    /// The version the transaction observed (0: never written); the commit validated it.
    /// 0, and not validated, for a blind write.
    pub version: u64,
    /// `READ`: the value read (`None`: absent or deleted). `WRITE`: the value written.
    /// `DELETE`: `None`.
    pub value: Option<Bytes>,
    /// A `WRITE` or `DELETE` without a version to validate ([`crate::Txn::put_blind`]).
    pub blind: bool,
    /// `WRITE` or `DELETE` of a committed transaction: the version it installed, when the
    /// server reported it (`CommitResponse.versions`).
    pub installed: Option<u64>,
}

/// A finished transaction.
#[derive(Clone, Debug)]
pub struct TxnRecord {
    pub id: TxnId,
    pub outcome: RecordedOutcome,
    pub ops: Vec<RecordedOp>,
    /// When `begin` returned.
    pub begun: Instant,
    /// When the outcome was known (or the transaction dropped).
    pub finished: Instant,
}

/// Receives each finished transaction. It is called on the task that finished it, so it
/// should be quick (push to a channel, append to a buffer).
#[derive(Clone)]
pub struct Recorder(Arc<dyn Fn(TxnRecord) + Send + Sync>);

impl Recorder {
    /// A recorder that calls `f`.
    pub fn new(f: impl Fn(TxnRecord) + Send + Sync + 'static) -> Recorder {
        Recorder(Arc::new(f))
    }

    /// A recorder that sends each record on `tx` (records are dropped once the receiver is).
    pub fn channel(tx: tokio::sync::mpsc::UnboundedSender<TxnRecord>) -> Recorder {
        Recorder::new(move |r| {
            let _ = tx.send(r);
        })
    }

    pub(crate) fn record(&self, r: TxnRecord) {
        (self.0)(r)
    }
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Recorder")
    }
}

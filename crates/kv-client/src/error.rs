//! The client's errors. The important distinction is between an operation that certainly had no
//! effect ([`Error::Unavailable`], [`Error::Rejected`], the client-side checks) and one whose
//! effect is not known ([`Error::Unknown`]): a commit or a single-key write that may or may not
//! have been applied.

use crate::proto;
use crate::txn::TxnId;
use std::fmt;

/// `Result` with the client's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Refused before anything was sent: an empty key, or a key, value or transaction beyond
    /// the limits of [`crate::limits`].
    InvalidArgument(String),
    /// A server refused the request as malformed (`INVALID`) or too large (`TOO_LARGE`). It had
    /// no effect.
    Rejected {
        /// `INVALID` or `TOO_LARGE`.
        code: proto::Error,
        detail: String,
    },
    /// No node served the request within the retries, and it certainly had no effect: a read,
    /// a view, a `Begin`, or a write that never reached a node.
    Unavailable(String),
    /// The outcome is not known: a commit, abort or single-key write was sent, and every
    /// attempt timed out or failed after it may have been applied. For a transaction,
    /// [`crate::Txn::commit`] may be called again (it is idempotent) or [`crate::Txn::abort`]
    /// asks the coordinator to decide.
    Unknown {
        /// The transaction, if it was one.
        txn: Option<TxnId>,
        detail: String,
    },
    /// An operation on a transaction in the wrong state: a read or write after `commit` or
    /// `abort`, or a commit of a transaction that is already decided.
    TxnState(String),
}

impl Error {
    /// True when the operation may have taken effect.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Error::Unknown { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Error::Rejected { code, detail } => {
                write!(
                    f,
                    "rejected by the server ({}): {detail}",
                    code.as_str_name()
                )
            }
            Error::Unavailable(s) => write!(f, "unavailable: {s}"),
            Error::Unknown {
                txn: Some(id),
                detail,
            } => {
                write!(f, "outcome of transaction {id} unknown: {detail}")
            }
            Error::Unknown { txn: None, detail } => write!(f, "outcome unknown: {detail}"),
            Error::TxnState(s) => write!(f, "transaction state: {s}"),
        }
    }
}

impl std::error::Error for Error {}

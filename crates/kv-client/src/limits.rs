//! The API's size limits, checked before anything is sent (the server enforces the same and
//! answers `TOO_LARGE`).

use crate::error::{Error, Result};

/// The store's own limits (`synod_kv::txn`), so client and server cannot drift apart: the
/// longest key and value in bytes, and the most keys in one transaction's read/write set.
pub use synod_kv::txn::{MAX_KEY_BYTES, MAX_OPS as MAX_TXN_OPS, MAX_VALUE_BYTES};

/// A key must be non-empty and at most [`MAX_KEY_BYTES`].
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("empty key".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "key of {} bytes, the limit is {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

/// A value must be at most [`MAX_VALUE_BYTES`].
pub fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::InvalidArgument(format!(
            "value of {} bytes, the limit is {MAX_VALUE_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

/// A transaction may hold at most [`MAX_TXN_OPS`] keys; `keys` is how many it would hold.
pub fn check_txn_ops(keys: usize) -> Result<()> {
    if keys > MAX_TXN_OPS {
        return Err(Error::InvalidArgument(format!(
            "a transaction of {keys} keys, the limit is {MAX_TXN_OPS}"
        )));
    }
    Ok(())
}

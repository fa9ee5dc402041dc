//! The API's size limits, checked before anything is sent (the server enforces the same and
//! answers `TOO_LARGE`).

use crate::error::{Error, Result};

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 4 << 10;
/// The longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// The most keys in one transaction's read/write set.
pub const MAX_TXN_OPS: usize = 1024;

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

//! synod's write-ahead log: the storage ops of every replication group a process runs, in one
//! log, so that one `fdatasync` serves every group with something to write.
//!
//! * [`segment`]: segment files and the record frame
//!   (`[u32 length][u32 CRC32C of the payload][payload]`, payload = type, group id, body).
//! * [`wal`]: the log itself: group commit ([`Wal::write_batch`]: one `write`, one
//!   `fdatasync`), recovery ([`Wal::open`]: a torn or corrupt tail ends the log there; nothing
//!   behind a bad record is applied), and compaction by unlinking whole segments that hold no
//!   live record, with the few live records of light groups copied forward (no rewriting of
//!   the log on the write path).
//! * [`typed`]: a group's ops encoded for the log, and its
//!   [`DurableState`](synod_core::DurableState) rebuilt from what the log replayed.

mod ahead;
mod deleter;
pub mod segment;
pub mod typed;
pub mod wal;

pub use segment::{snapshot_name, write_file_durably, MAX_RECORD};
pub use wal::{
    BatchStats, FsyncPolicy, OpBody, Recovery, Replayed, SnapRef, Wal, WalError, WalOp, WalOptions,
};

#[cfg(test)]
mod tests;

//! The WAL thread: every group's storage ops that arrived while the previous sync ran are
//! written as one batch with one `fdatasync` (group commit across groups), and each group is
//! told how far its ops are durable.

use super::HostInput;
use std::collections::BTreeMap;
use std::time::Instant;
use synod_core::GroupId;
use synod_log::{BatchStats, Wal, WalOp};
use tokio::sync::mpsc;

/// Storage ops of one group's step, each with the group's sequence number.
pub type WalBatch = Vec<(u64, WalOp)>;

/// A batch is durable.
#[derive(Debug)]
pub struct WalDone {
    /// For every group in the batch, the highest sequence number now durable.
    pub upto: Vec<(GroupId, u64)>,
    pub elapsed_us: u64,
    pub stats: BatchStats,
    pub log_bytes: u64,
    pub segments: usize,
}

/// Start the WAL thread; it stops when every sender is dropped or a write fails (then the host
/// is told, and stops the process: without a working log nothing may be acknowledged).
pub(crate) fn spawn(wal: Wal, host: mpsc::Sender<HostInput>) -> mpsc::UnboundedSender<WalBatch> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("synod-wal".into())
        .spawn(move || run(wal, rx, host))
        .expect("spawn the WAL thread");
    tx
}

fn run(mut wal: Wal, mut rx: mpsc::UnboundedReceiver<WalBatch>, host: mpsc::Sender<HostInput>) {
    while let Some(mut batch) = rx.blocking_recv() {
        while let Ok(more) = rx.try_recv() {
            batch.extend(more);
        }
        if batch.is_empty() {
            continue;
        }
        let mut upto: BTreeMap<GroupId, u64> = BTreeMap::new();
        let ops: Vec<WalOp> = batch
            .into_iter()
            .map(|(seq, op)| {
                let e = upto.entry(op.group).or_insert(seq);
                *e = (*e).max(seq);
                op
            })
            .collect();
        let started = Instant::now();
        let msg = match wal.write_batch(&ops) {
            Ok(stats) => HostInput::Durable(WalDone {
                upto: upto.into_iter().collect(),
                elapsed_us: started.elapsed().as_micros() as u64,
                stats,
                log_bytes: wal.log_bytes(),
                segments: wal.segments(),
            }),
            Err(e) => HostInput::WalFailed(e.to_string()),
        };
        let failed = matches!(msg, HostInput::WalFailed(_));
        if host.blocking_send(msg).is_err() || failed {
            return;
        }
    }
}

//! A group's view of the shared log: its storage ops encoded for the log, and its
//! [`DurableState`] rebuilt from what the log replayed.

use crate::wal::{load_snapshot, OpBody, Replayed, SnapRef, WalError, WalOp};
use std::path::Path;
use synod_core::wire::Wire;
use synod_core::{DurableState, GroupId, LogRecord, StorageOp};

/// Encode one storage op of `group` for the log.
pub fn encode<R, H>(group: GroupId, op: &StorageOp<R, H>) -> WalOp
where
    R: LogRecord + Wire,
    H: Wire,
{
    let body = match op {
        StorageOp::SetHard(h) => OpBody::Hard(h.to_bytes()),
        StorageOp::Append(rs) => {
            // Every record into one buffer, then a slice each: one allocation per op.
            let mut buf = bytes::BytesMut::new();
            let mut ends = Vec::with_capacity(rs.len());
            for r in rs {
                r.encode(&mut buf);
                ends.push((r.key(), buf.len()));
            }
            let all = buf.freeze();
            let mut start = 0;
            OpBody::Append {
                records: ends
                    .into_iter()
                    .map(|(key, end)| {
                        let b = all.slice(start..end);
                        start = end;
                        (key, b)
                    })
                    .collect(),
            }
        }
        StorageOp::Truncate { after_key } => OpBody::Truncate {
            after_key: *after_key,
        },
        StorageOp::Snapshot {
            snapshot,
            drop_through,
            replace_log,
        } => OpBody::Snapshot {
            snapshot: snapshot.clone(),
            drop_through: *drop_through,
            drop_key: R::key_of(*drop_through),
            replace_log: *replace_log,
        },
    };
    WalOp { group, body }
}

/// Decode one storage op as its group wrote it (the inverse of [`encode`]): what a disk that
/// holds the log's ops by value (the simulator's) applies with [`DurableState::apply`].
pub fn decode<R, H>(op: &WalOp) -> Result<StorageOp<R, H>, synod_core::wire::WireError>
where
    R: LogRecord + Wire,
    H: Wire,
{
    Ok(match &op.body {
        OpBody::Hard(b) => StorageOp::SetHard(H::from_bytes(b.clone())?),
        OpBody::Append { records } => StorageOp::Append(
            records
                .iter()
                .map(|(key, b)| {
                    let r = R::from_bytes(b.clone())?;
                    if r.key() != *key {
                        return Err(synod_core::wire::WireError::Invalid("record key"));
                    }
                    Ok(r)
                })
                .collect::<Result<_, _>>()?,
        ),
        OpBody::Truncate { after_key } => StorageOp::Truncate {
            after_key: *after_key,
        },
        OpBody::Snapshot {
            snapshot,
            drop_through,
            drop_key,
            replace_log,
        } => {
            if *drop_key != R::key_of(*drop_through) {
                return Err(synod_core::wire::WireError::Invalid("snapshot drop key"));
            }
            StorageOp::Snapshot {
                snapshot: snapshot.clone(),
                drop_through: *drop_through,
                replace_log: *replace_log,
            }
        }
    })
}

/// Rebuild `group`'s durable state from its replayed ops, exactly as
/// [`DurableState::apply`] would have built it, and load the snapshot it ends with.
pub fn rebuild<R, H>(
    dir: &Path,
    group: GroupId,
    ops: Vec<Replayed>,
) -> Result<DurableState<R, H>, WalError>
where
    R: LogRecord + Wire,
    H: Wire + Clone + Default,
{
    let corrupt = |what: &str, e: synod_core::wire::WireError| {
        WalError::Corrupt(format!(
            "group {group}: a {what} record with a valid checksum cannot be decoded ({e}): \
             written by another protocol or version?"
        ))
    };
    let mut state: DurableState<R, H> = DurableState::default();
    let mut snap: Option<SnapRef> = None;
    for op in ops {
        match op {
            Replayed::Hard(b) => {
                state.hard = H::from_bytes(b).map_err(|e| corrupt("hard state", e))?;
            }
            Replayed::Append { records } => {
                for (key, bytes) in records {
                    let r = R::from_bytes(bytes).map_err(|e| corrupt("log", e))?;
                    if r.key() != key {
                        return Err(WalError::Corrupt(format!(
                            "group {group}: a record filed under key {key} has key {}",
                            r.key()
                        )));
                    }
                    state.records.insert(key, r);
                }
            }
            Replayed::Truncate { after_key } => {
                if let Some(first) = after_key.checked_add(1) {
                    state.records.split_off(&first);
                }
            }
            Replayed::Snapshot {
                snap: s,
                drop_through,
                drop_key,
                replace_log,
            } => {
                if replace_log {
                    state.records.clear();
                    state.log_base = s.at;
                } else {
                    drop_through_key(&mut state, drop_key);
                    if drop_through.slot > state.log_base.slot {
                        state.log_base = drop_through;
                    }
                }
                snap = Some(s);
            }
            Replayed::Checkpoint {
                hard,
                snap: s,
                log_base,
            } => {
                if let Some(h) = hard {
                    state.hard = H::from_bytes(h).map_err(|e| corrupt("checkpoint", e))?;
                }
                snap = s;
                state.log_base = log_base;
            }
        }
    }
    state.snapshot = match snap {
        Some(r) => Some(load_snapshot(dir, group, &r)?),
        None => None,
    };
    Ok(state)
}

fn drop_through_key<R, H>(state: &mut DurableState<R, H>, key: u64) {
    match key.checked_add(1) {
        Some(first) => state.records = state.records.split_off(&first),
        None => state.records.clear(),
    }
}

use super::*;
use synod_core::Command;
use synod_zab::{Entry, Hard, Zxid};

type ZabWal = Wal<Entry, Hard>;

fn opts(dir: &Path) -> WalOptions {
    WalOptions {
        dir: dir.to_path_buf(),
        segment_bytes: 1 << 20,
        fsync: FsyncPolicy::Always,
        preallocate_bytes: 4096,
    }
}

/// Length of a segment without its zero padding.
fn logical_len(data: &[u8]) -> usize {
    data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

fn entry(slot: u64) -> Entry {
    Entry {
        zxid: Zxid::new(1, slot as u32),
        slot,
        command: Command {
            id: slot,
            payload: Bytes::from(vec![7u8; 100]),
        },
    }
}

fn ops(seq0: u64, ops: Vec<StorageOp<Entry, Hard>>) -> Vec<Persist<Entry, Hard>> {
    ops.into_iter()
        .enumerate()
        .map(|(i, op)| Persist {
            seq: seq0 + i as u64,
            op,
        })
        .collect()
}

fn hard(e: u32) -> Hard {
    Hard {
        accepted_epoch: e,
        accepted_leader: 1,
        current_epoch: e,
        led_epoch: 0,
    }
}

#[test]
fn replays_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, state, _) = ZabWal::open(opts(dir.path())).unwrap();
        assert!(state.records.is_empty());
        wal.write_batch(&ops(
            1,
            vec![
                StorageOp::SetHard(hard(3)),
                StorageOp::Append((1..=5).map(entry).collect()),
                StorageOp::Truncate { after_slot: 3 },
                StorageOp::Append(vec![entry(4)]),
            ],
        ))
        .unwrap();
    }
    let (_, state, rec) = ZabWal::open(opts(dir.path())).unwrap();
    assert!(rec.warnings.is_empty());
    assert_eq!(state.hard, hard(3));
    assert_eq!(
        state.records.iter().map(|e| e.slot).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}

#[test]
fn a_corrupt_or_torn_tail_ends_the_log_and_is_truncated() {
    for damage in ["flip", "torn"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut wal, _, _) = ZabWal::open(opts(dir.path())).unwrap();
            for s in 1..=10 {
                wal.write_batch(&ops(s, vec![StorageOp::Append(vec![entry(s)])]))
                    .unwrap();
            }
        }
        let seg = dir.path().join(segment_name(1));
        let mut data = fs::read(&seg).unwrap();
        let len = logical_len(&data);
        match damage {
            "flip" => data[len - 20] ^= 0x40,
            _ => data.truncate(len - 30),
        }
        fs::write(&seg, &data).unwrap();
        let (mut wal, state, rec) = ZabWal::open(opts(dir.path())).unwrap();
        assert_eq!(
            state.records.len(),
            9,
            "{damage}: the damaged last record is dropped"
        );
        assert_eq!(rec.warnings.len(), 1, "{damage}: {:?}", rec.warnings);
        // The log goes on from the good prefix.
        wal.write_batch(&ops(11, vec![StorageOp::Append(vec![entry(10)])]))
            .unwrap();
        drop(wal);
        let (_, state, rec) = ZabWal::open(opts(dir.path())).unwrap();
        assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
        assert_eq!(state.records.len(), 10);
    }
}

#[test]
fn records_after_a_damaged_segment_are_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.segment_bytes = 300; // roughly two records a segment
    {
        let (mut wal, _, _) = ZabWal::open(o.clone()).unwrap();
        for s in 1..=10 {
            wal.write_batch(&ops(s, vec![StorageOp::Append(vec![entry(s)])]))
                .unwrap();
        }
    }
    let segs = list(dir.path(), "wal-", ".log").unwrap();
    assert!(segs.len() >= 4);
    let mut data = fs::read(&segs[1].1).unwrap();
    data[10] ^= 1;
    fs::write(&segs[1].1, &data).unwrap();
    let (_, state, rec) = ZabWal::open(o).unwrap();
    let slots: Vec<u64> = state.records.iter().map(|e| e.slot).collect();
    assert_eq!(
        slots,
        (1..=slots.len() as u64).collect::<Vec<_>>(),
        "a dense prefix"
    );
    assert!(slots.len() < 4, "{slots:?}");
    assert!(rec.warnings.len() >= 2, "{:?}", rec.warnings);
    assert_eq!(list(dir.path(), "wal-", ".log").unwrap().len(), 2);
}

#[test]
fn snapshots_compact_the_log_and_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let snap = Snapshot {
        at: Position {
            slot: 80,
            tag: Zxid::new(1, 80).as_u64(),
        },
        data: Bytes::from_static(b"the state at slot 80"),
    };
    {
        let (mut wal, _, _) = ZabWal::open(opts(dir.path())).unwrap();
        wal.write_batch(&ops(
            1,
            vec![
                StorageOp::SetHard(hard(1)),
                StorageOp::Append((1..=100).map(entry).collect()),
            ],
        ))
        .unwrap();
        let before = wal.log_bytes();
        wal.write_batch(&ops(
            3,
            vec![StorageOp::Snapshot {
                snapshot: snap.clone(),
                drop_through: entry(70).point().position(),
                replace_log: false,
            }],
        ))
        .unwrap();
        assert!(
            wal.log_bytes() < before / 2,
            "{} vs {before}",
            wal.log_bytes()
        );
        assert_eq!(list(dir.path(), "wal-", ".log").unwrap().len(), 1);
    }
    let (_, state, rec) = ZabWal::open(opts(dir.path())).unwrap();
    assert!(rec.warnings.is_empty());
    assert_eq!(state.snapshot, Some(snap));
    assert_eq!(state.log_base.slot, 70);
    assert_eq!(state.records.first().unwrap().slot, 71);
    assert_eq!(state.records.len(), 30);
    assert_eq!(state.hard, hard(1));
}

#[test]
fn a_damaged_snapshot_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let snap = Snapshot {
        at: Position { slot: 5, tag: 5 },
        data: Bytes::from_static(b"state"),
    };
    {
        let (mut wal, _, _) = ZabWal::open(opts(dir.path())).unwrap();
        wal.write_batch(&ops(
            1,
            vec![
                StorageOp::Append((1..=5).map(entry).collect()),
                StorageOp::Snapshot {
                    snapshot: snap,
                    drop_through: entry(5).point().position(),
                    replace_log: false,
                },
            ],
        ))
        .unwrap();
    }
    fs::write(dir.path().join(snapshot_name(5)), b"STATE").unwrap();
    let err = ZabWal::open(opts(dir.path())).err().expect("must refuse");
    assert!(err.to_string().contains("damaged"), "{err}");
}

#[test]
fn a_preallocated_log_ends_cleanly_at_its_padding_and_appends_after_its_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.preallocate_bytes = 1 << 16;
    for round in 0..3u64 {
        let (mut wal, state, rec) = ZabWal::open(o.clone()).unwrap();
        assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
        assert_eq!(state.records.len() as u64, round * 5);
        for s in round * 5 + 1..=round * 5 + 5 {
            wal.write_batch(&ops(s, vec![StorageOp::Append(vec![entry(s)])]))
                .unwrap();
        }
    }
    let seg = dir.path().join(segment_name(1));
    let data = fs::read(&seg).unwrap();
    assert!(data.len() as u64 >= 1 << 16, "the segment is padded");
    let (_, state, _) = ZabWal::open(o.clone()).unwrap();
    assert_eq!(
        state.records.iter().map(|e| e.slot).collect::<Vec<_>>(),
        (1..=15).collect::<Vec<_>>(),
        "no record was written after the padding and none lost"
    );
    // Rolling to a new segment gives the old one's padding back.
    o.segment_bytes = 1;
    {
        let (mut wal, _, _) = ZabWal::open(o.clone()).unwrap();
        wal.write_batch(&ops(16, vec![StorageOp::Append(vec![entry(16)])]))
            .unwrap();
    }
    let data = fs::read(&seg).unwrap();
    assert_eq!(data.len(), logical_len(&data), "closed segment trimmed");
    let (_, state, rec) = ZabWal::open(o).unwrap();
    assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
    assert_eq!(state.records.len(), 16);
}

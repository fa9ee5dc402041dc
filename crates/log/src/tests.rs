use crate::segment::{list_segments, segment_name, snapshot_name};
use crate::{typed, FsyncPolicy, Recovery, Wal, WalOp, WalOptions};
use bytes::{Bytes, BytesMut};
use std::fs;
use std::path::Path;
use synod_core::rng::CoreRng;
use synod_core::{Command, DurableState, Position, Snapshot, StorageOp};
use synod_zab::{Entry, Hard, Zxid};

type Op = StorageOp<Entry, Hard>;
type State = DurableState<Entry, Hard>;

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
        config: None,
    }
}

fn hard(e: u32) -> Hard {
    Hard {
        accepted_epoch: e,
        accepted_leader: 1,
        current_epoch: e,
        led_epoch: 0,
        recovering: false,
        config: None,
    }
}

fn snap(slot: u64) -> Snapshot {
    Snapshot {
        at: Position {
            slot,
            tag: Zxid::new(1, slot as u32).as_u64(),
        },
        data: Bytes::from(format!("the state at slot {slot}")),
    }
}

fn write(wal: &mut Wal, group: u32, ops: Vec<Op>) {
    let ops: Vec<WalOp> = ops.iter().map(|o| typed::encode(group, o)).collect();
    wal.write_batch(&ops).unwrap();
}

/// The op a core issues after snapshotting at `at`, keeping the log through `through`.
fn compact(at: u64, through: u64) -> Op {
    StorageOp::Snapshot {
        snapshot: snap(at),
        drop_through: entry(through).point().position(),
        replace_log: false,
    }
}

fn open(o: &WalOptions) -> (Wal, Recovery) {
    Wal::open(o.clone()).unwrap()
}

fn state(dir: &Path, rec: &mut Recovery, group: u32) -> State {
    typed::rebuild(dir, group, rec.groups.remove(&group).unwrap_or_default()).unwrap()
}

fn keys(s: &State) -> Vec<u64> {
    s.records.keys().copied().collect()
}

#[test]
fn replays_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, rec) = open(&opts(dir.path()));
        assert!(rec.groups.is_empty());
        write(
            &mut wal,
            0,
            vec![
                StorageOp::SetHard(hard(3)),
                StorageOp::Append((1..=5).map(entry).collect()),
                StorageOp::Truncate { after_key: 3 },
                StorageOp::Append(vec![entry(4)]),
            ],
        );
    }
    let (_, mut rec) = open(&opts(dir.path()));
    assert!(rec.warnings.is_empty());
    let s = state(dir.path(), &mut rec, 0);
    assert_eq!(s.hard, hard(3));
    assert_eq!(keys(&s), vec![1, 2, 3, 4]);
}

#[test]
fn groups_share_the_log_and_each_gets_back_its_own_state() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(&opts(dir.path()));
        // One batch, one fsync, three groups.
        let batch: Vec<WalOp> = vec![
            typed::encode(0, &Op::SetHard(hard(1))),
            typed::encode(7, &Op::Append(vec![entry(1), entry(2)])),
            typed::encode(0, &Op::Append(vec![entry(1)])),
            typed::encode(9, &Op::Append(vec![entry(5)])),
            typed::encode(7, &Op::Truncate { after_key: 1 }),
        ];
        let stats = wal.write_batch(&batch).unwrap();
        assert_eq!(stats.records, 5);
    }
    let (_, mut rec) = open(&opts(dir.path()));
    assert_eq!(
        rec.groups.keys().copied().collect::<Vec<_>>(),
        vec![0, 7, 9]
    );
    let g0 = state(dir.path(), &mut rec, 0);
    assert_eq!((g0.hard.clone(), keys(&g0)), (hard(1), vec![1]));
    let g7 = state(dir.path(), &mut rec, 7);
    assert_eq!((g7.hard.clone(), keys(&g7)), (Hard::default(), vec![1]));
    assert_eq!(keys(&state(dir.path(), &mut rec, 9)), vec![5]);
}

#[test]
fn a_corrupt_or_torn_tail_ends_the_log_and_is_truncated() {
    for damage in ["flip", "torn"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut wal, _) = open(&opts(dir.path()));
            for s in 1..=10 {
                write(&mut wal, 0, vec![StorageOp::Append(vec![entry(s)])]);
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
        let (mut wal, mut rec) = open(&opts(dir.path()));
        assert_eq!(
            state(dir.path(), &mut rec, 0).records.len(),
            9,
            "{damage}: the damaged last record is dropped"
        );
        assert_eq!(rec.warnings.len(), 1, "{damage}: {:?}", rec.warnings);
        // The log goes on from the good prefix.
        write(&mut wal, 0, vec![StorageOp::Append(vec![entry(10)])]);
        drop(wal);
        let (_, mut rec) = open(&opts(dir.path()));
        assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
        assert_eq!(state(dir.path(), &mut rec, 0).records.len(), 10);
    }
}

#[test]
fn records_after_a_damaged_segment_are_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.segment_bytes = 300; // roughly two records a segment
    {
        let (mut wal, _) = open(&o);
        for s in 1..=10 {
            write(&mut wal, 0, vec![StorageOp::Append(vec![entry(s)])]);
        }
    }
    let segs = list_segments(dir.path()).unwrap();
    assert!(segs.len() >= 4);
    let mut data = fs::read(&segs[1].1).unwrap();
    data[30] ^= 1;
    fs::write(&segs[1].1, &data).unwrap();
    let (_, mut rec) = open(&o);
    let slots = keys(&state(dir.path(), &mut rec, 0));
    assert_eq!(
        slots,
        (1..=slots.len() as u64).collect::<Vec<_>>(),
        "a dense prefix"
    );
    assert!(slots.len() < 4, "{slots:?}");
    assert!(rec.warnings.len() >= 2, "{:?}", rec.warnings);
    // The segments after the damaged one are gone; the log goes on in a new segment.
    let after: Vec<u64> = list_segments(dir.path())
        .unwrap()
        .into_iter()
        .map(|(i, _)| i)
        .filter(|&i| i > segs[1].0)
        .collect();
    assert_eq!(after, vec![segs[1].0 + 1], "{segs:?}");
}

#[test]
fn snapshots_free_whole_segments_and_the_state_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.segment_bytes = 2_000; // about 10 entries a segment
    {
        let (mut wal, _) = open(&o);
        write(&mut wal, 0, vec![StorageOp::SetHard(hard(1))]);
        for s in 1..=100 {
            write(&mut wal, 0, vec![StorageOp::Append(vec![entry(s)])]);
        }
        let before = (wal.log_bytes(), wal.segments());
        assert!(before.1 >= 8, "{before:?}");
        write(&mut wal, 0, vec![compact(80, 70)]);
        // Every segment holding only entries up to 70 is gone; nothing was rewritten.
        assert!(
            wal.segments() <= 5 && wal.log_bytes() < before.0 / 2,
            "{} segments, {} bytes (before {before:?})",
            wal.segments(),
            wal.log_bytes()
        );
    }
    let (_, mut rec) = open(&o);
    assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
    let s = state(dir.path(), &mut rec, 0);
    assert_eq!(s.snapshot, Some(snap(80)));
    assert_eq!(s.log_base.slot, 70);
    assert_eq!(keys(&s), (71..=100).collect::<Vec<_>>());
    // The hard state was written in a segment that is gone: a checkpoint carries it.
    assert_eq!(s.hard, hard(1));
}

#[test]
fn a_segment_stays_while_any_group_still_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.segment_bytes = 2_000;
    let (mut wal, _) = open(&o);
    // Group 1 writes a few entries in the first segment (more than an eighth of a segment, so
    // it is not light and nothing copies them forward), then group 0 fills several.
    write(
        &mut wal,
        1,
        vec![StorageOp::Append((1..=3).map(entry).collect())],
    );
    for s in 1..=60 {
        write(&mut wal, 0, vec![StorageOp::Append(vec![entry(s)])]);
    }
    let first = list_segments(dir.path()).unwrap()[0].0;
    write(&mut wal, 0, vec![compact(60, 60)]);
    wal.settle();
    assert_eq!(
        list_segments(dir.path()).unwrap()[0].0,
        first,
        "group 1's entry pins the first segment"
    );
    write(&mut wal, 1, vec![compact(3, 3)]);
    wal.settle();
    assert!(list_segments(dir.path()).unwrap()[0].0 > first);
    assert_eq!(wal.segments(), 1);
    drop(wal);
    let (_, mut rec) = open(&o);
    assert!(keys(&state(dir.path(), &mut rec, 0)).is_empty());
    assert_eq!(state(dir.path(), &mut rec, 1).snapshot, Some(snap(3)));
}

/// A group that writes little and never compacts does not keep the log alive: its live records
/// are copied forward, and the old segments go once every other group is past them. Restarts
/// in between give every group its state back.
#[test]
fn a_light_group_never_pins_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.segment_bytes = 2_000;
    let (mut wal, _) = open(&o);
    write(
        &mut wal,
        1,
        vec![
            StorageOp::SetHard(hard(9)),
            StorageOp::Append(vec![entry(1)]),
        ],
    );
    for round in 0..3u64 {
        for s in round * 100 + 1..=round * 100 + 100 {
            write(&mut wal, 0, vec![StorageOp::Append(vec![entry(s)])]);
        }
        let at = round * 100 + 100;
        write(&mut wal, 0, vec![compact(at, at - 5)]);
        wal.settle();
        assert!(
            wal.segments() <= 3,
            "round {round}: {} segments on disk",
            wal.segments()
        );
        drop(wal);
        let (w, mut rec) = open(&o);
        let g1 = state(dir.path(), &mut rec, 1);
        assert_eq!((keys(&g1), g1.hard), (vec![1], hard(9)), "round {round}");
        assert_eq!(
            keys(&state(dir.path(), &mut rec, 0)),
            (at - 4..=at).collect::<Vec<_>>()
        );
        wal = w;
    }
}

/// A crash while a new segment was being started leaves it without its checkpoints: the next
/// start begins yet another segment, with them, so that unlinking the older segments can never
/// lose a group's hard state or snapshot.
#[test]
fn a_segment_torn_while_it_was_started_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.segment_bytes = 2_000;
    {
        let (mut wal, _) = open(&o);
        write(&mut wal, 0, vec![StorageOp::SetHard(hard(7))]);
        write(&mut wal, 1, vec![compact(5, 5)]);
    }
    // The next segment got its header and nothing else before the crash.
    let last = list_segments(dir.path()).unwrap().last().unwrap().0;
    let mut header = BytesMut::new();
    crate::segment::encode_record(&crate::segment::header_payload(), &mut header);
    fs::write(dir.path().join(segment_name(last + 1)), &header).unwrap();
    for _ in 0..2 {
        let (mut wal, _) = open(&o);
        // Enough of group 0's traffic, compacted, for every older segment to go.
        for s in 1..=60 {
            write(&mut wal, 0, vec![StorageOp::Append(vec![entry(s)])]);
        }
        write(&mut wal, 0, vec![compact(60, 60)]);
        wal.settle();
    }
    let (_, mut rec) = open(&o);
    assert!(
        list_segments(dir.path()).unwrap()[0].0 > last + 1,
        "the old ones are gone"
    );
    assert_eq!(state(dir.path(), &mut rec, 0).hard, hard(7));
    assert_eq!(state(dir.path(), &mut rec, 1).snapshot, Some(snap(5)));
}

/// Bytes that a crash left past the log's clean end (a zero record header, then what looks
/// like a record) are never read, and nothing is ever written over them to make them valid.
#[test]
fn bytes_past_a_zero_header_are_never_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(dir.path());
    {
        let (mut wal, _) = open(&o);
        write(&mut wal, 0, vec![StorageOp::Append(vec![entry(1)])]);
    }
    // A record of entry 9, after 16 zero bytes, at the end of the last segment.
    let seg = list_segments(dir.path()).unwrap().last().unwrap().1.clone();
    let mut data = fs::read(&seg).unwrap();
    let end = logical_len(&data);
    data.truncate(end);
    data.extend_from_slice(&[0u8; 16]);
    let mut stray = BytesMut::new();
    let op = typed::encode(0, &Op::Append(vec![entry(9)]));
    crate::wal::encode_stray(&op, &mut stray);
    data.extend_from_slice(&stray);
    fs::write(&seg, &data).unwrap();
    for round in 0..3 {
        let (mut wal, mut rec) = open(&o);
        assert_eq!(
            keys(&state(dir.path(), &mut rec, 0)),
            (1..=round + 1).collect::<Vec<_>>(),
            "round {round}"
        );
        write(&mut wal, 0, vec![StorageOp::Append(vec![entry(round + 2)])]);
    }
}

#[test]
fn only_the_latest_snapshot_file_of_a_group_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(&opts(dir.path()));
    for (group, slot) in [(0, 5), (1, 5), (0, 9)] {
        write(&mut wal, group, vec![compact(slot, slot)]);
    }
    wal.settle();
    let exists = |g, s| dir.path().join(snapshot_name(g, s)).exists();
    assert!(!exists(0, 5) && exists(0, 9) && exists(1, 5));
}

#[test]
fn a_damaged_snapshot_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(&opts(dir.path()));
        write(
            &mut wal,
            0,
            vec![
                StorageOp::Append((1..=5).map(entry).collect()),
                StorageOp::Snapshot {
                    snapshot: snap(5),
                    drop_through: entry(5).point().position(),
                    replace_log: false,
                },
            ],
        );
    }
    fs::write(dir.path().join(snapshot_name(0, 5)), b"the state at slot 6").unwrap();
    let (_, mut rec) = open(&opts(dir.path()));
    let err = typed::rebuild::<Entry, Hard>(dir.path(), 0, rec.groups.remove(&0).unwrap())
        .expect_err("must refuse");
    assert!(err.to_string().contains("damaged"), "{err}");
}

#[test]
fn a_record_that_passes_its_checksum_but_cannot_be_decoded_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(&opts(dir.path()));
        // Group 0's "hard state" is three bytes: not a Zab hard state.
        wal.write_batch(&[WalOp {
            group: 0,
            body: crate::OpBody::Hard(Bytes::from_static(b"odd")),
        }])
        .unwrap();
    }
    let (_, mut rec) = open(&opts(dir.path()));
    let err = typed::rebuild::<Entry, Hard>(dir.path(), 0, rec.groups.remove(&0).unwrap())
        .expect_err("must refuse");
    assert!(err.to_string().contains("cannot be decoded"), "{err}");
}

#[test]
fn a_log_of_the_first_format_is_refused_with_an_explanation() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("wal-00000001.log"), b"old").unwrap();
    let err = Wal::open(opts(dir.path())).err().expect("must refuse");
    assert!(err.to_string().contains("earlier synod format"), "{err}");
}

#[test]
fn a_preallocated_log_ends_cleanly_at_its_padding_and_closed_segments_are_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path());
    o.preallocate_bytes = 1 << 16;
    // Small segments, and a group heavy for them (more than an eighth of a segment of live
    // records), so that nothing is copied forward and the segments stay.
    o.segment_bytes = 2_000;
    for round in 0..3u64 {
        let (mut wal, mut rec) = open(&o);
        assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
        assert_eq!(
            state(dir.path(), &mut rec, 0).records.len() as u64,
            round * 5
        );
        for s in round * 5 + 1..=round * 5 + 5 {
            write(&mut wal, 0, vec![StorageOp::Append(vec![entry(s)])]);
        }
    }
    let segs = list_segments(dir.path()).unwrap();
    let (newest, older) = segs.split_last().unwrap();
    let data = fs::read(&newest.1).unwrap();
    assert!(data.len() as u64 >= 1 << 16, "the segment in use is padded");
    for (_, path) in older {
        let data = fs::read(path).unwrap();
        assert_eq!(data.len(), logical_len(&data), "{path:?} trimmed");
    }
    let (_, mut rec) = open(&o);
    assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
    assert_eq!(
        keys(&state(dir.path(), &mut rec, 0)),
        (1..=15).collect::<Vec<_>>(),
        "no record was written after the padding and none lost"
    );
}

/// Random ops of three groups (appends in any key order, rewrites, truncations, snapshots,
/// state transfers), small segments so that rolls and deletions happen all the time, and a
/// restart after every few batches: each group's rebuilt state always equals the contract's
/// reference model (`DurableState::apply` of every op).
#[test]
fn random_histories_of_many_groups_replay_to_the_reference_model() {
    for seed in 0..40u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = CoreRng::new(seed);
        let mut o = opts(dir.path());
        o.segment_bytes = 500 + rng.below(3_000);
        o.preallocate_bytes = rng.below(2) * 1024;
        let mut model: Vec<State> = vec![State::default(); 3];
        let mut wal = open(&o).0;
        for step in 0..120 {
            let mut batch = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let g = rng.below(3) as usize;
                let base = model[g].log_base.slot;
                let op = match rng.below(10) {
                    0 => Op::SetHard(hard(rng.below(100) as u32)),
                    1 => Op::Truncate {
                        after_key: base + rng.below(30),
                    },
                    2 => {
                        let at = base + rng.below(20);
                        Op::Snapshot {
                            snapshot: snap(at),
                            drop_through: entry(at).point().position(),
                            replace_log: rng.below(4) == 0,
                        }
                    }
                    _ => Op::Append(
                        (0..1 + rng.below(3))
                            .map(|_| entry(base + 1 + rng.below(40)))
                            .collect(),
                    ),
                };
                model[g].apply(&op);
                batch.push(typed::encode(g as u32, &op));
            }
            wal.write_batch(&batch).unwrap();
            if step % 7 == 6 {
                drop(wal);
                let (w, mut rec) = open(&o);
                assert!(rec.warnings.is_empty(), "seed {seed}: {:?}", rec.warnings);
                for (g, m) in model.iter().enumerate() {
                    let s = state(dir.path(), &mut rec, g as u32);
                    assert_eq!(keys(&s), keys(m), "seed {seed} step {step} group {g}");
                    assert_eq!(s.hard, m.hard, "seed {seed} step {step} group {g}");
                    assert_eq!(s.snapshot, m.snapshot, "seed {seed} step {step} group {g}");
                    assert_eq!(s.log_base, m.log_base, "seed {seed} step {step} group {g}");
                }
                wal = w;
            }
        }
    }
}

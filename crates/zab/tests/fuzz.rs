//! Hostile input for Zab's decoders: peer messages (`Msg`, `Wire::from_bytes` as the transport
//! calls it) and the write-ahead log's records and hard state. Inputs are random bytes and
//! mutations of valid encodings (bit flips, truncations, splices, forged lengths and counts).
//! The property: no panic, a value or an error, and no allocation sized by a claimed length
//! rather than by the input.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use synod_core::wire::Wire;
use synod_core::{Command, Position, Snapshot};
use synod_zab::{Entry, Hard, LogSummary, Msg, PeerState, Point, SyncMode, Vote, Zxid};

// ------------------------------------------------------------------ allocation probe

/// Records the largest single allocation of the current thread while armed.
struct Probe;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: every method forwards to the system allocator with the same arguments; the probe
// only records the requested size in a thread-local cell (no allocation inside).
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static PROBE: Probe = Probe;

/// Run `f` and check that no single allocation it made exceeds what the input can justify.
fn bounded<T>(input_len: usize, f: impl FnOnce() -> T) -> T {
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let v = f();
    ARMED.with(|a| a.set(false));
    let largest = LARGEST.with(|l| l.get());
    let limit = 64 * input_len + (256 << 10);
    assert!(
        largest <= limit,
        "an allocation of {largest} bytes from {input_len} bytes of input"
    );
    v
}

// ------------------------------------------------------------------ mutations

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    /// Overwrite 4 bytes with a length-like value (forged counts and lengths).
    Forge(usize, u32),
    /// Replace the tail with the tail of another valid encoding.
    Splice(usize, usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let forged = prop_oneof![
        Just(u32::MAX),
        Just(i32::MAX as u32),
        Just(0x8000_0000),
        Just(1 << 20),
        Just(1 << 24),
        Just(0),
        Just(1),
        any::<u32>(),
    ];
    prop_oneof![
        3 => (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::Flip(p, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(p, v)| Mutation::Insert(p, v)),
        2 => (any::<usize>(), forged).prop_map(|(p, v)| Mutation::Forge(p, v)),
        1 => (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(o, a, b)| Mutation::Splice(o, a, b)),
    ]
}

fn mutate(base: &[u8], muts: &[Mutation], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut v = base.to_vec();
    for m in muts {
        match m {
            Mutation::Flip(p, b) if !v.is_empty() => {
                let i = p % v.len();
                v[i] ^= 1 << b;
            }
            Mutation::Truncate(p) => v.truncate(p % (v.len() + 1)),
            Mutation::Insert(p, bytes) => {
                let i = p % (v.len() + 1);
                v.splice(i..i, bytes.iter().copied());
            }
            Mutation::Forge(p, val) if v.len() >= 4 => {
                let i = p % (v.len() - 3);
                v[i..i + 4].copy_from_slice(&val.to_be_bytes());
            }
            Mutation::Splice(o, a, b) => {
                let other = &corpus[o % corpus.len()];
                let cut = a % (v.len() + 1);
                let from = b % (other.len() + 1);
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    v
}

// ------------------------------------------------------------------ valid encodings

fn samples() -> Vec<Msg> {
    let z = Zxid::new(3, 7);
    let p = Point { zxid: z, slot: 99 };
    let cmd = Command {
        id: 5,
        payload: Bytes::from_static(b"payload"),
    };
    let entry = Entry {
        zxid: z,
        slot: 99,
        command: cmd.clone(),
    };
    vec![
        Msg::Notification {
            round: 4,
            vote: Vote {
                epoch: 2,
                zxid: z,
                leader: 3,
            },
            state: PeerState::Following,
        },
        Msg::FollowerInfo {
            accepted_epoch: 3,
            accepted_leader: 1,
        },
        Msg::NewEpoch { epoch: 4 },
        Msg::AckEpoch {
            epoch: 4,
            current_epoch: 3,
            summary: LogSummary {
                base: p,
                epochs: vec![(3, 9), (4, 1)],
                overflow: false,
            },
        },
        Msg::Sync {
            epoch: 4,
            mode: SyncMode::Trunc { to: p },
        },
        Msg::Sync {
            epoch: 4,
            mode: SyncMode::Snap(Snapshot {
                at: Position { slot: 9, tag: 3 },
                data: Bytes::from_static(b"state"),
            }),
        },
        Msg::Sync {
            epoch: 4,
            mode: SyncMode::Diff { from: p },
        },
        Msg::Entries {
            epoch: 4,
            entries: vec![entry.clone(), entry.clone(), entry.clone()],
        },
        Msg::NewLeader { epoch: 4, last: p },
        Msg::AckNewLeader { epoch: 4 },
        Msg::UpToDate {
            epoch: 4,
            commit: p,
        },
        Msg::Proposal {
            epoch: 4,
            entry,
            echo: (7, 3),
        },
        Msg::Ack {
            epoch: 4,
            zxid: z,
            zab: true,
            stamp: 99,
        },
        Msg::Commit {
            epoch: 4,
            at: p,
            zab: false,
        },
        Msg::Ping {
            epoch: 4,
            commit: p,
            last: z,
            full: true,
        },
        Msg::Forward { command: cmd },
    ]
}

fn corpus() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = samples().iter().map(|m| m.to_bytes().to_vec()).collect();
    v.push(
        Entry {
            zxid: Zxid::new(1, 1),
            slot: 1,
            command: Command {
                id: 1,
                payload: Bytes::from_static(b"x"),
            },
        }
        .to_bytes()
        .to_vec(),
    );
    v.push(
        Hard {
            accepted_epoch: 1,
            accepted_leader: 2,
            current_epoch: 1,
            led_epoch: 0,
        }
        .to_bytes()
        .to_vec(),
    );
    v
}

/// Decode `raw` as every type that reaches a decoder from the network or the disk.
fn decode_all(raw: &[u8]) {
    let b = Bytes::copy_from_slice(raw);
    bounded(raw.len(), || {
        if let Ok(m) = Msg::from_bytes(b.clone()) {
            // What decodes re-encodes to the same bytes.
            assert_eq!(m.to_bytes(), b, "{m:?}");
        }
        let _ = Entry::from_bytes(b.clone());
        let _ = Hard::from_bytes(b.clone());
        let _ = LogSummary::from_bytes(b.clone());
        let _ = Vec::<Entry>::from_bytes(b.clone());
        let _ = Vec::<Position>::from_bytes(b.clone());
        let _ = Snapshot::from_bytes(b.clone());
        let _ = Command::from_bytes(b.clone());
    });
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(10_000))]

    #[test]
    fn mutated_messages_never_panic(
        which in any::<usize>(),
        muts in prop::collection::vec(mutation(), 1..5),
    ) {
        let c = corpus();
        decode_all(&mutate(&c[which % c.len()], &muts, &c));
    }

    #[test]
    fn random_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..256)) {
        decode_all(&raw);
    }
}

#[test]
fn forged_lengths_in_every_position_are_errors_without_allocation() {
    for base in corpus() {
        for i in 0..base.len().saturating_sub(3) {
            for forged in [u32::MAX, i32::MAX as u32, 1 << 30, 1 << 24, 1 << 20] {
                let mut b = base.clone();
                b[i..i + 4].copy_from_slice(&forged.to_be_bytes());
                decode_all(&b);
            }
        }
    }
}

#[test]
fn a_forged_entry_count_does_not_preallocate() {
    // 6 = Entries, epoch 4, then a count of 60 000 entries with 64 KiB of input behind it: the
    // decoder may reserve room for what the input can hold, not for what the count claims.
    let mut b = BytesMut::new();
    b.extend_from_slice(&[6, 0, 0, 0, 4]);
    b.extend_from_slice(&60_000u32.to_be_bytes());
    b.extend_from_slice(&[0u8; 64 << 10]);
    let raw = b.to_vec();
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let r = Msg::from_bytes(Bytes::from(raw.clone()));
    ARMED.with(|a| a.set(false));
    assert!(r.is_err());
    let largest = LARGEST.with(|l| l.get());
    assert!(
        largest <= 2 * raw.len(),
        "{largest} bytes reserved for {} bytes of input",
        raw.len()
    );
}

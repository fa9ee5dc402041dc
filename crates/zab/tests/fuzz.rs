//! Hostile input for Zab's decoders: peer messages (`Msg`, `Wire::from_bytes` as the transport
//! calls it) and the write-ahead log's records and hard state. Inputs are random bytes and
//! mutations of valid encodings (bit flips, truncations, splices, forged lengths and counts).
//! The property: no panic, a value or an error, and no allocation sized by a claimed length
//! rather than by the input.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use synod_core::wire::Wire;
use synod_core::{Command, Position, Snapshot};
use synod_testkit::{bounded, config, largest_allocation, mutate, mutation, Probe};
use synod_zab::{Entry, Hard, LogSummary, Msg, Zxid};

#[global_allocator]
static PROBE: Probe = Probe;

// ------------------------------------------------------------------ valid encodings

fn corpus() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = synod_zab::codec::sample_messages()
        .iter()
        .map(|m| m.to_bytes().to_vec())
        .collect();
    v.push(
        Entry {
            zxid: Zxid::new(1, 1),
            slot: 1,
            command: Command {
                id: 1,
                payload: Bytes::from_static(b"x"),
            },
            config: None,
        }
        .to_bytes()
        .to_vec(),
    );
    for recovering in [false, true] {
        let h = Hard {
            accepted_epoch: 1,
            accepted_leader: 2,
            current_epoch: 1,
            led_epoch: 0,
            recovering,
            config: None,
        };
        v.push(h.to_bytes().to_vec());
        // With the configuration written once the group changed its members.
        let config = synod_core::Config::new(7, vec![1, 2, 3], vec![4]).expect("valid");
        let with = Hard {
            config: Some(std::sync::Arc::new(config)),
            ..h.clone()
        };
        v.push(with.to_bytes().to_vec());
        // The 16-byte form written before the `recovering` flag.
        v.push(h.to_bytes()[..16].to_vec());
    }
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
        if let Ok(h) = Hard::from_bytes(b.clone()) {
            // A hard state reads back as itself, in its current form or the legacy one.
            assert_eq!(Hard::from_bytes(h.to_bytes()), Ok(h.clone()));
            assert!(b.len() == 16 || h.to_bytes() == b, "{h:?}");
        }
        let _ = LogSummary::from_bytes(b.clone());
        let _ = Vec::<Entry>::from_bytes(b.clone());
        let _ = Vec::<Position>::from_bytes(b.clone());
        let _ = Snapshot::from_bytes(b.clone());
        let _ = Command::from_bytes(b.clone());
    });
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
    let (r, largest) = largest_allocation(|| Msg::from_bytes(Bytes::from(raw.clone())));
    assert!(r.is_err());
    // What the input really holds may take up to size_of::<Entry>() / 28 (the smallest
    // encoded entry), about 2.3 times its bytes, and a growing vector doubles: 4 times the
    // input. A reservation for the forged count would be 60 000 entries, 3.8 MB.
    assert!(
        largest <= 4 * raw.len(),
        "{largest} bytes reserved for {} bytes of input",
        raw.len()
    );
}

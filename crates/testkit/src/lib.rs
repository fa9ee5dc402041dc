//! Test support shared by the decoder fuzzers of several crates (dev-dependency only).
//!
//! * [`Probe`]: a global allocator that forwards to the system allocator and, while armed,
//!   records the largest single allocation of the current thread. A test binary installs it
//!   with `#[global_allocator] static PROBE: synod_testkit::Probe = synod_testkit::Probe;`
//!   and wraps each decode in [`bounded`].
//! * [`mutation`] / [`mutate`]: proptest strategies for bit flips, truncations, insertions,
//!   forged lengths and splices of valid encodings.
//! * [`config`]: a proptest configuration without failure persistence files.

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Records the largest single allocation of the current thread while armed (see [`bounded`]).
pub struct Probe;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the allocator may run while thread-locals are being destroyed.
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: every method forwards to the system allocator with the same arguments and returns
// its result unchanged, so the GlobalAlloc contract is the system allocator's; the probe only
// records a size in a const-initialised thread-local `Cell` (which itself never allocates).
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

/// Run `f` and assert that no single allocation it made exceeds what `input_len` bytes of input
/// can justify (64 × the input plus 256 KiB): a length or count claimed by the input must not
/// be allocated up front. Needs [`Probe`] installed as the global allocator.
pub fn bounded<T>(input_len: usize, f: impl FnOnce() -> T) -> T {
    let (v, largest) = largest_allocation(f);
    let limit = 64 * input_len + (256 << 10);
    assert!(
        largest <= limit,
        "an allocation of {largest} bytes from {input_len} bytes of input"
    );
    v
}

/// Run `f` and return its result with the size of the largest single allocation it made on
/// this thread (for bounds stricter than [`bounded`]'s). Needs [`Probe`] installed.
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let v = f();
    ARMED.with(|a| a.set(false));
    (v, LARGEST.with(|l| l.get()))
}

/// One change to a valid encoding.
#[derive(Clone, Debug)]
pub enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    /// Overwrite 4 bytes with a length-like value (forged lengths and counts).
    Forge(usize, u32),
    /// Cut here and append the tail of another valid encoding.
    Splice(usize, usize, usize),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
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

/// Apply `muts` to `base`; splices take their tails from `corpus` (must not be empty).
pub fn mutate(base: &[u8], muts: &[Mutation], corpus: &[Vec<u8>]) -> Vec<u8> {
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

/// `cases` cases, no regression files written into the source tree.
pub fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

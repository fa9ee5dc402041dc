//! A fixed-size bitset with an incrementally maintained Zobrist hash, and the search cache keyed
//! by (bitset, model state) built on it.

use crate::history::ZnodeState;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// SplitMix64's finaliser: a cheap, well-mixing 64-bit hash.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of a model state, to be combined with a bitset's hash.
pub(crate) fn state_hash(s: ZnodeState) -> u64 {
    mix64((s.value as u64) ^ mix64(u64::from(s.version as u32) ^ 0x5bd1_e995))
}

/// A set of operation indices `0..n` with an order-independent hash (XOR of one random word
/// per member) kept up to date by [`Bitset::set`] and [`Bitset::clear`] in O(1).
#[derive(Debug, Clone)]
pub(crate) struct Bitset {
    words: Vec<u64>,
    hash: u64,
}

impl Bitset {
    /// The empty set over `0..n`.
    pub(crate) fn new(n: usize) -> Self {
        Bitset {
            words: vec![0; n.div_ceil(64)],
            hash: 0,
        }
    }

    /// The Zobrist word of member `i`.
    fn zobrist(i: usize) -> u64 {
        mix64(i as u64 ^ 0xa076_1d64_78bd_642f)
    }

    /// Whether `i` is a member.
    pub(crate) fn contains(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Adds `i` (which must not be a member).
    pub(crate) fn set(&mut self, i: usize) {
        debug_assert!(!self.contains(i));
        self.words[i / 64] |= 1 << (i % 64);
        self.hash ^= Self::zobrist(i);
    }

    /// Removes `i` (which must be a member).
    pub(crate) fn clear(&mut self, i: usize) {
        debug_assert!(self.contains(i));
        self.words[i / 64] &= !(1 << (i % 64));
        self.hash ^= Self::zobrist(i);
    }

    /// The set's hash.
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    /// Number of members.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// A hasher that passes through a precomputed `u64` hash.
#[derive(Default)]
pub(crate) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// One memoised search configuration: which ops are linearized, and the state they lead to.
#[derive(Debug)]
struct Config {
    hash: u64,
    words: Box<[u64]>,
    state: ZnodeState,
}

impl Hash for Config {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.hash);
    }
}

impl PartialEq for Config {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.state == other.state && self.words == other.words
    }
}

impl Eq for Config {}

/// The set of (linearized ops, state) configurations already explored (Lowe's memoisation).
#[derive(Default)]
pub(crate) struct Cache {
    seen: HashSet<Config, BuildHasherDefault<PassThrough>>,
}

impl Cache {
    /// Records the configuration; returns `false` if it was already recorded.
    pub(crate) fn insert(&mut self, set: &Bitset, state: ZnodeState) -> bool {
        self.seen.insert(Config {
            hash: set.hash() ^ state_hash(state),
            words: set.words.clone().into_boxed_slice(),
            state,
        })
    }

    /// Number of recorded configurations.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }

    /// Approximate heap bytes used by `configs` configurations over sets of `n` members: the
    /// words, the boxed slice's allocation, and the hash table slot.
    pub(crate) fn bytes_for(configs: usize, n: usize) -> u64 {
        let per = n.div_ceil(64) * 8 + std::mem::size_of::<Config>() + 16;
        (configs * per) as u64
    }

    /// Number of recorded configurations.
    pub(crate) fn configs(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitset_set_clear_and_hash_is_order_independent() {
        let mut a = Bitset::new(130);
        let mut b = Bitset::new(130);
        for i in [0, 63, 64, 129, 7] {
            a.set(i);
        }
        for i in [129, 7, 64, 0, 63] {
            b.set(i);
        }
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.len(), 5);
        assert!(a.contains(129) && a.contains(0) && !a.contains(1));
        a.clear(129);
        assert!(!a.contains(129));
        assert_ne!(a.hash(), b.hash());
        a.set(129);
        assert_eq!(a.hash(), b.hash());
        for i in [0, 63, 64, 129, 7] {
            a.clear(i);
        }
        assert_eq!(a.hash(), 0);
        assert_eq!(a.len(), 0);
    }

    #[test]
    fn cache_distinguishes_sets_and_states() {
        let mut c = Cache::default();
        let mut s = Bitset::new(10);
        assert!(c.insert(&s, ZnodeState::new(0, 0)));
        assert!(!c.insert(&s, ZnodeState::new(0, 0)));
        assert!(c.insert(&s, ZnodeState::new(0, 1)));
        s.set(3);
        assert!(c.insert(&s, ZnodeState::new(0, 0)));
        assert!(!c.insert(&s, ZnodeState::new(0, 0)));
        assert_eq!(c.len(), 3);
    }
}

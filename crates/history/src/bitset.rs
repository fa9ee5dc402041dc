//! The set of linearized ops with an incrementally maintained Zobrist hash and a compact
//! encoding, and the search cache keyed by (that set, model state) built on it.

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

/// Where an op's membership bit lives in a [`LinSet`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot {
    /// An op with a known reply, by its rank in the order of return events.
    Required(u32),
    /// An indeterminate op (no return event), by its index among those.
    Optional(u32),
}

/// The set of linearized operations of one search, with an order-independent hash (XOR of one
/// random word per member) kept up to date by [`LinSet::set`] and [`LinSet::clear`] in O(1),
/// and a compact encoding for the search cache.
///
/// Ops with a known reply are numbered by the order of their return events. The search never
/// goes past a return event whose op is not linearized, so every linearized op was invoked
/// before the first such return: all ops below the *watermark* (the lowest rank not in the set)
/// are members, and the members above it are ops concurrent with the watermark's op, a handful
/// however long the history. The encoding ([`LinSet::encode`]) is the watermark, those few
/// ranks, and the indeterminate members: its size follows the concurrency, not the history
/// (a plain bitset of a 100 000-op key is 12.5 KB per configuration).
#[derive(Debug, Clone)]
pub(crate) struct LinSet {
    slots: Vec<Slot>,
    required: Vec<u64>,
    optional: Vec<u64>,
    required_count: u32,
    optional_count: u32,
    /// The lowest required rank not in the set.
    watermark: u32,
    hash: u64,
}

fn has(words: &[u64], i: u32) -> bool {
    words[i as usize / 64] & (1 << (i % 64)) != 0
}

fn flip(words: &mut [u64], i: u32) {
    words[i as usize / 64] ^= 1 << (i % 64);
}

/// Appends the members of `words` at or above `from`, stopping after `count` of them.
fn members_from(words: &[u64], from: u32, mut count: u32, out: &mut Vec<u32>) {
    let mut w = from as usize / 64;
    let mut bits = words.get(w).map_or(0, |&x| x & (u64::MAX << (from % 64)));
    while count > 0 {
        while bits == 0 {
            w += 1;
            bits = words[w];
        }
        out.push(w as u32 * 64 + bits.trailing_zeros());
        bits &= bits - 1;
        count -= 1;
    }
}

impl LinSet {
    /// The empty set over ops placed by `slots` (ranks and indices dense from 0).
    pub(crate) fn new(slots: Vec<Slot>) -> Self {
        let (mut required, mut optional) = (0usize, 0usize);
        for slot in &slots {
            match slot {
                Slot::Required(_) => required += 1,
                Slot::Optional(_) => optional += 1,
            }
        }
        LinSet {
            slots,
            required: vec![0; required.div_ceil(64)],
            optional: vec![0; optional.div_ceil(64)],
            required_count: 0,
            optional_count: 0,
            watermark: 0,
            hash: 0,
        }
    }

    /// The Zobrist word of op `i`.
    fn zobrist(i: usize) -> u64 {
        mix64(i as u64 ^ 0xa076_1d64_78bd_642f)
    }

    /// Whether op `i` is a member.
    pub(crate) fn contains(&self, i: usize) -> bool {
        match self.slots[i] {
            Slot::Required(r) => has(&self.required, r),
            Slot::Optional(k) => has(&self.optional, k),
        }
    }

    /// Adds op `i` (which must not be a member).
    pub(crate) fn set(&mut self, i: usize) {
        debug_assert!(!self.contains(i));
        self.hash ^= Self::zobrist(i);
        match self.slots[i] {
            Slot::Required(r) => {
                flip(&mut self.required, r);
                self.required_count += 1;
                // Advance the watermark over the run of members it now starts.
                if r == self.watermark {
                    loop {
                        let (w, s) = (self.watermark as usize / 64, self.watermark % 64);
                        let Some(&word) = self.required.get(w) else {
                            break;
                        };
                        let run = (word >> s).trailing_ones();
                        self.watermark += run;
                        if run < 64 - s {
                            break;
                        }
                    }
                }
            }
            Slot::Optional(k) => {
                flip(&mut self.optional, k);
                self.optional_count += 1;
            }
        }
    }

    /// Removes op `i` (which must be a member).
    pub(crate) fn clear(&mut self, i: usize) {
        debug_assert!(self.contains(i));
        self.hash ^= Self::zobrist(i);
        match self.slots[i] {
            Slot::Required(r) => {
                flip(&mut self.required, r);
                self.required_count -= 1;
                self.watermark = self.watermark.min(r);
            }
            Slot::Optional(k) => {
                flip(&mut self.optional, k);
                self.optional_count -= 1;
            }
        }
    }

    /// The set's hash.
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    /// Writes the set's canonical encoding to `out` (cleared first): the watermark, the number
    /// of required members above it, their ranks, then the indeterminate members' indices.
    /// Equal sets, and only they, have equal encodings.
    pub(crate) fn encode(&self, out: &mut Vec<u32>) {
        out.clear();
        let above = self.required_count - self.watermark;
        out.extend([self.watermark, above]);
        members_from(&self.required, self.watermark, above, out);
        members_from(&self.optional, 0, self.optional_count, out);
    }

    /// Number of members.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        (self.required_count + self.optional_count) as usize
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

/// One memoised search configuration: which ops are linearized ([`LinSet::encode`]d), and the
/// state they lead to.
#[derive(Debug)]
struct Config {
    hash: u64,
    members: Box<[u32]>,
    state: ZnodeState,
}

impl Hash for Config {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.hash);
    }
}

impl PartialEq for Config {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.state == other.state && self.members == other.members
    }
}

impl Eq for Config {}

/// The set of (linearized ops, state) configurations already explored (Lowe's memoisation).
#[derive(Default)]
pub(crate) struct Cache {
    seen: HashSet<Config, BuildHasherDefault<PassThrough>>,
    scratch: Vec<u32>,
    bytes: u64,
}

impl Cache {
    /// Records the configuration; returns `false` if it was already recorded.
    pub(crate) fn insert(&mut self, set: &LinSet, state: ZnodeState) -> bool {
        set.encode(&mut self.scratch);
        let config = Config {
            hash: set.hash() ^ state_hash(state),
            members: self.scratch.as_slice().into(),
            state,
        };
        let size = Self::bytes_for(config.members.len());
        let new = self.seen.insert(config);
        if new {
            self.bytes += size;
        }
        new
    }

    /// Number of recorded configurations.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }

    /// Approximate heap bytes of one configuration whose encoding has `words` words: the
    /// words, the boxed slice's allocation, and the hash table slot (at its load factor).
    fn bytes_for(words: usize) -> u64 {
        (words * 4 + std::mem::size_of::<Config>() * 2 + 16) as u64
    }

    /// Approximate heap bytes used by the recorded configurations.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    /// Ops 0..n: every third one indeterminate, the others ranked in reverse order.
    fn slots(n: usize) -> Vec<Slot> {
        let required = (0..n).filter(|i| i % 3 != 2).count() as u32;
        let (mut r, mut k) = (required, 0);
        (0..n)
            .map(|i| {
                if i % 3 == 2 {
                    k += 1;
                    Slot::Optional(k - 1)
                } else {
                    r -= 1;
                    Slot::Required(r)
                }
            })
            .collect()
    }

    #[test]
    fn set_clear_and_hash_is_order_independent() {
        let mut a = LinSet::new(slots(200));
        let mut b = LinSet::new(slots(200));
        for i in [0, 63, 64, 129, 7, 199] {
            a.set(i);
        }
        for i in [199, 129, 7, 64, 0, 63] {
            b.set(i);
        }
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.len(), 6);
        assert!(a.contains(129) && a.contains(0) && !a.contains(1));
        a.clear(129);
        assert!(!a.contains(129));
        assert_ne!(a.hash(), b.hash());
        a.set(129);
        assert_eq!(a.hash(), b.hash());
        let (mut ea, mut eb) = (Vec::new(), Vec::new());
        a.encode(&mut ea);
        b.encode(&mut eb);
        assert_eq!(ea, eb);
        for i in [0, 63, 64, 129, 7, 199] {
            a.clear(i);
        }
        assert_eq!(a.hash(), 0);
        assert_eq!(a.len(), 0);
    }

    #[test]
    fn the_encoding_is_canonical_and_stays_small_below_the_watermark() {
        // Random insertions and removals over 300 ops, checked against a model set: two sets
        // have the same encoding exactly when they have the same members, and the watermark is
        // the lowest required rank missing.
        let n = 300;
        let slots = slots(n);
        let mut set = LinSet::new(slots.clone());
        let mut model = BTreeSet::new();
        let mut seen: HashMap<Vec<u32>, BTreeSet<usize>> = HashMap::new();
        let mut x = 0x9e37_79b9_u64;
        let mut enc = Vec::new();
        for step in 0..20_000 {
            x = mix64(x);
            // Mostly add the lowest missing ops, as the search does, sometimes anything.
            let i = if x.is_multiple_of(4) {
                (x >> 8) as usize % n
            } else {
                (0..n).find(|i| !model.contains(i)).unwrap_or(0)
            };
            if model.contains(&i) || (step % 7 == 0 && !model.is_empty()) {
                let j = if model.contains(&i) {
                    i
                } else {
                    *model.iter().next_back().unwrap()
                };
                set.clear(j);
                model.remove(&j);
            } else {
                set.set(i);
                model.insert(i);
            }
            let lowest_missing = (0..)
                .find(|&r| {
                    !slots.iter().enumerate().any(|(i, s)| {
                        matches!(s, Slot::Required(q) if *q == r) && model.contains(&i)
                    })
                })
                .unwrap();
            assert_eq!(set.watermark, lowest_missing);
            for i in 0..n {
                assert_eq!(set.contains(i), model.contains(&i));
            }
            set.encode(&mut enc);
            let members = model.len() - set.watermark as usize;
            assert_eq!(enc.len(), 2 + members, "{enc:?}");
            if let Some(earlier) = seen.insert(enc.clone(), model.clone()) {
                assert_eq!(earlier, model, "two different sets encode as {enc:?}");
            }
        }
        // Every required op in: the encoding is two words plus the indeterminate members.
        let mut full = LinSet::new(slots.clone());
        for (i, s) in slots.iter().enumerate() {
            if matches!(s, Slot::Required(_)) {
                full.set(i);
            }
        }
        full.set(2);
        full.encode(&mut enc);
        assert_eq!(enc, vec![200, 0, 0]);
    }

    #[test]
    fn cache_distinguishes_sets_and_states() {
        let mut c = Cache::default();
        let mut s = LinSet::new(slots(10));
        assert!(c.insert(&s, ZnodeState::new(0, 0)));
        assert!(!c.insert(&s, ZnodeState::new(0, 0)));
        assert!(c.insert(&s, ZnodeState::new(0, 1)));
        s.set(3);
        assert!(c.insert(&s, ZnodeState::new(0, 0)));
        assert!(!c.insert(&s, ZnodeState::new(0, 0)));
        assert_eq!(c.len(), 3);
        assert!(c.bytes() > 0);
    }
}

//! The position tag of a command delivered in a batch (PFT's sequence numbers, Mencius's
//! instances): `n << 16 | left`, where `left` counts the commands of the batch after this one.
//! A snapshot's tag therefore says whether it ends on a whole batch (`left == 0`) without the
//! batch at hand, and a batch holds at most [`MAX_BATCH`] commands.

/// Commands per batch, bounded by the 16 bits of `left`.
pub const MAX_BATCH: usize = 1 << 16;

/// The tag of command `i` of a batch of `len` at `n`.
pub fn tag(n: u64, i: usize, len: usize) -> u64 {
    debug_assert!(
        i < len && len <= MAX_BATCH,
        "command {i} of a batch of {len}"
    );
    (n << 16) | (len - 1 - i) as u64
}

/// The batch (sequence number, instance) of a tag.
pub fn batch_of(tag: u64) -> u64 {
    tag >> 16
}

/// Commands left in the batch after the one at this tag.
pub fn left(tag: u64) -> usize {
    (tag & 0xFFFF) as usize
}

/// A tag below every command of batch `n + 1` and above every command of batches up to `n`:
/// a position "through batch `n`" (what a checkpoint or a transferred state covers).
pub fn through(n: u64) -> u64 {
    (n << 16) | 0xFFFF
}

/// An ordinal that grows with every command delivered in batch order (ZooKeeper's zxid for a
/// group of these protocols): `n << 16 | (0xFFFF - left)`, 0 for nothing delivered. It is a
/// bijection: [`from_ordinal`] is its inverse.
pub fn ordinal(tag: u64) -> u64 {
    if tag == 0 {
        0
    } else {
        tag ^ 0xFFFF
    }
}

/// The inverse of [`ordinal`].
pub fn from_ordinal(ordinal: u64) -> u64 {
    if ordinal == 0 {
        0
    } else {
        ordinal ^ 0xFFFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_count_what_is_left_and_ordinals_grow() {
        let tags = [tag(7, 0, 3), tag(7, 1, 3), tag(7, 2, 3), tag(8, 0, 1)];
        assert_eq!(tags.map(left), [2, 1, 0, 0]);
        assert_eq!(tags.map(batch_of), [7, 7, 7, 8]);
        let ords = tags.map(ordinal);
        assert!(ords.windows(2).all(|w| w[0] < w[1]), "{ords:?}");
        assert_eq!(ords.map(from_ordinal), tags);
        assert!(tag(7, 2, 3) < through(7) && through(7) < tag(8, 0, 1));
        assert_eq!((ordinal(0), from_ordinal(0)), (0, 0));
    }
}

//! Routing: which bucket holds a key, and which nodes hold a bucket.
//!
//! **Key → bucket** is `jump(fnv1a_64(key), buckets)`: FNV-1a is a few lines in any language
//! (the Python client computes the same), and Lamping & Veach's jump consistent hash moves only
//! `1/(b+1)` of the keys if the bucket count ever grows from `b`, where modulo hashing would
//! move almost all of them (the thesis's prototype used `murmur3 mod buckets`, "because for now
//! numBuckets does not change").
//!
//! **Node → bucket** ([`place`]) keeps a placement stable across membership changes
//! (sconekv.md §11.16): the prototype's contiguous chunks of the sorted node list shift nodes
//! across many buckets when one node joins or leaves, each shift a view change and a full state
//! transfer. Here a placement is derived from the previous one: a node that leaves is replaced in
//! each bucket it held (and only there) by the least-loaded other node, and a node that joins
//! takes over slots only from the most loaded nodes, one slot per bucket, until loads are even.

use std::collections::{BTreeMap, BTreeSet};

/// 64-bit FNV-1a.
pub fn fnv1a_64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Lamping & Veach's jump consistent hash: a bucket in `0..buckets` (`buckets >= 1`).
pub fn jump(mut key: u64, buckets: u32) -> u32 {
    assert!(buckets >= 1, "jump hash needs a bucket");
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < buckets as i64 {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

/// The bucket index of `key` among `buckets` buckets.
pub fn bucket_of(key: &[u8], buckets: u32) -> u32 {
    jump(fnv1a_64(key), buckets)
}

/// A placement: for each bucket index, the sorted node ids holding a replica.
pub type Placement = Vec<BTreeSet<u32>>;

fn loads(p: &Placement, nodes: &BTreeSet<u32>) -> BTreeMap<u32, usize> {
    let mut l: BTreeMap<u32, usize> = nodes.iter().map(|&n| (n, 0)).collect();
    for b in p {
        for n in b {
            if let Some(c) = l.get_mut(n) {
                *c += 1;
            }
        }
    }
    l
}

/// The placement of `buckets` buckets of `replicas` replicas each on `nodes`, derived from
/// `previous` (empty for a new cluster) so that as few replicas as possible move. Each bucket
/// gets `min(replicas, nodes.len())` distinct nodes; loads differ by at most one.
pub fn place(
    previous: &Placement,
    buckets: usize,
    replicas: usize,
    nodes: &BTreeSet<u32>,
) -> Placement {
    let want = replicas.min(nodes.len());
    let mut p: Placement = (0..buckets)
        .map(|b| {
            previous
                .get(b)
                .map(|m| m.iter().copied().filter(|n| nodes.contains(n)).collect())
                .unwrap_or_default()
        })
        .collect();
    // Fill every bucket up to `want` with the least-loaded nodes (ties: lowest id).
    for b in 0..buckets {
        while p[b].len() < want {
            let l = loads(&p, nodes);
            let pick = l
                .iter()
                .filter(|(n, _)| !p[b].contains(n))
                .min_by_key(|(n, c)| (**c, **n))
                .map(|(n, _)| *n)
                .expect("enough nodes for the replicas");
            p[b].insert(pick);
        }
        while p[b].len() > want {
            let l = loads(&p, nodes);
            let drop = *p[b].iter().max_by_key(|n| (l[n], **n)).expect("non-empty");
            p[b].remove(&drop);
        }
    }
    // Even the loads out: move one slot at a time from a most-loaded node to a least-loaded one,
    // in a bucket the receiver does not hold yet.
    let total = buckets * want;
    let (lo, hi) = if nodes.is_empty() {
        (0, 0)
    } else {
        (total / nodes.len(), total.div_ceil(nodes.len()))
    };
    for _ in 0..total * nodes.len() + 1 {
        let l = loads(&p, nodes);
        let Some((&from, _)) = l
            .iter()
            .filter(|(_, c)| **c > hi)
            .min_by_key(|(n, c)| (usize::MAX - **c, **n))
        else {
            let Some((&to, _)) = l
                .iter()
                .filter(|(_, c)| **c < lo)
                .min_by_key(|(n, c)| (**c, **n))
            else {
                break;
            };
            // Someone is below the floor: take a slot from a node above it.
            let Some(b) =
                (0..buckets).find(|&b| !p[b].contains(&to) && p[b].iter().any(|n| l[n] > lo))
            else {
                break;
            };
            let from = *p[b]
                .iter()
                .filter(|n| l[n] > lo)
                .max_by_key(|n| (l[n], **n))
                .expect("above floor");
            p[b].remove(&from);
            p[b].insert(to);
            continue;
        };
        let Some((&to, _)) = l
            .iter()
            .filter(|(n, c)| {
                **c < hi && (0..buckets).any(|b| p[b].contains(&from) && !p[b].contains(n))
            })
            .min_by_key(|(n, c)| (**c, **n))
        else {
            break;
        };
        let b = (0..buckets)
            .find(|&b| p[b].contains(&from) && !p[b].contains(&to))
            .expect("checked");
        p[b].remove(&from);
        p[b].insert(to);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv_and_jump_match_their_references() {
        // FNV-1a test vectors.
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
        // Jump hash values from the paper's reference implementation.
        assert_eq!(jump(0, 1), 0);
        assert_eq!(jump(1, 1), 0);
        let spread: Vec<u32> = (0..10_000u64).map(|k| jump(k, 10)).collect();
        for b in 0..10 {
            let n = spread.iter().filter(|&&x| x == b).count();
            assert!((800..1200).contains(&n), "bucket {b} got {n} of 10000");
        }
    }

    #[test]
    fn growing_the_bucket_count_moves_few_keys() {
        let moved = (0..10_000u64)
            .filter(|k| bucket_of(&k.to_be_bytes(), 8) != bucket_of(&k.to_be_bytes(), 9))
            .count();
        // 1/9 of the keys should move; modulo hashing would move 8/9.
        assert!(moved < 1_500, "{moved} keys moved");
    }

    fn set(ids: impl IntoIterator<Item = u32>) -> BTreeSet<u32> {
        ids.into_iter().collect()
    }

    fn check_valid(p: &Placement, buckets: usize, replicas: usize, nodes: &BTreeSet<u32>) {
        assert_eq!(p.len(), buckets);
        let want = replicas.min(nodes.len());
        for b in p {
            assert_eq!(b.len(), want);
            assert!(b.is_subset(nodes));
        }
        let l = loads(p, nodes);
        let (min, max) = (l.values().min().unwrap(), l.values().max().unwrap());
        assert!(max - min <= 1, "uneven loads {l:?}");
    }

    fn moved(a: &Placement, b: &Placement) -> (usize, usize) {
        let buckets = a.iter().zip(b).filter(|(x, y)| x != y).count();
        let slots = a.iter().zip(b).map(|(x, y)| x.difference(y).count()).sum();
        (buckets, slots)
    }

    #[test]
    fn the_thesis_layout_one_change_moves_one_bucket() {
        // 24 nodes, 8 buckets of 3: every node holds one bucket.
        let nodes = set(1..=24);
        let p = place(&Vec::new(), 8, 3, &nodes);
        check_valid(&p, 8, 3, &nodes);
        // A node leaves, and another takes its place: one bucket changes, by one replica.
        let mut after = nodes.clone();
        after.remove(&7);
        after.insert(25);
        let q = place(&p, 8, 3, &after);
        check_valid(&q, 8, 3, &after);
        assert_eq!(moved(&p, &q), (1, 1));
    }

    proptest! {
        #[test]
        fn a_leave_only_touches_the_buckets_of_the_node(n in 3u32..30, buckets in 1usize..12, r in 1usize..5, who in 0u32..30) {
            let nodes = set(1..=n);
            let p = place(&Vec::new(), buckets, r, &nodes);
            check_valid(&p, buckets, r, &nodes);
            let gone = who % n + 1;
            let mut after = nodes.clone();
            after.remove(&gone);
            let q = place(&p, buckets, r, &after);
            check_valid(&q, buckets, r, &after);
            let held = p.iter().filter(|b| b.contains(&gone)).count();
            let (_, slots) = moved(&p, &q);
            // Each slot of the leaver moves once; evening out may move at most as many again.
            prop_assert!(slots <= 2 * held, "{} slots moved for {} held", slots, held);
        }

        #[test]
        fn a_join_moves_at_most_a_fair_share(n in 2u32..30, buckets in 1usize..12, r in 1usize..5) {
            let nodes = set(1..=n);
            let p = place(&Vec::new(), buckets, r, &nodes);
            let mut after = nodes.clone();
            after.insert(n + 1);
            let q = place(&p, buckets, r, &after);
            check_valid(&q, buckets, r, &after);
            let want = r.min(after.len());
            let fair = (buckets * want).div_ceil(after.len());
            let (_, slots) = moved(&p, &q);
            prop_assert!(slots <= fair + buckets, "{} slots moved, fair share {}", slots, fair);
        }
    }
}

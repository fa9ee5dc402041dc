//! Quorum arithmetic. Every protocol of synod uses strict majorities (zab.md §1.2: the
//! documents' `f` differs for even N, a majority is correct for every N).

/// The size of a strict majority of `n` members.
pub const fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The number of crashes tolerated by `n` members: `n - majority(n)`.
pub const fn tolerated(n: usize) -> usize {
    n - majority(n)
}

/// The `k`-th largest value (1-based) of `values`, or `None` when there are fewer than `k`.
/// With cumulative acknowledgements (every member's highest acked position), the `quorum`-th
/// largest value is the highest position a quorum has acknowledged.
pub fn kth_largest<T: Ord + Copy>(values: &mut [T], k: usize) -> Option<T> {
    if k == 0 || values.len() < k {
        return None;
    }
    let idx = values.len() - k;
    let (_, v, _) = values.select_nth_unstable(idx);
    Some(*v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majorities() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
        assert_eq!(majority(7), 4);
        assert_eq!(tolerated(3), 1);
        assert_eq!(tolerated(4), 1);
        assert_eq!(tolerated(7), 3);
    }

    #[test]
    fn any_two_majorities_intersect() {
        for n in 1..12usize {
            // Two disjoint sets each of majority size would need 2*majority <= n.
            assert!(2 * majority(n) > n, "n = {n}");
        }
    }

    #[test]
    fn kth() {
        let mut v = [5u64, 1, 9, 3];
        assert_eq!(kth_largest(&mut v, 1), Some(9));
        assert_eq!(kth_largest(&mut v, 2), Some(5));
        assert_eq!(kth_largest(&mut v, 4), Some(1));
        assert_eq!(kth_largest(&mut v, 5), None);
        assert_eq!(kth_largest(&mut v, 0), None);
    }
}

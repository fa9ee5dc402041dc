//! The broadcast-phase variants of EL-Sanosi's thesis and paper (zab.md §3–4). Discovery,
//! synchronisation and recovery are Zab's, unchanged, for all of them (zab.md §1.5, §3.1).
//!
//! | variant | assumptions | follower acks go to | follower delivers m when it knows this many followers (itself included) logged m | leader commit messages |
//! |---|---|---|---|---|
//! | `Zab` | A1, A2 | leader | — (waits for the leader's commit) | yes |
//! | `AcRestricted` (ZabAc, N = 3) | A1.1, A1.2, A2 | leader | 1 (itself) | no |
//! | `AaRestricted` (ZabAa) | A1.1, A1.2, A2 | leader + followers | f | no |
//! | `AaLeaderFirst` ([P]'s ZabAA) | A1, A2; the leader's write is durable before its proposal leaves | leader + followers | f (+ the leader = f + 1 loggers) | no |
//! | `CtRestricted` (ZabCt, p = 0.5) | A1.1, A1.2, A2, A3 | on Head: leader + followers | f, explicit or implicit | no |
//! | `Ct` (ZabCT) | A1, A2, A3 | on Head: leader + followers | f + 1, explicit or implicit | no |
//! | `Aa` ([T]'s ZabAA = ZabCT with p = 1) | A1, A2, A3 | leader + followers | f + 1 | no |
//!
//! f = ⌊(N − 1)/2⌋ (a majority of N is f + 1). Acks are cumulative, so an ack for m is an
//! implicit ack for every earlier proposal of the epoch (zab.md §3.3, §3.8).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Zab,
    AcRestricted,
    AaRestricted,
    AaLeaderFirst,
    CtRestricted,
    Ct,
    Aa,
}

impl Variant {
    /// Protocol names, as selected on the command line.
    pub const ALL: [(&'static str, Variant); 7] = [
        ("zab", Variant::Zab),
        ("zab-ac", Variant::AcRestricted),
        ("zab-aa-restricted", Variant::AaRestricted),
        ("zab-aa-leader-first", Variant::AaLeaderFirst),
        ("zab-ct-restricted", Variant::CtRestricted),
        ("zab-ct", Variant::Ct),
        ("zab-aa", Variant::Aa),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, v)| *v == self)
            .map(|(n, _)| *n)
            .expect("every variant is named")
    }

    pub fn from_name(name: &str) -> Option<Variant> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// ZabCT with another coin than ZabCT_u's, by name (the thesis's configurations, zab.md
    /// §5.6, §5.8, §8.6): p fixed at 0.5 ([T] Ch. 3, Table E.4), ZabCT_a, ZabCT_aa, and App. D's
    /// optimal probabilities (θ = λ unless the options fix it).
    pub const COINS: [(&'static str, crate::coin::Choice); 4] = [
        ("zab-ct-half", crate::coin::Choice::Fixed(0.5)),
        (
            "zab-ct-a",
            crate::coin::Choice::Adaptive {
                policy: crate::coin::Policy::Average,
                theta: None,
            },
        ),
        (
            "zab-ct-aa",
            crate::coin::Choice::Adaptive {
                policy: crate::coin::Policy::LowerAverage,
                theta: None,
            },
        ),
        (
            "zab-ct-optimal",
            crate::coin::Choice::Adaptive {
                policy: crate::coin::Policy::Optimal,
                theta: None,
            },
        ),
    ];

    /// A protocol name (a variant, or ZabCT with a named coin) as its variant and coin.
    pub fn protocol(name: &str) -> Option<(Variant, crate::coin::Choice)> {
        if let Some(v) = Self::from_name(name) {
            return Some((v, crate::coin::Choice::default()));
        }
        Self::COINS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, c)| (Variant::Ct, c))
    }

    /// Followers (the deliverer included) that must be known to have logged m before a follower
    /// delivers it without the leader's commit; `None` for Zab.
    pub fn follower_threshold(self, cluster_size: usize) -> Option<usize> {
        let f = (cluster_size - 1) / 2;
        match self {
            Variant::Zab => None,
            Variant::AcRestricted => Some(1),
            Variant::AaRestricted | Variant::AaLeaderFirst | Variant::CtRestricted => {
                Some(f.max(1))
            }
            Variant::Ct | Variant::Aa => Some(f + 1),
        }
    }

    /// Do followers send acks to the other followers too?
    pub fn broadcast_acks(self) -> bool {
        !matches!(self, Variant::Zab | Variant::AcRestricted)
    }

    /// Does the leader send commit messages?
    pub fn leader_commits(self) -> bool {
        self == Variant::Zab
    }

    /// Must the leader's own write be durable before its proposal leaves?
    pub fn leader_first(self) -> bool {
        self == Variant::AaLeaderFirst
    }

    /// The probability of broadcasting an ack for a newly logged proposal before anything is
    /// measured (`None`: always). ZabCt's is fixed at 0.5; ZabCT starts from what ZabCT_u
    /// computes with every follower present and θ = λ, P₂ = 1/n − δ (zab.md §5.3, §5.6), and
    /// its options say how it adapts.
    pub fn coin(self, cluster_size: usize) -> Option<f64> {
        let n = (cluster_size - 1).max(1) as f64;
        match self {
            Variant::CtRestricted => Some(0.5),
            Variant::Ct => Some(1.0 / n - 0.001),
            _ => None,
        }
    }

    /// Does the variant switch to Zab when it cannot make progress, and back (zab.md §6)?
    pub fn switches(self) -> bool {
        matches!(self, Variant::CtRestricted | Variant::Ct | Variant::Aa)
    }

    /// Membership-driven switching (zab.md §6.1, §7): the followers that must be up for the
    /// variant to run. ZabCt and ZabCT need all N − 1 (their p assumes n = N − 1: a suspected
    /// follower switches the epoch to Zab); [T]'s ZabAA needs the f + 1 its followers count
    /// (more than f − 1 suspected switches). 0 for variants that never switch.
    pub fn followers_needed(self, cluster_size: usize) -> usize {
        match self {
            Variant::CtRestricted | Variant::Ct => cluster_size - 1,
            Variant::Aa => self.follower_threshold(cluster_size).unwrap_or(0),
            _ => 0,
        }
    }

    /// Does the variant rely on the restrictive assumptions A1.1 and A1.2?
    pub fn restricted(self) -> bool {
        matches!(
            self,
            Variant::AcRestricted | Variant::AaRestricted | Variant::CtRestricted
        )
    }

    /// Cluster sizes the variant supports.
    pub fn supports(self, cluster_size: usize) -> bool {
        match self {
            Variant::AcRestricted => cluster_size == 3,
            _ => cluster_size >= 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_follow_the_thesis() {
        assert_eq!(Variant::Zab.follower_threshold(5), None);
        assert_eq!(Variant::AcRestricted.follower_threshold(3), Some(1));
        assert_eq!(Variant::AaRestricted.follower_threshold(5), Some(2));
        assert_eq!(Variant::AaLeaderFirst.follower_threshold(7), Some(3));
        assert_eq!(Variant::Ct.follower_threshold(5), Some(3));
        assert_eq!(Variant::Aa.follower_threshold(3), Some(2));
        assert!((Variant::Ct.coin(5).unwrap() - 0.249).abs() < 1e-12);
        for (n, v) in Variant::ALL {
            assert_eq!(Variant::from_name(n), Some(v));
            assert_eq!(v.name(), n);
        }
        assert!(!Variant::AcRestricted.supports(5));
        // ZabAA (f + 1 = 3 follower acks at N = 5) runs while at most f − 1 = 1 follower is
        // suspected; ZabCt and ZabCT need every follower.
        assert_eq!(Variant::Aa.followers_needed(5), 3);
        assert_eq!(Variant::Ct.followers_needed(5), 4);
        assert_eq!(Variant::CtRestricted.followers_needed(3), 2);
        assert_eq!(Variant::AaRestricted.followers_needed(5), 0);
    }
}

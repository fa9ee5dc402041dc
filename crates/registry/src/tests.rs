use super::*;
use synod_zab::Variant;

#[test]
fn every_name_belongs_to_one_family_and_finds_it() {
    let all = names();
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "a name registered twice: {all:?}");
    for (family, names) in families() {
        for n in names {
            assert_eq!(facts(n.name).unwrap().family, family, "{}", n.name);
            assert_eq!(find(n.name, false).unwrap().1, family);
            assert_eq!(find(n.name, true).is_some(), n.served, "{}", n.name);
        }
    }
    assert!(facts("raft").is_none() && find("raft", false).is_none());
}

#[test]
fn the_served_zab_names_are_the_variants_and_coins() {
    let mut served: Vec<&str> = served_names()
        .into_iter()
        .filter(|n| facts(n).unwrap().family == "zab")
        .collect();
    let mut expected: Vec<&str> = Variant::ALL
        .iter()
        .map(|(n, _)| *n)
        .chain(Variant::COINS.iter().map(|(n, _)| *n))
        .collect();
    served.sort();
    expected.sort();
    assert_eq!(served, expected);
}

#[test]
fn broken_protocols_are_simulated_not_served() {
    for name in served_names() {
        assert!(
            !name.contains("-bug-") && !name.ends_with("-unrestricted"),
            "{name}"
        );
    }
    for name in [
        "zab-bug-elect-anyone",
        "paxos-bug-lower-view-wins",
        "mencius-bug-stale-skip",
    ] {
        let e = check(name, 3, true).unwrap_err();
        assert!(
            e.contains("not a protocol of this server") && e.contains("paxos-mbq"),
            "{e}"
        );
        check(name, 3, false).unwrap();
    }
}

#[test]
fn sizes_are_checked_by_the_family() {
    check("zab-ac", 3, true).unwrap();
    let e = check("zab-ac", 5, true).unwrap_err();
    assert!(e.contains("zab-ac") && e.contains('5'), "{e}");
    check("paxos", 1, true).unwrap();
    check("mencius", 64, true).unwrap();
    let e = check("mencius", 65, true).unwrap_err();
    assert!(e.contains("64"), "{e}");
}

struct Opts;
impl Visit for Opts {
    type Out = String;
    fn visit<F: Family>(self, name: &'static str) -> String {
        format!("{:?}", F::options(name, &Defaults))
    }
}

#[test]
fn names_set_their_options() {
    let o = visit("paxos-none", Opts).unwrap();
    assert!(o.contains("catch_up: None"), "{o}");
    let o = visit("zab-ac-unrestricted", Opts).unwrap();
    assert!(
        o.contains("enforce_a11: false") && o.contains("AcRestricted"),
        "{o}"
    );
    let o = visit("mencius-bug-stale-skip", Opts).unwrap();
    assert!(o.contains("StaleSkip"), "{o}");
    assert!(visit("nope", Opts).is_none());
}

#[test]
fn assumptions_follow_the_name() {
    use synod_mencius::Mencius;
    use synod_paxos::Paxos;
    use synod_zab::Zab;
    assert!(Zab::assumptions("zab-ac", 3).restricted);
    assert!(!Zab::assumptions("zab-ac-unrestricted", 3).restricted);
    assert_eq!(
        Zab::assumptions("zab-ac-unrestricted", 3).follower_threshold,
        Some(1)
    );
    assert_eq!(Zab::assumptions("zab", 3), Assumptions::default());
    assert_eq!(Paxos::assumptions("paxos", 3), Assumptions::default());
    assert!(Mencius::assumptions("mencius", 3).needs_its_disk);
    assert!(Mencius::assumptions("mencius-ooo", 3).commuting);
}

#[test]
fn seeded_zxids_stay_above_the_backups() {
    struct S(i64);
    impl Visit for S {
        type Out = (Position, i64, Zxids);
        fn visit<F: Family>(self, _: &'static str) -> Self::Out {
            let s = F::seed(1, self.0, 5);
            (s.at, s.zxid, F::ZXIDS)
        }
    }
    for name in ["zab", "paxos", "mencius"] {
        for zxid in [0i64, 1, 0xFFFF, 0x1_0000_0023, 0x7_0000_ffff] {
            let (at, z, zxids) = visit(name, S(zxid)).unwrap();
            assert!(z >= zxid, "{name} {zxid:#x} -> {z:#x}");
            assert_eq!(zxids.zxid(at.tag), z, "{name}: the tag maps to the zxid");
        }
    }
    // Mencius never resumes below the instances it uses.
    let (at, _, _) = visit("mencius", S(0)).unwrap();
    assert!(at.tag >> 16 >= 5);
}

//! zxid monotonicity, survival of acknowledged writes, well-formedness, the JSON format and
//! `check_all`.

mod common;

use common::Builder;
use synod_history::{
    check_acked_writes_survive, check_all, check_well_formed, check_zxid_monotonic, Budget, Call,
    FinalRead, FinalReads, History, Outcome, Ret, Verdict, Violation, ZnodeState,
};

/// Sets the zxid of op `id`.
fn zxid(h: &mut History, id: u64, zxid: i64) {
    h.ops.iter_mut().find(|o| o.id == id).unwrap().zxid = Some(zxid);
}

#[test]
fn zxids_increasing_per_session_pass() {
    let mut b = Builder::new();
    let a = b.write(1, "x", (0, 10), 1, 1);
    let c = b.read(1, "x", (20, 30), 1, 1);
    // Another session may be behind (it is connected to a lagging follower).
    let d = b.read(2, "x", (25, 35), 0, 0);
    // Equal completion times are not ordered against each other.
    let e = b.read(1, "y", (31, 40), 0, 0);
    let f = b.read(1, "z", (32, 40), 0, 0);
    // Failed and unknown ops do not count, whatever their zxid.
    let g = b.write_failed(1, "x", (41, 42), 9);
    let u = b.op(1, "x", Call::Read, 43, None, Outcome::Unknown);
    let mut h = b.build();
    for (id, z) in [(a, 5), (c, 5), (d, 2), (e, 9), (f, 7), (g, 1), (u, 1)] {
        zxid(&mut h, id, z);
    }
    assert_eq!(check_zxid_monotonic(&h), vec![]);
}

#[test]
fn zxid_going_backwards_in_a_session_is_caught() {
    let mut b = Builder::new();
    let a = b.write(1, "x", (0, 10), 1, 1);
    let c = b.read(1, "y", (20, 30), 0, 0);
    let d = b.read(2, "x", (25, 35), 1, 1);
    let mut h = b.build();
    for (id, z) in [(a, 0x100000005), (c, 0x100000003), (d, 1)] {
        zxid(&mut h, id, z);
    }
    let found = check_zxid_monotonic(&h);
    assert_eq!(
        found,
        vec![Violation::ZxidDecreased {
            session: 1,
            earlier: a,
            earlier_zxid: 0x100000005,
            later: c,
            later_zxid: 0x100000003,
        }]
    );
    let text = found[0].to_string();
    assert!(text.contains("zxid went backwards") && text.contains("#1") && text.contains("#2"));
}

fn finals(key: &str, reads: &[(u8, i64, i32)]) -> FinalReads {
    let reads = reads.iter().map(|&(node, value, version)| FinalRead {
        node,
        value,
        version,
    });
    [(key.to_string(), reads.collect())].into_iter().collect()
}

fn acked_history() -> History {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.cas(2, "x", (20, 30), 1, 2, Some(2));
    b.cas(3, "x", (25, 35), 1, 3, None);
    // A crashed write that took effect: the final version may be above every acknowledged one.
    b.write_unknown(4, "x", 40, 4);
    b.build()
}

#[test]
fn acked_writes_surviving_pass() {
    let h = acked_history();
    assert_eq!(
        check_acked_writes_survive(&h, &finals("x", &[(1, 2, 2), (2, 2, 2), (3, 2, 2)])),
        vec![]
    );
    assert_eq!(
        check_acked_writes_survive(&h, &finals("x", &[(1, 4, 3), (2, 4, 3), (3, 4, 3)])),
        vec![]
    );
    // Keys never written only need to agree.
    assert_eq!(
        check_acked_writes_survive(&History::new(), &finals("y", &[(1, 0, 0), (2, 0, 0)])),
        vec![]
    );
}

#[test]
fn lost_acked_write_is_caught() {
    let h = acked_history();
    let found = check_acked_writes_survive(&h, &finals("x", &[(1, 1, 1), (2, 1, 1), (3, 1, 1)]));
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found.iter().all(|v| matches!(
        v,
        Violation::AcknowledgedVersionLost {
            acked_version: 2,
            final_version: 1,
            op: Some(2),
            ..
        }
    )));
    assert!(
        found[0].to_string().contains("acknowledged write lost"),
        "{}",
        found[0]
    );
}

#[test]
fn disagreeing_servers_are_caught() {
    let h = acked_history();
    let found = check_acked_writes_survive(&h, &finals("x", &[(1, 2, 2), (2, 2, 2), (3, 1, 1)]));
    assert!(
        matches!(&found[0], Violation::FinalReadsDisagree { key, reads } if key == "x" && reads.len() == 3)
    );
    assert!(found
        .iter()
        .any(|v| matches!(v, Violation::AcknowledgedVersionLost { node: 3, .. })));
    assert!(found[0].to_string().contains("servers disagree"));
}

#[test]
fn wrong_final_value_is_caught() {
    let h = acked_history();
    let found = check_acked_writes_survive(&h, &finals("x", &[(1, 3, 2), (2, 3, 2)]));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(matches!(
        &found[0],
        Violation::FinalValueMismatch { version: 2, final_value: 3, expected, ops, .. }
            if *expected == vec![2] && *ops == vec![2]
    ));
    // At the initial version, the value must be the initial value.
    let mut h = History::new();
    h.initial.insert("y".into(), ZnodeState::new(7, 3));
    let found = check_acked_writes_survive(&h, &finals("y", &[(1, 8, 3)]));
    assert!(
        matches!(&found[..], [Violation::FinalValueMismatch { expected, .. }] if *expected == vec![7])
    );
    // And the version may not go below the initial one.
    let found = check_acked_writes_survive(&h, &finals("y", &[(1, 7, 2)]));
    assert!(
        matches!(
            &found[..],
            [Violation::AcknowledgedVersionLost { op: None, .. }]
        ),
        "{found:?}"
    );
}

#[test]
fn version_observed_by_a_read_must_survive_too() {
    let mut b = Builder::new();
    b.write_unknown(1, "x", 0, 5);
    b.read(2, "x", (10, 20), 5, 1);
    let h = b.build();
    let found = check_acked_writes_survive(&h, &finals("x", &[(1, 0, 0)]));
    assert!(
        matches!(
            &found[..],
            [Violation::AcknowledgedVersionLost {
                acked_version: 1,
                op: Some(2),
                ..
            }]
        ),
        "{found:?}"
    );
}

#[test]
fn missing_final_read_is_caught() {
    let found = check_acked_writes_survive(&acked_history(), &FinalReads::new());
    assert_eq!(found, vec![Violation::MissingFinalRead { key: "x".into() }]);
}

#[test]
fn malformed_histories_are_caught() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    assert_eq!(check_well_formed(&b.history), vec![]);
    b.op(
        1,
        "x",
        Call::Read,
        20,
        Some(30),
        Outcome::Ok(Ret::BadVersion),
    );
    b.op(
        1,
        "x",
        Call::Read,
        40,
        None,
        Outcome::Ok(Ret::Read {
            value: 1,
            version: 1,
        }),
    );
    b.read(1, "x", (60, 50), 1, 1);
    let mut h = b.build();
    h.ops.push(h.ops[0].clone());
    let found = check_well_formed(&h);
    let problems: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 4, "{problems:?}");
    assert!(problems[0].contains("#2") && problems[0].contains("does not fit"));
    assert!(problems[1].contains("#3") && problems[1].contains("no completion time"));
    assert!(problems[2].contains("#4") && problems[2].contains("before its invocation"));
    assert!(problems[3].contains("#1") && problems[3].contains("duplicate"));
}

#[test]
fn json_round_trip() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.read(2, "x", (5, 15), 0, 0);
    b.cas(3, "x", (20, 30), 1, 2, Some(2));
    b.cas(4, "x", (20, 30), 1, 2, None);
    b.write_unknown(5, "x", 40, 7);
    b.write_failed(6, "y", (40, 41), 8);
    let mut h = b.build();
    h.ops[0].zxid = Some(0x1_0000_0001);
    h.ops[0].node = Some(3);
    h.ops[0].session = -0x7123_4567_89ab_cdef;
    h.initial.insert("y".into(), ZnodeState::new(-5, 2));
    h.meta.insert("seed".into(), 42.into());
    h.meta.insert(
        "nemesis".into(),
        serde_json::json!({"partitions": ["1|2,3"]}),
    );

    let dir = std::env::temp_dir().join(format!("synod-history-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("history.json");
    h.to_json_file(&path).unwrap();
    let back = History::from_json_file(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(back, h);
    assert_eq!(History::from_json_str(&h.to_json_string()).unwrap(), h);

    // The format is readable and optional fields may be left out.
    let json = r#"{"ops": [
        {"id": 1, "process": 0, "session": 7, "key": "x", "call": {"type": "write", "value": 3},
         "invoke_ns": 5, "complete_ns": 9, "outcome": {"status": "ok", "ret": {"type": "written", "version": 1}}},
        {"id": 2, "process": 1, "session": 8, "key": "x", "call": {"type": "cas", "expect_version": 0, "value": 4},
         "invoke_ns": 6, "complete_ns": null, "outcome": {"status": "unknown"}},
        {"id": 3, "process": 1, "session": 8, "key": "x", "call": {"type": "read"},
         "invoke_ns": 10, "complete_ns": 12, "outcome": {"status": "ok", "ret": {"type": "read", "value": 3, "version": 1}},
         "zxid": 12, "node": 2}
    ]}"#;
    let h = History::from_json_str(json).unwrap();
    assert_eq!(h.ops[0].outcome, Outcome::Ok(Ret::Written { version: 1 }));
    assert_eq!(
        h.ops[1].call,
        Call::Cas {
            expect_version: 0,
            value: 4
        }
    );
    assert_eq!(h.ops[1].outcome, Outcome::Unknown);
    assert_eq!((h.ops[2].zxid, h.ops[2].node), (Some(12), Some(2)));
    assert!(h.initial.is_empty() && h.meta.is_empty());
    assert!(check_all(&h, None, Budget::default()).passed());
}

#[test]
fn check_all_passes_a_good_run() {
    let h = acked_history();
    let report = check_all(
        &h,
        Some(&finals("x", &[(1, 2, 2), (2, 2, 2)])),
        Budget::default(),
    );
    assert_eq!(report.verdict(), Verdict::Pass, "{report}");
    let text = report.to_string();
    assert!(text.starts_with("history check: PASS"), "{text}");
    assert!(text.contains("zxid monotonic per session: PASS"), "{text}");
}

#[test]
fn check_all_names_every_anomaly() {
    let mut b = Builder::new();
    let w = b.write(1, "x", (0, 10), 1, 1);
    let r = b.read(1, "x", (20, 30), 0, 0);
    b.read(2, "y", (0, 5), 0, 0);
    let mut h = b.build();
    zxid(&mut h, w, 9);
    zxid(&mut h, r, 8);
    let report = check_all(
        &h,
        Some(&finals("x", &[(1, 0, 0), (2, 1, 1)])),
        Budget::default(),
    );
    assert_eq!(report.verdict(), Verdict::Fail);
    assert!(!report.passed());
    let text = report.to_string();
    assert!(text.starts_with("history check: FAIL"), "{text}");
    assert!(
        text.contains("linearizability: FAIL (2 keys: 1 linearizable, 1 not, 0 unknown"),
        "{text}"
    );
    assert!(text.contains("key \"x\" is not linearizable"), "{text}");
    assert!(text.contains("zxid went backwards"), "{text}");
    assert!(text.contains("servers disagree"), "{text}");
    assert!(text.contains("acknowledged write lost"), "{text}");
    assert_eq!(report.violations().count(), 3);
    eprintln!("{report}");
}

#[test]
fn check_all_is_unknown_when_the_budget_runs_out() {
    let h = acked_history();
    let report = check_all(&h, None, Budget::steps(1));
    assert_eq!(report.verdict(), Verdict::Unknown, "{report}");
    assert!(report
        .to_string()
        .contains("acknowledged writes survive: not checked"));
}

//! Hand-written histories: linearizable ones with real concurrency are accepted, known anomalies
//! are rejected with a diagnosis that names them.

mod common;

use common::{all_linearizable, assert_diagnosis_consistent, only_violation, Builder};
use synod_history::{
    check_linearizable, Budget, BudgetExhausted, Call, KeyResult, Outcome, PendingReason, Ret,
    Verdict, ZnodeState,
};

fn check(h: &synod_history::History) -> synod_history::LinReport {
    let report = check_linearizable(h, Budget::unlimited());
    for v in report.violations() {
        assert_diagnosis_consistent(h, v);
    }
    report
}

#[test]
fn concurrent_history_with_badversion_and_unknown_writes_is_accepted() {
    let mut b = Builder::new();
    // A read concurrent with the first write sees the old state: it must go first, although the
    // write is invoked first.
    b.write(1, "x", (0, 10), 1, 1);
    b.read(2, "x", (5, 15), 0, 0);
    // A read concurrent with the write sees the new state.
    b.read(3, "x", (8, 12), 1, 1);
    // Two concurrent cas expecting version 1: the later-invoked one wins, the other must be
    // ordered after it and fail with BadVersion.
    b.cas(1, "x", (20, 30), 1, 2, None);
    b.cas(2, "x", (22, 32), 1, 3, Some(2));
    b.read(3, "x", (33, 34), 3, 2);
    // An unknown write that must be taken as applied: a later read sees its value and version.
    b.write_unknown(3, "x", 35, 7);
    // An unknown write that must be taken as not applied (or applied after everything): its
    // value is never seen and the versions leave no room for it.
    b.write_unknown(4, "x", 36, 99);
    // A failed write is ignored.
    b.write_failed(5, "x", (40, 41), 55);
    b.read(1, "x", (50, 60), 7, 3);
    b.write(1, "x", (70, 80), 8, 4);
    b.cas(2, "x", (75, 85), 4, 9, Some(5));
    b.read(2, "x", (86, 90), 9, 5);
    // Another key with its own initial state, interleaved in time.
    b.history
        .initial
        .insert("y".into(), ZnodeState::new(100, 7));
    b.read(6, "y", (0, 100), 100, 7);
    b.cas(7, "y", (10, 20), 7, 101, Some(8));
    b.read(8, "y", (15, 25), 101, 8);
    let report = check(&b.build());
    assert_eq!(report.verdict(), Verdict::Pass, "{report}");
    assert_eq!(report.keys["x"].ops, 12);
    assert_eq!(report.keys["x"].dropped, 1);
}

#[test]
fn equal_timestamps_are_concurrent() {
    // The read is invoked exactly when the write returns: the two are concurrent, so the read
    // may still see the old state.
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.read(2, "x", (10, 20), 0, 0);
    assert!(all_linearizable(&check(&b.build())));
    // One nanosecond later they are ordered, and the read is stale.
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.read(2, "x", (11, 20), 0, 0);
    assert_eq!(check(&b.build()).verdict(), Verdict::Fail);
}

#[test]
fn unknown_write_may_take_effect_long_after_its_invocation() {
    let mut b = Builder::new();
    let u = b.op(
        1,
        "x",
        Call::Write { value: 5 },
        0,
        Some(1),
        Outcome::Unknown,
    );
    b.write(2, "x", (100, 110), 6, 1);
    b.read(3, "x", (200, 210), 6, 1);
    // The unknown write lands after the write of 6, although its client gave up at t=1.
    b.read(3, "x", (300, 310), 5, 2);
    let h = b.build();
    assert!(all_linearizable(&check(&h)));
    // ...but not before its invocation.
    let mut h2 = h.clone();
    h2.ops[u as usize - 1].invoke_ns = 311;
    assert_eq!(check(&h2).verdict(), Verdict::Fail);
}

#[test]
fn unknown_reads_and_failed_ops_are_dropped() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.op(2, "x", Call::Read, 20, None, Outcome::Unknown);
    b.op(
        3,
        "x",
        Call::Write { value: 2 },
        20,
        Some(30),
        Outcome::Failed,
    );
    b.read(1, "x", (40, 50), 1, 1);
    let report = check(&b.build());
    assert_eq!(report.verdict(), Verdict::Pass);
    assert_eq!(report.keys["x"].dropped, 2);
    assert_eq!(report.keys["x"].ops, 2);
}

#[test]
fn stale_read_after_completed_write_is_rejected() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.read(2, "y", (0, 10), 0, 0);
    let stale = b.read(2, "x", (20, 30), 0, 0);
    let h = b.build();
    let report = check(&h);
    let v = only_violation(&report);
    assert_eq!(v.key, "x");
    // The write must take effect by its reply at 10, which would take the version past the 0
    // that the read invoked at 20 saw.
    assert_eq!(v.blocked.op.id, 1);
    assert_eq!(
        v.blocked.reason,
        PendingReason::SkipsVersion {
            version: 0,
            needed_by: stale
        }
    );
    assert_eq!(
        v.related.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![stale]
    );
    assert_eq!(v.state, ZnodeState::new(0, 0));
    assert!(v.prefix.is_empty());
    assert!(matches!(report.keys["y"].result, KeyResult::Linearizable));
    let text = report.to_string();
    assert!(text.contains("key \"x\" is not linearizable"), "{text}");
    assert!(text.contains(&format!("which #{stale} needs")), "{text}");
    assert!(
        text.contains(&format!(
            "#{stale} p2 \"x\" read -> ok (value=0, version=0)"
        )),
        "{text}"
    );
}

#[test]
fn read_of_a_value_never_written_is_rejected() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    let bogus = b.read(2, "x", (5, 30), 42, 1);
    let report = check(&b.build());
    let v = only_violation(&report);
    assert_eq!(v.blocked.op.id, bogus);
}

#[test]
fn two_concurrent_cas_with_the_same_expected_version_cannot_both_succeed() {
    let mut b = Builder::new();
    b.cas(1, "x", (0, 10), 0, 1, Some(1));
    b.cas(2, "x", (5, 15), 0, 2, Some(1));
    let report = check(&b.build());
    let v = only_violation(&report);
    // Whichever goes first leaves the other behind: each needs version 0 before it.
    assert!(v.prefix.is_empty());
    assert_eq!(
        v.blocked.reason,
        PendingReason::SkipsVersion {
            version: 0,
            needed_by: 2
        }
    );
    assert_eq!(
        v.pending[0].reason,
        PendingReason::SkipsVersion {
            version: 0,
            needed_by: 1
        }
    );
}

#[test]
fn two_concurrent_cas_with_the_same_expected_version_one_fails_is_fine() {
    let mut b = Builder::new();
    b.cas(1, "x", (0, 10), 0, 1, None);
    b.cas(2, "x", (5, 15), 0, 2, Some(1));
    b.read(1, "x", (20, 30), 2, 1);
    assert!(all_linearizable(&check(&b.build())));
}

#[test]
fn write_observed_then_unobserved_is_rejected() {
    let mut b = Builder::new();
    // The write is concurrent with both reads, but the reads are ordered: new, then old.
    b.write(1, "x", (0, 100), 1, 1);
    b.read(2, "x", (10, 20), 1, 1);
    let old = b.read(2, "x", (30, 40), 0, 0);
    let report = check(&b.build());
    let v = only_violation(&report);
    // The first read saw the write, which cannot have happened yet as the second read did not.
    assert_eq!(v.blocked.op.id, 2);
    assert_eq!(v.blocked.reason, PendingReason::Contradicts);
    assert_eq!(v.pending[0].op.id, 1);
    assert_eq!(
        v.pending[0].reason,
        PendingReason::SkipsVersion {
            version: 0,
            needed_by: old
        }
    );
}

#[test]
fn lost_acknowledged_write_is_rejected() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.write(2, "x", (20, 30), 2, 2);
    // A later write reports version 2 again: the acknowledged write of 2 was lost.
    let w3 = b.write(3, "x", (40, 50), 3, 2);
    b.read(1, "x", (60, 70), 3, 2);
    let report = check(&b.build());
    let v = only_violation(&report);
    assert_eq!(v.prefix, vec![1]);
    assert_eq!(v.blocked.op.id, 2);
    assert_eq!(
        v.blocked.reason,
        PendingReason::SkipsVersion {
            version: 1,
            needed_by: w3
        }
    );
}

#[test]
fn badversion_when_the_version_matched_is_rejected() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.cas(2, "x", (20, 30), 1, 5, None);
    assert_eq!(check(&b.build()).verdict(), Verdict::Fail);
}

#[test]
fn reply_that_does_not_fit_the_call_is_rejected() {
    let mut b = Builder::new();
    b.op(
        1,
        "x",
        Call::Read,
        0,
        Some(10),
        Outcome::Ok(Ret::Written { version: 1 }),
    );
    let report = check(&b.build());
    assert_eq!(
        only_violation(&report).blocked.reason,
        PendingReason::Contradicts
    );
}

#[test]
fn unknown_write_cannot_explain_two_different_values() {
    let mut b = Builder::new();
    b.write_unknown(1, "x", 0, 5);
    b.read(2, "x", (10, 20), 5, 1);
    b.read(2, "x", (30, 40), 6, 1);
    let report = check(&b.build());
    let v = only_violation(&report);
    assert!(v.prefix.is_empty());
    assert_eq!(
        (v.blocked.op.id, v.blocked.reason),
        (2, PendingReason::Contradicts)
    );
    assert_eq!(
        (v.pending[0].op.id, v.pending[0].reason),
        (1, PendingReason::CannotApply)
    );
}

#[test]
fn ok_op_without_completion_still_constrains() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.op(
        2,
        "x",
        Call::Read,
        20,
        None,
        Outcome::Ok(Ret::Read {
            value: 0,
            version: 0,
        }),
    );
    assert_eq!(check(&b.build()).verdict(), Verdict::Fail);
    let mut b = Builder::new();
    b.op(
        2,
        "x",
        Call::Read,
        0,
        None,
        Outcome::Ok(Ret::Read {
            value: 1,
            version: 1,
        }),
    );
    b.write(1, "x", (5, 10), 1, 1);
    assert!(all_linearizable(&check(&b.build())));
}

#[test]
fn exhausted_step_budget_reports_unknown_not_a_verdict() {
    let mut b = Builder::new();
    for i in 0..10u64 {
        b.write(i, "x", (0, 100), i as i64, i as i32 + 1);
    }
    let linearizable = b.history.clone();
    b.read(99, "x", (200, 300), 42, 42);
    let broken = b.build();
    for h in [&linearizable, &broken] {
        let report = check_linearizable(h, Budget::steps(5));
        assert_eq!(report.verdict(), Verdict::Unknown, "{report}");
        assert!(matches!(
            report.keys["x"].result,
            KeyResult::Unknown(BudgetExhausted::Steps)
        ));
        assert!(report.to_string().contains("undecided"));
    }
    assert_eq!(check(&linearizable).verdict(), Verdict::Pass);
    assert_eq!(check(&broken).verdict(), Verdict::Fail);
}

#[test]
fn exhausted_time_budget_reports_unknown() {
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    let budget = Budget {
        max_time: Some(std::time::Duration::ZERO),
        ..Budget::unlimited()
    };
    let report = check_linearizable(&b.build(), budget);
    assert!(matches!(
        report.keys["x"].result,
        KeyResult::Unknown(BudgetExhausted::Time)
    ));
}

#[test]
fn exhausted_memory_budget_reports_unknown() {
    let mut b = Builder::new();
    for i in 0..10u64 {
        b.write(i, "x", (0, 100), i as i64, i as i32 + 1);
    }
    let budget = Budget {
        max_cache_bytes_per_key: Some(200),
        ..Budget::unlimited()
    };
    let report = check_linearizable(&b.build(), budget);
    assert!(matches!(
        report.keys["x"].result,
        KeyResult::Unknown(BudgetExhausted::Memory)
    ));
    assert!(
        report.to_string().contains("memory budget exhausted"),
        "{report}"
    );
}

#[test]
fn many_pending_unknown_writes_do_not_blow_up() {
    // 60 crashed writes of distinct values all concurrent with everything after them, then a
    // long sequential stretch that uses none of them except three, observed by reads.
    let mut b = Builder::new();
    for i in 0..60u64 {
        b.write_unknown(100 + i, "x", i, 1000 + i as i64);
    }
    let mut version = 0;
    let mut t = 100;
    for i in 0..300i64 {
        version += 1;
        if i % 100 == 50 {
            // A crashed write took effect here.
            let value = 1000 + i / 100 * 7;
            b.read(1, "x", (t, t + 5), value, version);
        } else {
            b.write(1, "x", (t, t + 5), i, version);
        }
        t += 10;
    }
    let report = check(&b.build());
    assert_eq!(report.verdict(), Verdict::Pass, "{report}");
    assert!(
        report.keys["x"].steps < 100_000,
        "{} steps",
        report.keys["x"].steps
    );
}

#[test]
fn a_stale_read_is_proven_by_the_regression_check_when_the_search_runs_out() {
    // Ten concurrent writes, then a read after all of them returned that sees version 3: the
    // search is cut off after 5 steps, and the regression check names the read and the write
    // of version 10.
    let mut b = Builder::new();
    let writes: Vec<u64> = (0..10u64)
        .map(|i| b.write(i, "x", (0, 100), i as i64, i as i32 + 1))
        .collect();
    let stale = b.read(99, "x", (200, 300), 2, 3);
    let h = b.build();
    let report = check_linearizable(&h, Budget::steps(5));
    assert_eq!(report.verdict(), Verdict::Fail, "{report}");
    let r = report.regressions().next().expect("a regression");
    assert_eq!(r.later.id, stale);
    assert_eq!((r.earlier_version, r.later_version), (10, 3));
    assert_eq!(r.earlier.id, writes[9]);
    assert!(
        report.to_string().contains("is not linearizable"),
        "{report}"
    );
    // With the whole budget the search finds it itself (stuck at the writes' returns, which
    // cannot all come before a read of version 3 that must follow them).
    assert_eq!(only_violation(&check(&h)).key, "x");
}

#[test]
fn the_regression_check_respects_concurrency_and_ties() {
    // The same stale version, but the read overlaps the last write (or is invoked exactly when
    // it returns): concurrent, so no regression, and the verdict stays unknown.
    for read_start in [50, 100] {
        let mut b = Builder::new();
        for i in 0..10u64 {
            b.write(i, "x", (0, 100), i as i64, i as i32 + 1);
        }
        b.read(99, "x", (read_start, 300), 2, 3);
        let report = check_linearizable(&b.build(), Budget::steps(5));
        assert!(
            matches!(report.keys["x"].result, KeyResult::Unknown(_)),
            "{report}"
        );
    }
    // A write acknowledged with a version below one already returned is a regression too.
    let mut b = Builder::new();
    b.write(1, "x", (0, 10), 1, 1);
    b.write(2, "x", (0, 10), 2, 2);
    let late = b.write(3, "x", (20, 30), 3, 2);
    let report = check_linearizable(&b.build(), Budget::steps(1));
    let r = report.regressions().next().expect("a regression");
    assert_eq!(
        (r.later.id, r.later_version, r.earlier_version),
        (late, 1, 2)
    );
}

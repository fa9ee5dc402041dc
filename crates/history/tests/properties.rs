//! Property tests: histories produced by real executions of the model are always accepted, and
//! on small (possibly corrupt) histories the checker agrees exactly with brute force.

mod common;

use common::{
    all_linearizable, assert_diagnosis_consistent, brute_force_linearizable, generate, Fate, OpSpec,
};
use proptest::prelude::*;
use synod_history::{check_linearizable, Budget, Call, History, KeyResult, Op, Outcome, Ret};

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Ok),
        1 => Just(Fate::UnknownApplied),
        1 => Just(Fate::UnknownNotApplied),
        1 => Just(Fate::Failed),
    ]
}

/// One op on one of `keys` keys, invoked in `0..span`, with small values.
fn op_spec(keys: usize, span: u64, max_len: u64) -> impl Strategy<Value = OpSpec> {
    (
        (
            0..keys,
            0..6u64,
            0..3u8,
            0..4i64,
            prop_oneof![4 => Just(0i32), 1 => Just(-1), 1 => Just(1)],
        ),
        (0..span, 0..max_len, 0..=100u64, fate(), any::<bool>()),
    )
        .prop_map(
            |((key, process, kind, value, cas_delta), (invoke, len, frac, fate, has_complete))| {
                OpSpec {
                    key,
                    process,
                    kind,
                    value,
                    cas_delta,
                    invoke,
                    len,
                    frac,
                    fate,
                    unknown_has_complete: has_complete,
                }
            },
        )
}

fn generated(max_ops: usize, keys: usize) -> impl Strategy<Value = History> {
    (1..=max_ops, 1..=keys).prop_flat_map(|(n, keys)| {
        proptest::collection::vec(op_spec(keys, n as u64 * 3 + 1, 15), n)
            .prop_map(|specs| generate(&specs))
    })
}

/// A corruption applied to op `index % len`; `d` is a small random number.
#[derive(Debug, Clone)]
struct Corruption {
    index: usize,
    kind: u8,
    d: i64,
    t: (u64, u64),
}

fn corruption() -> impl Strategy<Value = Corruption> {
    (0..8usize, 0..7u8, -2..=2i64, (0..3000u64, 0..1500u64))
        .prop_map(|(index, kind, d, t)| Corruption { index, kind, d, t })
}

fn corrupt(mut h: History, corruptions: &[Corruption]) -> History {
    for c in corruptions {
        if h.ops.is_empty() {
            break;
        }
        let len = h.ops.len();
        let op: &mut Op = &mut h.ops[c.index % len];
        let d = c.d as i32;
        match c.kind {
            0 => {
                if let Outcome::Ok(Ret::Read { value, .. }) = &mut op.outcome {
                    *value += c.d;
                }
            }
            1 => {
                if let Outcome::Ok(Ret::Read { version, .. } | Ret::Written { version }) =
                    &mut op.outcome
                {
                    *version += d;
                }
            }
            2 => {
                op.outcome = match op.outcome {
                    Outcome::Ok(Ret::Written { .. }) => Outcome::Ok(Ret::BadVersion),
                    Outcome::Ok(Ret::BadVersion) => Outcome::Ok(Ret::Written { version: d.abs() }),
                    other => other,
                }
            }
            3 => {
                op.outcome = Outcome::Unknown;
                op.complete_ns = None;
            }
            4 => {
                op.outcome = Outcome::Ok(match op.call {
                    Call::Read => Ret::Read {
                        value: c.d.abs(),
                        version: d.abs(),
                    },
                    _ if d < 0 => Ret::BadVersion,
                    _ => Ret::Written { version: d },
                });
                op.complete_ns = Some(op.invoke_ns + c.t.1);
            }
            5 => {
                op.invoke_ns = c.t.0;
                op.complete_ns = op.complete_ns.map(|_| c.t.0 + c.t.1);
            }
            _ => {
                op.outcome = Outcome::Ok(match op.call {
                    Call::Read => Ret::Written { version: d },
                    _ => Ret::Read {
                        value: c.d,
                        version: d,
                    },
                });
                op.complete_ns = Some(op.invoke_ns + c.t.1);
            }
        }
    }
    h
}

/// Entirely random small histories (calls, replies, times), mostly not linearizable.
fn random_small() -> impl Strategy<Value = History> {
    let op = (
        0..2usize,
        0..3u8,
        0..3i64,
        0..3i32,
        0..6u8,
        (0..40u64, 0..20u64),
    )
        .prop_map(|(key, kind, value, version, outcome, (invoke, len))| {
            let call = match kind {
                0 => Call::Read,
                1 => Call::Write { value },
                _ => Call::Cas {
                    expect_version: version,
                    value,
                },
            };
            let outcome = match (outcome, call) {
                (0, _) => Outcome::Unknown,
                (1, _) => Outcome::Failed,
                (_, Call::Read) => Outcome::Ok(Ret::Read { value, version }),
                (2, Call::Cas { .. }) => Outcome::Ok(Ret::BadVersion),
                (_, Call::Cas { expect_version, .. }) => Outcome::Ok(Ret::Written {
                    version: expect_version + 1,
                }),
                _ => Outcome::Ok(Ret::Written {
                    version: version + 1,
                }),
            };
            (key, call, outcome, invoke, len)
        });
    proptest::collection::vec(op, 1..=8).prop_map(|ops| {
        let mut h = History::new();
        for (i, (key, call, outcome, invoke, len)) in ops.into_iter().enumerate() {
            h.ops.push(Op {
                id: i as u64,
                process: i as u64,
                session: 1,
                key: format!("k{key}"),
                call,
                invoke_ns: invoke,
                complete_ns: Some(invoke + len),
                outcome,
                zxid: None,
                node: None,
            });
        }
        h
    })
}

fn small_history() -> impl Strategy<Value = History> {
    prop_oneof![
        2 => (generated(8, 2), proptest::collection::vec(corruption(), 0..3))
            .prop_map(|(h, c)| corrupt(h, &c)),
        1 => random_small(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, max_shrink_time: 60_000, ..ProptestConfig::default() })]

    #[test]
    fn executions_of_the_model_are_always_linearizable(h in generated(80, 3)) {
        let report = check_linearizable(&h, Budget::default());
        prop_assert!(all_linearizable(&report), "{}\n{}", report, h.to_json_string());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, max_shrink_time: 60_000, ..ProptestConfig::default() })]

    #[test]
    fn checker_agrees_with_brute_force_on_small_histories(h in small_history()) {
        let report = check_linearizable(&h, Budget::unlimited());
        let expected = brute_force_linearizable(&h);
        prop_assert_eq!(all_linearizable(&report), expected, "{}\n{}", report, h.to_json_string());
        for v in report.violations() {
            assert_diagnosis_consistent(&h, v);
        }
        prop_assert!(report.keys.values().all(|k| !matches!(k.result, KeyResult::Unknown(_))));
    }

    #[test]
    fn the_regression_check_never_accuses_a_linearizable_history(h in small_history()) {
        // One step of search, then the regression check on every key: whatever it proves must
        // agree with the brute force, and on these histories it must prove something often
        // enough to matter (checked below).
        let report = check_linearizable(&h, Budget::steps(1));
        if report.regressions().next().is_some() {
            prop_assert!(!brute_force_linearizable(&h), "{}\n{}", report, h.to_json_string());
        }
    }
}

/// 1 000 histories from [`small_history`], the same every run (a fixed seed).
fn sample_small_histories() -> Vec<History> {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let strategy = small_history();
    (0..1000)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

/// The regression check is not vacuous on the generated histories: it proves a good share of
/// the non-linearizable ones.
#[test]
fn the_regression_check_proves_many_small_violations() {
    let (mut not_linearizable, mut proven) = (0, 0);
    for h in sample_small_histories() {
        if !brute_force_linearizable(&h) {
            not_linearizable += 1;
            let report = check_linearizable(&h, Budget::steps(1));
            proven += usize::from(report.regressions().next().is_some());
        }
    }
    eprintln!("regression check: {proven} of {not_linearizable} violations proven");
    assert!(
        proven * 5 > not_linearizable,
        "{proven} of {not_linearizable} proven"
    );
}

/// The brute-force comparison is only meaningful if both verdicts occur often; this checks the
/// generators produce a useful mix.
#[test]
fn small_history_generator_produces_both_verdicts() {
    let (mut yes, mut no) = (0, 0);
    for h in sample_small_histories() {
        if brute_force_linearizable(&h) {
            yes += 1;
        } else {
            no += 1;
        }
    }
    assert!(yes > 200 && no > 200, "linearizable {yes}, not {no}");
}

//! Histories recorded by `synod chaos` that once exposed a checker bug. Each stays a test.

use synod_history::{check_linearizable, Budget, History, Verdict};

/// Seed 1 of `synod chaos` (zab): a write in flight when leader 3 was killed was recovered by
/// the next leader and read at version 1783. A development build of the checker forbade
/// indeterminate writes to produce any version some op had returned, reads included, and
/// rejected this linearizable window; only acknowledged writes claim their versions.
#[test]
fn chaos_seed_1_an_indeterminate_write_that_a_read_observed() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/chaos-seed1-window.json"
    );
    let h = History::from_json_file(path).unwrap();
    let r = check_linearizable(&h, Budget::unlimited());
    assert_eq!(r.verdict(), Verdict::Pass, "{r}");

    // And the window is not trivially accepted: drop the indeterminate write the read relies
    // on, and the read of its value is unexplainable.
    let mut broken = h.clone();
    broken
        .ops
        .retain(|o| !matches!(o.call, synod_history::Call::Write { value: 2000001497 }));
    let r = check_linearizable(&broken, Budget::unlimited());
    assert_eq!(r.verdict(), Verdict::Fail, "{r}");
}

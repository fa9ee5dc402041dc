//! Hand-built histories: one per anomaly kind, each caught with the right kind and
//! transactions; the ABA case of sconekv.md §11.9; Unknown transactions; edge cases.

use super::*;

pub(super) fn r(key: &str, version: u64, value: Option<u64>) -> TxnOp {
    TxnOp::Read {
        key: key.to_string(),
        version,
        value,
    }
}

pub(super) fn w(key: &str, value: u64, read_version: u64) -> TxnOp {
    TxnOp::Write {
        key: key.to_string(),
        value,
        read_version,
    }
}

pub(super) fn d(key: &str, read_version: u64) -> TxnOp {
    TxnOp::Delete {
        key: key.to_string(),
        read_version,
    }
}

pub(super) fn txn(id: u64, status: Status, ops: Vec<TxnOp>) -> Txn {
    Txn {
        id,
        status,
        ops,
        invoke_ns: id * 10,
        complete_ns: id * 10 + 5,
    }
}

fn c(id: u64, ops: Vec<TxnOp>) -> Txn {
    txn(id, Status::Committed, ops)
}

/// Asserts the report holds exactly one anomaly, of this kind, involving exactly these
/// transactions (in any order), and returns it.
fn only(report: &Report, kind: AnomalyKind, txns: &[u64]) -> Anomaly {
    assert_eq!(report.anomalies.len(), 1, "{report}");
    let anomaly = report.anomalies[0].clone();
    assert_eq!(anomaly.kind, kind, "{report}");
    let mut got = anomaly.txns.clone();
    got.sort_unstable();
    let mut want = txns.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "{report}");
    if kind.is_cycle() {
        assert_eq!(anomaly.cycle.len(), anomaly.txns.len());
        for (i, dep) in anomaly.cycle.iter().enumerate() {
            let next = &anomaly.cycle[(i + 1) % anomaly.cycle.len()];
            assert_eq!(dep.to, next.from, "the cycle chains: {report}");
        }
    } else {
        assert!(anomaly.cycle.is_empty());
    }
    anomaly
}

fn kinds(report: &Report) -> Vec<DepKind> {
    report.anomalies[0].cycle.iter().map(|d| d.kind).collect()
}

#[test]
fn empty_and_trivial_histories_pass() {
    let report = check(&[]);
    assert!(report.ok());
    assert_eq!((report.committed, report.edges), (0, 0));

    let report = check(&[
        c(1, vec![r("x", 0, None), w("x", 10, 0)]),
        c(2, vec![r("x", 1, Some(10)), d("x", 1)]),
        c(3, vec![r("x", 2, None), w("x", 30, 2)]),
    ]);
    assert!(report.ok(), "{report}");
    assert_eq!(report.committed, 3);
    // 1 -ww-> 2 -ww-> 3 and 1 -wr-> 2 -wr-> 3 (the read of the tombstone); each read of the
    // version before its own write is no edge.
    assert_eq!(report.edges, 4, "{report}");
}

#[test]
fn g0_write_cycle() {
    // T1 installs x@1 then T2 x@2; T2 installs y@1 then T1 y@2.
    let report = check(&[
        c(1, vec![w("x", 11, 0), w("y", 12, 1)]),
        c(2, vec![w("x", 21, 1), w("y", 22, 0)]),
    ]);
    let anomaly = only(&report, AnomalyKind::G0, &[1, 2]);
    assert_eq!(kinds(&report), vec![DepKind::Ww, DepKind::Ww]);
    let text = format_cycle(&anomaly.cycle);
    assert_eq!(text, "T1 -ww(x@1)-> T2 -ww(y@1)-> T1");
}

#[test]
fn g1a_aborted_read() {
    let report = check(&[
        txn(1, Status::Aborted, vec![w("x", 10, 0)]),
        c(2, vec![r("x", 1, Some(10))]),
    ]);
    only(&report, AnomalyKind::G1a, &[2, 1]);

    // A tombstone only an aborted delete installed.
    let report = check(&[
        c(1, vec![w("x", 10, 0)]),
        txn(2, Status::Aborted, vec![d("x", 1)]),
        c(3, vec![r("x", 2, None)]),
    ]);
    only(&report, AnomalyKind::G1a, &[3, 2]);

    // A value nobody wrote (whoever installed that version).
    let report = check(&[c(1, vec![w("x", 10, 0)]), c(2, vec![r("x", 1, Some(99))])]);
    only(&report, AnomalyKind::G1a, &[2]);
    let report = check(&[c(2, vec![r("x", 0, Some(99))])]);
    only(&report, AnomalyKind::G1a, &[2]);

    // An aborted reader's reads are not checked.
    let report = check(&[
        txn(1, Status::Aborted, vec![w("x", 10, 0)]),
        txn(2, Status::Aborted, vec![r("x", 1, Some(10))]),
    ]);
    assert!(report.ok(), "{report}");
}

#[test]
fn g1b_intermediate_read() {
    // T1 writes x twice; only 2 is installed at x@1.
    let report = check(&[
        c(1, vec![w("x", 1, 0), w("x", 2, 0)]),
        c(2, vec![r("x", 1, Some(1))]),
    ]);
    only(&report, AnomalyKind::G1b, &[2, 1]);

    // Reading the final value is fine.
    let report = check(&[
        c(1, vec![w("x", 1, 0), w("x", 2, 0)]),
        c(2, vec![r("x", 1, Some(2))]),
    ]);
    assert!(report.ok(), "{report}");
}

#[test]
fn g1c_circular_information_flow() {
    // Each reads what the other installed.
    let report = check(&[
        c(1, vec![w("x", 1, 0), r("y", 1, Some(2))]),
        c(2, vec![w("y", 2, 0), r("x", 1, Some(1))]),
    ]);
    only(&report, AnomalyKind::G1c, &[1, 2]);
    assert_eq!(kinds(&report), vec![DepKind::Wr, DepKind::Wr]);
}

#[test]
fn g_single_read_skew() {
    // T1 installs x@1 and y@1; T2 saw x before T1 and y after it.
    let report = check(&[
        c(1, vec![w("x", 1, 0), w("y", 2, 0)]),
        c(2, vec![r("x", 0, None), r("y", 1, Some(2))]),
    ]);
    let anomaly = only(&report, AnomalyKind::GSingle, &[1, 2]);
    let mut got = kinds(&report);
    got.sort();
    assert_eq!(got, vec![DepKind::Wr, DepKind::Rw]);
    assert!(anomaly.to_string().starts_with("G-single: "), "{anomaly}");
}

#[test]
fn g2_write_skew_has_two_rw_edges() {
    // Both read x and y at 0; T1 writes x, T2 writes y. Each overwrote what the other read.
    let report = check(&[
        c(1, vec![r("x", 0, None), r("y", 0, None), w("x", 1, 0)]),
        c(2, vec![r("x", 0, None), r("y", 0, None), w("y", 2, 0)]),
    ]);
    only(&report, AnomalyKind::G2, &[1, 2]);
    assert_eq!(kinds(&report), vec![DepKind::Rw, DepKind::Rw]);
}

#[test]
fn most_severe_cycle_of_a_component_is_reported() {
    // Write skew between T1 and T2 (G2), read skew between T1 and T3 (G-single), all one
    // component: G-single wins.
    let report = check(&[
        c(
            1,
            vec![r("x", 0, None), r("y", 0, None), w("x", 1, 0), w("z", 3, 0)],
        ),
        c(2, vec![r("x", 0, None), r("y", 0, None), w("y", 2, 0)]),
        c(3, vec![r("x", 0, None), r("z", 1, Some(3))]),
    ]);
    let anomaly = only(&report, AnomalyKind::GSingle, &[1, 3]);
    assert_eq!(anomaly.cycle.len(), 2);

    // A ww cycle between T1 and T3 in a component that also holds rw and wr edges (T2):
    // G0 wins.
    let report = check(&[
        c(1, vec![r("y", 0, None), w("x", 11, 0), w("u", 12, 1)]),
        c(2, vec![r("x", 1, Some(11)), w("y", 21, 0)]),
        c(3, vec![w("x", 31, 1), w("u", 32, 0)]),
    ]);
    let anomaly = only(&report, AnomalyKind::G0, &[1, 3]);
    assert_eq!(anomaly.cycle.len(), 2);
}

#[test]
fn duplicate_version_lost_update() {
    let report = check(&[
        c(1, vec![r("x", 0, None), w("x", 1, 0)]),
        c(2, vec![r("x", 0, None), w("x", 2, 0)]),
    ]);
    let duplicate: Vec<&Anomaly> = report.of_kind(AnomalyKind::DuplicateVersion).collect();
    assert_eq!(duplicate.len(), 1, "{report}");
    assert_eq!(duplicate[0].txns, vec![1, 2]);
    // Each read x@0 that the other overwrote: also a G2 cycle.
    assert_eq!(report.anomalies.len(), 2, "{report}");
    assert_eq!(report.anomalies[1].kind, AnomalyKind::G2);

    // Blind writes validate x@0 too, so the same holds.
    let report = check(&[c(1, vec![w("x", 1, 0)]), c(2, vec![w("x", 2, 0)])]);
    let kinds: Vec<AnomalyKind> = report.anomalies.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, vec![AnomalyKind::DuplicateVersion, AnomalyKind::G2]);
}

#[test]
fn value_mismatch() {
    // Value 3 was installed at x@2, not x@1.
    let report = check(&[
        c(1, vec![w("x", 1, 0)]),
        c(3, vec![w("x", 3, 1)]),
        c(2, vec![r("x", 1, Some(3))]),
    ]);
    only(&report, AnomalyKind::ValueMismatch, &[2, 3]);

    // Absent at a version that holds a value.
    let report = check(&[c(1, vec![w("x", 1, 0)]), c(2, vec![r("x", 1, None)])]);
    only(&report, AnomalyKind::ValueMismatch, &[2, 1]);

    // A value at a tombstone.
    let report = check(&[
        c(1, vec![w("x", 1, 0)]),
        c(2, vec![d("x", 1)]),
        c(3, vec![r("x", 2, Some(1))]),
    ]);
    only(&report, AnomalyKind::ValueMismatch, &[3, 1]);
}

#[test]
fn phantom_version_and_tolerated_gaps() {
    let report = check(&[c(1, vec![w("x", 1, 0)]), c(2, vec![r("x", 5, None)])]);
    only(&report, AnomalyKind::PhantomVersion, &[2]);

    // x@2 has no recorded installer, but x@3 was installed on top of it: a gap.
    let report = check(&[
        c(1, vec![w("x", 1, 0)]),
        c(3, vec![w("x", 3, 2)]),
        c(2, vec![r("x", 2, None)]),
    ]);
    assert!(report.ok(), "{report}");
}

#[test]
fn aba_after_versions_reset_on_delete() {
    // sconekv.md §11.9. T2 reads x@1 = 1 and writes y. Meanwhile T3 deletes x, and T4 reads
    // y@0 and writes x = 4. A store that resets versions on delete puts x back at version 0,
    // so T4 installs x@1 again, and T2's validation of x@1 succeeds: T2 commits.
    let reset = [
        c(1, vec![w("x", 1, 0)]),
        c(3, vec![d("x", 1)]),
        c(4, vec![r("y", 0, None), w("x", 4, 0)]),
        c(2, vec![r("x", 1, Some(1)), w("y", 20, 0)]),
    ];
    let report = check(&reset);
    let duplicate: Vec<&Anomaly> = report.of_kind(AnomalyKind::DuplicateVersion).collect();
    assert_eq!(duplicate.len(), 1, "{report}");
    assert_eq!(duplicate[0].txns, vec![1, 4]);

    // The same schedule recorded with monotone versions (T4 writes on top of the tombstone
    // x@2): T2 must precede T3 (it read x before the delete), T3 precedes T4 (ww), and T4
    // precedes T2 (it read y before T2 wrote it). A correct store would have aborted T2;
    // if it commits anyway, the cycle is reported.
    let monotone = [
        c(1, vec![w("x", 1, 0)]),
        c(3, vec![d("x", 1)]),
        c(4, vec![r("y", 0, None), w("x", 4, 2)]),
        c(2, vec![r("x", 1, Some(1)), w("y", 20, 0)]),
    ];
    let report = check(&monotone);
    let anomaly = only(&report, AnomalyKind::G2, &[2, 3, 4]);
    let text = format_cycle(&anomaly.cycle);
    assert!(
        text.contains("T2 -rw(x@1)-> T3 -ww(x@2)-> T4 -rw(y@0)-> T2"),
        "{text}"
    );
}

#[test]
fn unknown_transactions_count_only_when_observed() {
    // Observed by a read.
    let report = check(&[
        txn(1, Status::Unknown, vec![w("x", 1, 0)]),
        c(2, vec![r("x", 1, Some(1))]),
    ]);
    assert!(report.ok(), "{report}");
    assert_eq!((report.committed, report.unknown), (2, 0));

    // Observed by a write on top of its version.
    let report = check(&[
        txn(1, Status::Unknown, vec![w("x", 1, 0)]),
        c(2, vec![w("x", 2, 1)]),
    ]);
    assert!(report.ok(), "{report}");
    assert_eq!((report.committed, report.unknown, report.edges), (2, 0, 1));

    // Observed through another observed Unknown.
    let report = check(&[
        txn(1, Status::Unknown, vec![w("x", 1, 0)]),
        txn(2, Status::Unknown, vec![r("x", 1, Some(1)), w("y", 2, 0)]),
        c(3, vec![r("y", 1, Some(2))]),
    ]);
    assert!(report.ok(), "{report}");
    assert_eq!((report.committed, report.unknown), (3, 0));

    // Not observed: dropped, with no edges (T2 read x@0 before it).
    let report = check(&[
        txn(1, Status::Unknown, vec![w("x", 1, 0)]),
        c(2, vec![r("x", 0, None)]),
    ]);
    assert!(report.ok(), "{report}");
    assert_eq!((report.committed, report.unknown, report.edges), (1, 1, 0));

    // Two Unknown writers of x@1 and a committed write on top: ambiguous, neither counts.
    let report = check(&[
        txn(1, Status::Unknown, vec![w("x", 1, 0)]),
        txn(2, Status::Unknown, vec![w("x", 2, 0)]),
        c(3, vec![w("x", 3, 1)]),
    ]);
    assert!(report.ok(), "{report}");
    assert_eq!((report.committed, report.unknown), (1, 2));

    // An observed Unknown takes part in cycles like a committed transaction.
    let report = check(&[
        txn(1, Status::Unknown, vec![w("x", 1, 0), r("y", 1, Some(2))]),
        c(2, vec![w("y", 2, 0), r("x", 1, Some(1))]),
    ]);
    only(&report, AnomalyKind::G1c, &[1, 2]);
}

#[test]
fn reads_from_the_own_buffer_are_skipped() {
    // T1 reads its own buffered write (recorded with the version it will install): ignored.
    let report = check(&[c(
        1,
        vec![w("x", 1, 0), r("x", 1, Some(1)), r("x", 7, None)],
    )]);
    assert!(report.ok(), "{report}");
    assert_eq!(report.edges, 0);
}

#[test]
fn inconsistent_reads_within_one_committed_transaction_are_a_cycle() {
    // T2 read x at two versions: validation cannot have passed both.
    let report = check(&[
        c(1, vec![w("x", 1, 0)]),
        c(2, vec![r("x", 0, None), r("x", 1, Some(1))]),
    ]);
    only(&report, AnomalyKind::GSingle, &[1, 2]);
}

#[test]
fn json_round_trip() {
    let history = vec![
        c(1, vec![r("x", 0, None), w("x", 1, 0), d("y", 3)]),
        txn(2, Status::Unknown, vec![]),
        txn(3, Status::Aborted, vec![w("y", 9, 4)]),
    ];
    let json = serde_json::to_string(&history).unwrap();
    assert!(json.contains(r#""type":"read""#) && json.contains(r#""status":"unknown""#));
    let back: Vec<Txn> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, history);

    let report = check(&[
        c(1, vec![w("x", 11, 0), w("y", 12, 1)]),
        c(2, vec![w("x", 21, 1), w("y", 22, 0)]),
    ]);
    let json = serde_json::to_string(&report).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    assert!(report.to_string().contains("FAIL"));
}

#[test]
fn a_long_ring_is_found_without_recursion() {
    // T_i writes k_i and read k_{i+1} at 0, which T_{i+1} overwrote: one rw ring through
    // every transaction. A recursive Tarjan would overflow the stack.
    let n = 100_000u64;
    let history: Vec<Txn> = (0..n)
        .map(|i| {
            let next = format!("k{}", (i + 1) % n);
            c(i, vec![r(&next, 0, None), w(&format!("k{i}"), i, 0)])
        })
        .collect();
    let report = check(&history);
    assert_eq!(report.anomalies.len(), 1);
    assert_eq!(report.anomalies[0].kind, AnomalyKind::G2);
    assert_eq!(report.anomalies[0].cycle.len(), n as usize);
}

//! The chaos harness on real processes, in the default test run: short runs of `synod chaos`
//! with every fault kind must pass for zab, zab-ct, paxos and mencius, and a planted bug (sync answered locally,
//! so a partitioned server serves stale reads) must be caught; the same for SconeKV's store
//! (`--kv`: transactions checked for serializability), with versions that reset on delete as
//! the planted bug. The long runs are commands (see
//! docs/testing.md). Ports 25000–25999.

use std::process::Command;
use std::sync::Mutex;

/// One cluster at a time: the machine has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn chaos(args: &[&str]) -> (i32, String) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_synod"))
        .arg("chaos")
        .args(args)
        .arg("--out")
        .arg(out_dir.path())
        .output()
        .expect("run synod chaos");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_short_chaos_run_of_zab_with_every_fault_passes() {
    let (code, out) = chaos(&[
        "--protocol",
        "zab",
        "--duration",
        "10s",
        "--faults",
        "kill,pause,partition,restart",
        "--seed",
        "11",
        "--base-port",
        "25200",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("linearizability: PASS"), "{out}");
    assert!(out.contains("acknowledged writes survive: PASS"), "{out}");
}

#[test]
fn a_short_chaos_run_of_zab_ct_with_every_fault_passes() {
    let (code, out) = chaos(&[
        "--protocol",
        "zab-ct",
        "--duration",
        "8s",
        "--faults",
        "kill,pause,partition,restart",
        "--seed",
        "12",
        "--base-port",
        "25300",
    ]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_short_chaos_run_of_paxos_with_every_fault_passes() {
    let (code, out) = chaos(&[
        "--protocol",
        "paxos",
        "--duration",
        "10s",
        "--faults",
        "kill,pause,partition,restart",
        "--seed",
        "13",
        "--base-port",
        "25500",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("linearizability: PASS"), "{out}");
    assert!(out.contains("acknowledged writes survive: PASS"), "{out}");
}

#[test]
fn a_short_chaos_run_of_mencius_with_every_fault_passes() {
    // Every replica proposes: a dead or cut-off one stalls the others until it is revoked, and
    // the session duties move between replicas as their failure detectors change their minds.
    let (code, out) = chaos(&[
        "--protocol",
        "mencius",
        "--duration",
        "10s",
        "--faults",
        "kill,pause,partition,restart",
        "--seed",
        "14",
        "--base-port",
        "25600",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("linearizability: PASS"), "{out}");
    assert!(out.contains("acknowledged writes survive: PASS"), "{out}");
}

#[test]
fn the_harness_catches_a_planted_stale_read_bug() {
    // With `sync` answered locally, a server cut off from the leader keeps serving "synced"
    // reads of its old state while the majority moves on: the history is not linearizable.
    let (code, out) = chaos(&[
        "--protocol",
        "zab",
        "--duration",
        "40s",
        "--faults",
        "partition",
        "--bug",
        "stale-sync",
        // Many clients on one key, mostly reading: whichever node is cut off has clients
        // reading it while the majority writes it. A client's first write at the cut-off node
        // blocks its session, so only the reads before it can come back stale: with the
        // default 40 % reads a run had 1 to 7 stale reads, and one CI run had none (seed 5,
        // 40 s, 123,208 operations, all linearizable); with 90 % it has 50 to 90, also with
        // both cores busy. (Seed 3 with 6 clients over 3 keys once missed the bug too; 20 s
        // of partitions missed it when the chaos tests shared the machine: docs/testing.md.)
        "--clients",
        "12",
        "--keys",
        "1",
        "--reads",
        "90",
        "--seed",
        "5",
        "--base-port",
        "25400",
    ]);
    assert_eq!(code, 1, "the planted bug must fail the run:\n{out}");
    assert!(out.contains("is not linearizable"), "{out}");
    assert!(out.contains("history written to"), "{out}");
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let (code, out) = chaos(&["--faults", "meteor", "--duration", "1s"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown fault 'meteor'"), "{out}");
}

#[test]
fn a_short_chaos_run_of_the_kv_store_with_every_fault_passes() {
    // SconeKV's buckets under kills, pauses, partitions and restarts: every recorded
    // transaction (and a final read of every key) must be serializable.
    let (code, out) = chaos(&[
        "--kv",
        "--protocol",
        "zab",
        "--duration",
        "10s",
        "--faults",
        "kill,pause,partition,restart",
        "--keys",
        "6",
        "--seed",
        "15",
        "--base-port",
        "25700",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("transactional check: PASS"), "{out}");
    assert!(out.contains("final read committed"), "{out}");
}

#[test]
fn a_short_chaos_run_of_the_kv_store_on_paxos_passes() {
    let (code, out) = chaos(&[
        "--kv",
        "--protocol",
        "paxos",
        "--duration",
        "8s",
        "--faults",
        "kill,pause,partition,restart",
        "--keys",
        "6",
        "--seed",
        "16",
        "--base-port",
        "25800",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("transactional check: PASS"), "{out}");
}

#[test]
fn the_kv_harness_catches_versions_that_reset_on_delete() {
    // The thesis prototype's ABA (sconekv.md §11.9): a delete resets the version, so a writer
    // that read the key before the delete validates against the reborn version.
    let (code, out) = chaos(&[
        "--kv",
        "--duration",
        "15s",
        "--faults",
        "none",
        "--bug",
        "kv-reset-on-delete",
        "--keys",
        "6",
        "--seed",
        "3",
        "--base-port",
        "25900",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("transactional check: FAIL") || out.contains("DuplicateVersion"),
        "{out}"
    );
}

//! The readers on files written here the way ZooKeeper writes them (a small jute writer), on
//! corrupted copies, and on junk.

use super::archive::adler32;
use super::*;
use crate::jute::op;
use proptest::prelude::*;

/// A jute binary writer (`BinaryOutputArchive`).
#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn int(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn long(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn byte(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn buf(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            None => self.int(-1),
            Some(b) => {
                self.int(b.len() as i32);
                self.0.extend_from_slice(b);
                self
            }
        }
    }
    fn string(&mut self, s: &str) -> &mut Self {
        self.buf(Some(s.as_bytes()))
    }
    fn open_acl(&mut self) -> &mut Self {
        self.int(1).int(31).string("world").string("anyone")
    }
    fn seal(&mut self) -> &mut Self {
        let c = adler32(&self.0) as i64;
        self.long(c).string("/")
    }
}

fn stat(w: &mut W, czxid: i64, cversion: i32, owner: i64) {
    w.long(czxid).long(czxid).long(1000).long(1000);
    w.int(0).int(cversion).int(0).long(owner).long(czxid);
}

/// A fuzzy snapshot that started at zxid 0x100000000 and holds the two transactions after it: /, /zookeeper, /zookeeper/quota, /a (ACL 1: digest),
/// /a/e (ephemeral of session 0x55), session 0x55 with timeout 30000.
fn snapshot_bytes() -> Vec<u8> {
    let mut w = W::default();
    w.int(snap::SNAP_MAGIC).int(2).long(-1);
    w.int(1).long(0x55).int(30_000);
    w.int(1)
        .long(1)
        .int(1)
        .int(31)
        .string("digest")
        .string("u:hash=");
    w.string("");
    w.buf(Some(b"")).long(-1);
    stat(&mut w, 0, 2, 0);
    w.string("/zookeeper").buf(Some(b"")).long(-1);
    stat(&mut w, 0, 1, 0);
    w.string("/zookeeper/quota").buf(Some(b"")).long(-1);
    stat(&mut w, 0, 0, 0);
    w.string("/a").buf(Some(b"\x00\x01")).long(1);
    stat(&mut w, 0x1_0000_0001, 1, 0);
    w.string("/a/e").buf(None).long(-1);
    stat(&mut w, 0x1_0000_0002, 0, 0x55);
    w.string("/");
    w.seal();
    // 3.6+: the digest, sealed again.
    w.long(0x1_0000_0002).int(2).long(12345);
    w.seal();
    w.0
}

fn txn(w: &mut W, client: i64, zxid: i64, ty: i32, body: &[u8]) {
    let mut t = W::default();
    t.long(client).int(1).long(zxid).long(2000).int(ty);
    t.0.extend_from_slice(body);
    w.long(adler32(&t.0) as i64).buf(Some(&t.0)).byte(b'B');
}

/// A log from 0x100000001: two creates replayed over the fuzzy snapshot (they fail), a new sequential
/// node, a setData, a multi, a new session with an ephemeral, the old session closed, and
/// preallocated zeros.
fn log_bytes() -> Vec<u8> {
    let mut w = W::default();
    w.int(txnlog::LOG_MAGIC).int(2).long(0);
    let mut b = W::default();
    b.string("/a").buf(Some(b"x")).open_acl().byte(0).int(1);
    txn(&mut w, 0x55, 0x1_0000_0001, op::CREATE, &b.0);
    let mut b = W::default();
    b.string("/a/e").buf(None).open_acl().byte(1).int(1);
    txn(&mut w, 0x55, 0x1_0000_0002, op::CREATE, &b.0);
    let mut b = W::default();
    b.string("/a/q0000000002")
        .buf(Some(b"s"))
        .open_acl()
        .byte(0)
        .int(3);
    txn(&mut w, 0x55, 0x1_0000_0003, op::CREATE2, &b.0);
    let mut b = W::default();
    b.string("/a").buf(Some(b"v2")).int(1).int(1).long(99); // with a TxnDigest
    txn(&mut w, 0x55, 0x1_0000_0004, op::SET_DATA, &b.0);
    let mut b = W::default();
    let mut c1 = W::default();
    c1.string("/b").buf(None).open_acl().byte(0).int(3);
    let mut d1 = W::default();
    d1.string("/a/q0000000002");
    b.int(2)
        .int(op::CREATE)
        .buf(Some(&c1.0))
        .int(op::DELETE)
        .buf(Some(&d1.0));
    txn(&mut w, 0x55, 0x1_0000_0005, op::MULTI, &b.0);
    // A failed multi: nothing of it applies.
    let mut b = W::default();
    let mut e1 = W::default();
    e1.int(-101);
    b.int(2)
        .int(op::ERROR)
        .buf(Some(&e1.0))
        .int(op::ERROR)
        .buf(Some(&e1.0));
    txn(&mut w, 0x55, 0x1_0000_0006, op::MULTI, &b.0);
    let mut b = W::default();
    b.int(10_000);
    txn(&mut w, 0x66, 0x1_0000_0007, op::CREATE_SESSION, &b.0);
    let mut b = W::default();
    b.string("/b/e2").buf(Some(b"")).open_acl().byte(1).int(1);
    txn(&mut w, 0x66, 0x1_0000_0008, op::CREATE, &b.0);
    let mut b = W::default();
    b.int(1).string("/a/e");
    txn(&mut w, 0x55, 0x1_0000_0009, op::CLOSE_SESSION, &b.0);
    w.0.extend_from_slice(&[0u8; 64]);
    w.0
}

fn dir_with(snap: &[u8], log: &[u8]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let v = d.path().join("version-2");
    std::fs::create_dir(&v).unwrap();
    std::fs::write(v.join("snapshot.100000000"), snap).unwrap();
    std::fs::write(v.join("log.100000001"), log).unwrap();
    d
}

fn restored(i: &Imported) -> ZkMachine {
    let mut m = ZkMachine::default();
    m.restore(1, i.state.clone()).unwrap();
    m
}

/// A create transaction's body: `path`, `data`, one ACL entry (`perms`, `scheme`, `id`), not
/// ephemeral, the parent's cversion.
fn create_body(
    path: &str,
    data: &[u8],
    (perms, scheme, id): (i32, &str, &str),
    cversion: i32,
) -> Vec<u8> {
    let mut b = W::default();
    b.string(path)
        .buf(Some(data))
        .int(1)
        .int(perms)
        .string(scheme)
        .string(id)
        .byte(0)
        .int(cversion);
    b.0
}

/// A fuzzy snapshot whose node /f names ACL 2, created after the ACL cache (holding only 1)
/// was written: `defined` adds a log whose create of /f (failing: the node is there) brings
/// that list to the cache as reference 2, as ZooKeeper 3.6+ replays it.
fn fuzzy_acl_dir(defined: bool) -> tempfile::TempDir {
    let mut w = W::default();
    w.int(snap::SNAP_MAGIC).int(2).long(-1);
    w.int(0);
    w.int(1).long(1).open_acl();
    w.string("").buf(Some(b"")).long(-1);
    stat(&mut w, 0, 2, 0);
    w.string("/zookeeper").buf(Some(b"")).long(-1);
    stat(&mut w, 0, 0, 0);
    w.string("/f").buf(Some(b"d")).long(2);
    stat(&mut w, 0x1_0000_0001, 0, 0);
    w.string("/");
    w.seal();
    let mut l = W::default();
    l.int(txnlog::LOG_MAGIC).int(2).long(0);
    if defined {
        let b = create_body("/f", b"d", (1, "ip", "10.1.2.3"), 1);
        txn(&mut l, 0x55, 0x1_0000_0001, op::CREATE, &b);
    }
    dir_with(&w.0, &l.0)
}

#[test]
fn a_node_naming_an_acl_written_after_the_cache_gets_it_from_the_replayed_create() {
    let d = fuzzy_acl_dir(true);
    let i = import(d.path(), None).unwrap();
    let m = restored(&i);
    let f = m.tree.get("/f").unwrap();
    assert_eq!(f.acl.len(), 1);
    assert_eq!(f.acl[0].id.scheme, "ip");
    assert_eq!(f.acl[0].id.id, "10.1.2.3");
    // Nothing defines it: a clear error, not a node with no ACL.
    let d = fuzzy_acl_dir(false);
    let e = import(d.path(), None).unwrap_err();
    assert!(e.what.contains("/f names ACL 2"), "{e}");
}

/// The references must be ZooKeeper's, counts included: the cache was written holding {7: L},
/// L's last user was deleted (L left the cache), then /n was created with L again and got
/// reference 8 before the nodes were written. Loading purges the unused 7; the replayed create
/// of /n brings L back as 8, and a later create of /m with a new list M gets 9. Without the
/// counts, L would keep 7, M would take 8 and /n would end with M's ACL, silently.
#[test]
fn acl_references_follow_zookeepers_reference_counts() {
    let mut w = W::default();
    w.int(snap::SNAP_MAGIC).int(2).long(-1);
    w.int(0);
    w.int(1)
        .long(7)
        .int(1)
        .int(31)
        .string("digest")
        .string("u:hash=");
    w.string("").buf(Some(b"")).long(-1);
    stat(&mut w, 0, 2, 0);
    w.string("/n").buf(Some(b"")).long(8);
    stat(&mut w, 0x1_0000_0001, 0, 0);
    w.string("/");
    w.seal();
    let mut l = W::default();
    l.int(txnlog::LOG_MAGIC).int(2).long(0);
    let b = create_body("/n", b"", (31, "digest", "u:hash="), 1);
    txn(&mut l, 0x55, 0x1_0000_0001, op::CREATE, &b);
    let b = create_body("/m", b"", (1, "ip", "10.9.9.9"), 2);
    txn(&mut l, 0x55, 0x1_0000_0002, op::CREATE, &b);
    let d = dir_with(&w.0, &l.0);
    let i = import(d.path(), None).unwrap();
    let m = restored(&i);
    assert_eq!(m.tree.get("/n").unwrap().acl[0].id.scheme, "digest");
    assert_eq!(m.tree.get("/m").unwrap().acl[0].id.scheme, "ip");
}

#[test]
fn adler32_matches_the_reference() {
    assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    assert_eq!(adler32(b""), 1);
    let big = vec![0xffu8; 100_000];
    // Reference: the unreduced definition.
    let (mut a, mut b) = (1u64, 0u64);
    for &x in &big {
        a = (a + x as u64) % 65521;
        b = (b + a) % 65521;
    }
    assert_eq!(adler32(&big), ((b << 16) | a) as u32);
}

#[test]
fn passwords_are_java_randoms() {
    // new java.util.Random(42).nextInt() == -1170105035: the first 4 bytes of nextBytes are
    // that int, least significant first. Seed 42 is the id 42 ^ 0xB3415C00.
    let p = zookeeper_password(42 ^ 0xB341_5C00);
    assert_eq!(p.len(), 16);
    assert_eq!(&p[..4], &(-1_170_105_035i32).to_le_bytes());
}

#[test]
fn a_snapshot_and_its_log_replay_as_zookeeper_restarts() {
    let d = dir_with(&snapshot_bytes(), &log_bytes());
    let i = import(d.path(), None).unwrap();
    assert_eq!(i.zxid, 0x1_0000_0009);
    assert_eq!(i.replayed, 9);
    assert_eq!(i.failed, 2, "the creates the fuzzy snapshot already held");
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    let m = restored(&i);
    let t = &m.tree;
    let a = t.get("/a").unwrap();
    assert_eq!(a.data.as_deref(), Some(&b"v2"[..]));
    assert_eq!(a.stat.version, 1);
    assert_eq!(a.stat.mzxid, 0x1_0000_0004);
    assert_eq!(a.acl[0].id.scheme, "digest");
    // /a had 3 creations (q0000000002 among them), one child deleted, the ephemeral closed.
    assert_eq!(a.stat.cversion, 3);
    assert!(t.get("/a/q0000000002").is_none());
    assert!(t.get("/a/e").is_none(), "the closed session's ephemeral");
    assert_eq!(t.get("/b").unwrap().data, None, "null data stays null");
    let e2 = t.get("/b/e2").unwrap();
    assert_eq!(e2.stat.ephemeral_owner, 0x66);
    assert!(t.sessions.contains_key(&0x66) && !t.sessions.contains_key(&0x55));
    assert_eq!(t.sessions[&0x66].timeout_ms, 10_000);
    assert!(t.sessions[&0x66].ephemerals.contains("/b/e2"));
    assert_eq!(t.sessions[&0x66].password, zookeeper_password(0x66));
    // The failed multi changed nothing.
    assert_eq!(t.get("/").unwrap().stat.cversion, 3);
}

#[test]
fn every_corrupted_byte_of_the_snapshot_is_refused() {
    let good = snapshot_bytes();
    let log = log_bytes();
    let mut refused = 0;
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x40;
        let d = dir_with(&bad, &log);
        match import(d.path(), None) {
            Err(e) => {
                assert!(e.file.ends_with("snapshot.100000000"), "{e}");
                refused += 1;
            }
            Ok(i) => panic!("a flipped byte was accepted: {:?}", i.warnings),
        }
    }
    assert_eq!(refused, good.len());
    let e = import(dir_with(&good[..good.len() - 40], &log).path(), None).unwrap_err();
    assert!(e.to_string().contains("snapshot.100000000: at byte"), "{e}");
}

#[test]
fn a_corrupted_log_record_is_refused_with_its_offset() {
    let log = log_bytes();
    // Flip a byte in the second record's body (after the 16-byte file header and the first
    // record).
    let first_len = i32::from_be_bytes(log[24..28].try_into().unwrap()) as usize;
    assert!(first_len < 200);
    let second = 16 + 12 + first_len + 1;
    let mut bad = log.clone();
    bad[second + 20] ^= 1;
    let e = import(dir_with(&snapshot_bytes(), &bad).path(), None).unwrap_err();
    assert!(e.what.contains("checksum mismatch"), "{e}");
    assert_eq!(e.offset, second as u64);
    assert!(e.file.ends_with("log.100000001"));
}

#[test]
fn a_torn_tail_ends_the_newest_log_with_a_warning_but_not_an_older_one() {
    let log = log_bytes();
    let end = log.len() - 64;
    let torn = &log[..end - 5];
    let i = import(dir_with(&snapshot_bytes(), torn).path(), None).unwrap();
    assert_eq!(i.zxid, 0x1_0000_0008, "the last record is lost");
    assert_eq!(i.warnings.len(), 1, "{:?}", i.warnings);
    let d = dir_with(&snapshot_bytes(), torn);
    let mut later = W::default();
    later.int(txnlog::LOG_MAGIC).int(2).long(0);
    std::fs::write(d.path().join("version-2/log.100000009"), &later.0).unwrap();
    let e = import(d.path(), None).unwrap_err();
    assert!(e.what.contains("later log files follow"), "{e}");
}

#[test]
fn missing_transactions_are_refused() {
    let d = dir_with(&snapshot_bytes(), &log_bytes());
    std::fs::remove_file(d.path().join("version-2/log.100000001")).unwrap();
    let mut w = W::default();
    w.int(txnlog::LOG_MAGIC).int(2).long(0);
    let mut b = W::default();
    b.string("/c");
    txn(&mut w, 0x55, 0x1_0000_0007, op::DELETE, &b.0);
    std::fs::write(d.path().join("version-2/log.100000007"), &w.0).unwrap();
    let e = import(d.path(), None).unwrap_err();
    assert!(e.what.contains("missing"), "{e}");
}

#[test]
fn an_unreadable_newest_snapshot_falls_back_to_an_older_one_with_a_warning() {
    let d = dir_with(&snapshot_bytes(), &log_bytes());
    std::fs::write(d.path().join("version-2/snapshot.100000005"), b"junk").unwrap();
    let i = import(d.path(), None).unwrap();
    assert!(i.snapshot.ends_with("snapshot.100000000"));
    assert_eq!(i.warnings.len(), 1);
    assert!(
        i.warnings[0].contains("snapshot.100000005"),
        "{:?}",
        i.warnings
    );
}

#[test]
fn not_a_data_directory() {
    let d = tempfile::tempdir().unwrap();
    let e = import(d.path(), None).unwrap_err();
    assert!(e.what.contains("no snapshot"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Junk, and valid files with junk spliced in, give errors (or a valid parse), never a
    /// panic or a huge allocation.
    #[test]
    fn the_readers_survive_junk(junk in proptest::collection::vec(any::<u8>(), 0..512),
                                at in 0usize..2000, cut in 0usize..2000) {
        let p = std::path::Path::new("junk");
        let _ = snap::read(p, &junk);
        let _ = txnlog::read(p, &junk, true);
        let _ = txnlog::decode_txn(p, &junk, 0);
        for good in [snapshot_bytes(), log_bytes()] {
            let mut b = good.clone();
            let at = at % b.len();
            let end = (at + junk.len()).min(b.len());
            b[at..end].copy_from_slice(&junk[..end - at]);
            b.truncate(cut.max(1) % (b.len() + 1));
            let _ = snap::read(p, &b);
            let _ = txnlog::read(p, &b, true);
            let _ = txnlog::read(p, &b, false);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Reading only the used part of a log file decides exactly as reading all of it: the same
    /// records, the same cut-short record, the same error.
    #[test]
    fn the_used_part_of_a_log_reads_as_the_whole(junk in proptest::collection::vec(any::<u8>(), 0..64),
                                                  at in 0usize..2000, cut in 0usize..2000,
                                                  zeros in 0usize..300) {
        let mut b = log_bytes();
        let at = at % b.len();
        let end = (at + junk.len()).min(b.len());
        b[at..end].copy_from_slice(&junk[..end - at]);
        b.truncate(cut.max(1) % (b.len() + 1));
        b.extend(std::iter::repeat_n(0u8, zeros));
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log.1");
        std::fs::write(&p, &b).unwrap();
        let used = txnlog::read_used(&p).unwrap();
        prop_assert!(b.starts_with(&used));
        for last in [true, false] {
            let whole = format!("{:?}", txnlog::read(&p, &b, last));
            let part = format!("{:?}", txnlog::read(&p, &used, last));
            prop_assert_eq!(whole, part);
        }
    }
}

#[test]
fn reading_the_used_part_stops_at_the_preallocated_space() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log.1");
    let mut b = log_bytes();
    let used = b.len() - 64 + 12; // the records and the zero length after them
    b.resize(8 << 20, 0); // preallocated, as ZooKeeper does (64 MB at a time)
    std::fs::write(&p, &b).unwrap();
    assert_eq!(txnlog::read_used(&p).unwrap().len(), used);
}

/// Containers, TTL nodes, setACL, deleteContainer, a V0 create (ZooKeeper < 3.3, no parent
/// cversion) and a closeSession without its 3.6+ path list.
#[test]
fn every_transaction_type_replays() {
    let mut w = W::default();
    w.int(txnlog::LOG_MAGIC).int(2).long(0);
    let mut b = W::default();
    b.string("/c").buf(Some(b"c")).open_acl().int(3);
    txn(&mut w, 0x55, 0x1_0000_0001, op::CREATE_CONTAINER, &b.0);
    let mut b = W::default();
    b.string("/t").buf(Some(b"t")).open_acl().int(4).long(5000);
    txn(&mut w, 0x55, 0x1_0000_0002, op::CREATE_TTL, &b.0);
    let mut b = W::default();
    b.string("/c/v0").buf(Some(b"old")).open_acl().byte(0);
    txn(&mut w, 0x55, 0x1_0000_0003, op::CREATE, &b.0);
    let mut b = W::default();
    b.string("/t")
        .int(1)
        .int(1)
        .string("ip")
        .string("10.0.0.1")
        .int(7);
    txn(&mut w, 0x55, 0x1_0000_0004, op::SET_ACL, &b.0);
    let mut b = W::default();
    b.string("/c/v0");
    txn(&mut w, 0x55, 0x1_0000_0005, op::DELETE, &b.0);
    let mut b = W::default();
    b.string("/c");
    txn(&mut w, 0x55, 0x1_0000_0006, op::DELETE_CONTAINER, &b.0);
    txn(&mut w, 0x55, 0x1_0000_0007, op::CLOSE_SESSION, &[]);
    let d = dir_with(&snapshot_bytes(), &w.0);
    let i = import(d.path(), None).unwrap();
    assert_eq!((i.replayed, i.failed), (7, 0));
    let m = restored(&i);
    let t = &m.tree;
    assert!(t.get("/c").is_none(), "the container was deleted");
    let ttl = t.get("/t").unwrap();
    assert_eq!(ttl.kind(), crate::tree::Kind::Ttl(5000));
    assert_eq!(ttl.stat.aversion, 7);
    assert_eq!(ttl.acl[0].id.id, "10.0.0.1");
    // The root counted /c and /t; the V0 create moved /c's cversion by one.
    assert_eq!(t.get("/").unwrap().stat.cversion, 4);
    assert!(
        t.get("/a/e").is_none(),
        "closed without a path list: its ephemerals go"
    );
    assert!(t.sessions.is_empty());
    assert!(t.reapable.contains("/t"));
}

#[test]
fn an_ephemeral_of_a_session_missing_from_the_table_is_dropped_at_load() {
    // The snapshot's /a/e belongs to 0x55: the same snapshot without a session table.
    let mut s = snapshot_bytes();
    // Session count 1 → 0: drop the 12 bytes of the session (after the 16-byte header).
    s.splice(16..32, 0i32.to_be_bytes());
    // Seal again: the tail (seal, digest, seal) rebuilt over the changed bytes.
    let body_end = s.len() - (8 + 4 + 1) - (8 + 4 + 8) - (8 + 4 + 1);
    let mut w = W(s[..body_end].to_vec());
    w.seal();
    w.long(0x1_0000_0002).int(2).long(12345);
    w.seal();
    let mut log = W::default();
    log.int(txnlog::LOG_MAGIC).int(2).long(0);
    let d = dir_with(&w.0, &log.0);
    let i = import(d.path(), None).unwrap();
    assert_eq!(i.dead_sessions, 1);
    let m = restored(&i);
    assert!(m.tree.get("/a/e").is_none());
    assert!(m.tree.get("/a").is_some());
}

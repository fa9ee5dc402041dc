use super::*;
use crate::jute::{err, mode, op, write_acls, JuteWrite, Reader, Stat};
use crate::machine::{Reply, Txn, ZkMachine};
use crate::tree::{open_acl, Change, CreateArgs};
use bytes::{BufMut, BytesMut};
use proptest::prelude::*;

fn data(t: &Tree, p: &str) -> String {
    String::from_utf8(t.get(p).unwrap().data.clone().unwrap().to_vec()).unwrap()
}

fn mk(t: &mut Tree, p: &str, d: &[u8], flags: i32, session: i64) -> Result<(String, Stat), i32> {
    mk_q(t, p, d, flags, session, false)
}

fn mk_q(
    t: &mut Tree,
    p: &str,
    d: &[u8],
    flags: i32,
    session: i64,
    enforce: bool,
) -> Result<(String, Stat), i32> {
    let acl = open_acl();
    let mut ch = Vec::new();
    t.create_quota(
        CreateArgs {
            path: p,
            data: Some(Bytes::copy_from_slice(d)),
            acl: &acl,
            flags,
            container: false,
            ttl: 0,
            session,
            auth: &[],
            zxid: 50,
            time: 1,
        },
        enforce,
        &mut ch,
    )
}

fn set(t: &mut Tree, p: &str, d: &[u8], version: i32, enforce: bool) -> Result<Stat, i32> {
    let mut ch = Vec::new();
    let data = Some(Bytes::copy_from_slice(d));
    t.set_data_quota(p, data, version, &[], 60, 2, enforce, &mut ch)
}

fn del(t: &mut Tree, p: &str) -> Result<(), i32> {
    t.delete(p, -1, &[], 70, &mut Vec::new())
}

/// A quota on `p` as zkCli's setquota writes it: the path's nodes under /zookeeper/quota, the
/// limits node, then the stats node with `count=0,bytes=0` (the server fills it in).
fn setquota(t: &mut Tree, p: &str, limits: &str) {
    let mut q = QUOTA_ROOT.to_string();
    for seg in p.split('/').skip(1) {
        q.push('/');
        q.push_str(seg);
        if t.get(&q).is_none() {
            mk(t, &q, b"", 0, 0).unwrap();
        }
    }
    mk(t, &limit_path(p), limits.as_bytes(), 0, 0).unwrap();
    mk(t, &stat_path(p), b"count=0,bytes=0", 0, 0).unwrap();
}

#[test]
fn stats_track_reads_and_writes_zookeepers_format() {
    let zkcli = "count=5,bytes=-1=;byteHardLimit=-1;countHardLimit=-1";
    let s = StatsTrack::parse(zkcli.as_bytes()).unwrap();
    assert_eq!(
        (
            s.count(),
            s.bytes(),
            s.count_hard_limit(),
            s.byte_hard_limit()
        ),
        (5, -1, -1, -1)
    );
    assert_eq!(s.to_string(), zkcli);
    assert_eq!(StatsTrack::usage(3, 8).to_string(), "count=3,bytes=8");
    // Other keys follow count and bytes after "=", in key order (as ZooKeeper rewrote
    // "count=7,bytes=1,zz=3" in the cross-check).
    let s = StatsTrack::parse(b"zz=3,count=7;bytes=1").unwrap();
    assert_eq!(s.to_string(), "count=7,bytes=1=;zz=3");
    let s = StatsTrack::parse(b"a==5,,;count=2;").unwrap();
    assert_eq!(
        (s.get("a"), s.get("b"), s.count(), s.bytes()),
        (-1, -1, 2, -1)
    );
    assert_eq!(StatsTrack::parse(b"").unwrap(), StatsTrack::default());
    assert_eq!(StatsTrack::parse(b",;,").unwrap(), StatsTrack::default());
    assert_eq!(StatsTrack::parse(b"=4").unwrap().get(""), 4);
    for bad in [
        &b"count"[..],
        b"count=",
        b"count=1,b=",
        b",count=1",
        b"count=x",
        b"=",
        b"count=99999999999999999999",
    ] {
        assert_eq!(StatsTrack::parse(bad), None, "{:?}", bad);
    }
}

#[test]
fn accounting_matches_zookeeper() {
    // The sequence and values observed on ZooKeeper 3.8.0 (tests/zk/test_quota.py).
    let mut t = Tree::default();
    mk(&mut t, "/q", b"abc", 0, 0).unwrap();
    mk(&mut t, "/q/a", b"12345", 0, 0).unwrap();
    mk(&mut t, "/q/a/b", b"", 0, 0).unwrap();
    mk(&mut t, "/zookeeper/quota/q", b"", 0, 0).unwrap();
    mk(&mut t, &limit_path("/q"), b"count=5,bytes=-1", 0, 0).unwrap();
    let (_, st) = mk(&mut t, &stat_path("/q"), b"count=0,bytes=0", 0, 0).unwrap();
    assert_eq!(st.data_length, 15, "the reply shows the client's data");
    let sp = stat_path("/q");
    assert_eq!(data(&t, &sp), "count=3,bytes=8", "computed by the server");
    let before = t.get(&sp).unwrap().stat();
    mk(&mut t, "/q/c", b"xy", 0, 0).unwrap();
    assert_eq!(data(&t, &sp), "count=4,bytes=10");
    set(&mut t, "/q/a", b"1", -1, false).unwrap();
    assert_eq!(data(&t, &sp), "count=4,bytes=6");
    del(&mut t, "/q/a/b").unwrap();
    assert_eq!(data(&t, &sp), "count=3,bytes=6");
    let after = t.get(&sp).unwrap().stat();
    assert_eq!(
        (after.version, after.mzxid, after.mtime, after.data_length),
        (before.version, before.mzxid, before.mtime, 15),
        "only the data (and so dataLength) of a stats node moves"
    );
    // Outside the quota: nothing.
    mk(&mut t, "/qq", b"zzzz", 0, 0).unwrap();
    assert_eq!(data(&t, &sp), "count=3,bytes=6");
    // The client may overwrite the stats; the server adds to what is there, re-encoded.
    set(&mut t, &sp, b"count=7,bytes=1,zz=3", -1, false).unwrap();
    set(&mut t, "/q/c", b"xy", -1, false).unwrap();
    assert_eq!(data(&t, &sp), "count=7,bytes=1=;zz=3");
    // Removing the limits node ends the accounting (delquota), and the nodes under
    // /zookeeper/quota may be deleted.
    del(&mut t, &limit_path("/q")).unwrap();
    mk(&mut t, "/q/d", b"x", 0, 0).unwrap();
    assert_eq!(data(&t, &sp), "count=7,bytes=1=;zz=3");
    del(&mut t, &sp).unwrap();
    del(&mut t, "/zookeeper/quota/q").unwrap();
    for special in ["/zookeeper/quota", "/zookeeper", "/zookeeper/config", "/"] {
        assert_eq!(del(&mut t, special), Err(err::BAD_ARGUMENTS));
    }
}

#[test]
fn stats_before_limits_and_the_deepest_quota_only() {
    let mut t = Tree::default();
    mk(&mut t, "/r", b"", 0, 0).unwrap();
    mk(&mut t, "/zookeeper/quota/r", b"", 0, 0).unwrap();
    // Stats first: counted at creation, charged once the limits node exists.
    mk(&mut t, &stat_path("/r"), b"count=0,bytes=0", 0, 0).unwrap();
    assert_eq!(data(&t, &stat_path("/r")), "count=1,bytes=0");
    mk(&mut t, "/r/y", b"no", 0, 0).unwrap();
    assert_eq!(data(&t, &stat_path("/r")), "count=1,bytes=0");
    mk(&mut t, &limit_path("/r"), b"count=1,bytes=-1", 0, 0).unwrap();
    mk(&mut t, "/r/x", b"hello", 0, 0).unwrap();
    assert_eq!(data(&t, &stat_path("/r")), "count=2,bytes=5");
    // A nested quota takes the charges of its subtree from then on.
    mk(&mut t, "/r/x/n", b"1", 0, 0).unwrap();
    setquota(&mut t, "/r/x", "count=-1,bytes=10");
    assert_eq!(data(&t, &stat_path("/r")), "count=3,bytes=6");
    assert_eq!(data(&t, &stat_path("/r/x")), "count=2,bytes=6");
    assert_eq!(t.quota_root("/r/x/n"), Some("/r/x"));
    assert_eq!(t.quota_root("/r/y"), Some("/r"));
    assert_eq!(t.quota_root("/rr"), None);
    mk(&mut t, "/r/x/m", b"abc", 0, 0).unwrap();
    assert_eq!(data(&t, &stat_path("/r")), "count=3,bytes=6");
    assert_eq!(data(&t, &stat_path("/r/x")), "count=3,bytes=9");
    // Limits without stats: nothing to charge, nothing breaks.
    mk(&mut t, "/s", b"", 0, 0).unwrap();
    mk(&mut t, "/zookeeper/quota/s", b"", 0, 0).unwrap();
    mk(&mut t, &limit_path("/s"), b"count=1", 0, 0).unwrap();
    mk(&mut t, "/s/a", b"", 0, 0).unwrap();
    assert_eq!(mk_q(&mut t, "/s/b", b"", 0, 0, true).map(|_| ()), Ok(()));
    // A stats node on the root's quota path counts the whole tree, as ZooKeeper's does.
    mk(&mut t, "/zookeeper/quota/zookeeper_stats", b"", 0, 0).unwrap();
    let d = data(&t, "/zookeeper/quota/zookeeper_stats");
    let (count, bytes) = t.subtree_usage("/");
    assert_eq!(
        d,
        StatsTrack::usage(count, bytes - d.len() as i64).to_string()
    );
}

#[test]
fn ephemerals_closed_sessions_and_reaped_containers_are_charged() {
    let mut t = Tree::default();
    mk(&mut t, "/e", b"", 0, 0).unwrap();
    setquota(&mut t, "/e", "count=-1,bytes=-1");
    t.create_session(7, 10_000, Bytes::from_static(b"pw"));
    mk(&mut t, "/e/one", b"1234", mode::EPHEMERAL, 7).unwrap();
    mk(&mut t, "/e/c", b"", mode::CONTAINER, 0).unwrap();
    mk(&mut t, "/e/c/x", b"55", 0, 0).unwrap();
    assert_eq!(data(&t, &stat_path("/e")), "count=4,bytes=6");
    let mut ch: Vec<Change> = Vec::new();
    assert!(t.close_session(7, 80, &mut ch));
    assert_eq!(data(&t, &stat_path("/e")), "count=3,bytes=2");
    del(&mut t, "/e/c/x").unwrap();
    assert!(t.reap("/e/c", 0, 81, &mut ch));
    assert_eq!(data(&t, &stat_path("/e")), "count=1,bytes=0");
}

#[test]
fn hard_limits_fail_writes_only_when_enforced() {
    let mut t = Tree::default();
    mk(&mut t, "/h", b"ab", 0, 0).unwrap();
    setquota(
        &mut t,
        "/h",
        "count=-1,bytes=-1=;byteHardLimit=10;countHardLimit=3",
    );
    assert_eq!(data(&t, &stat_path("/h")), "count=1,bytes=2");
    mk_q(&mut t, "/h/a", b"1234", 0, 0, true).unwrap();
    mk_q(&mut t, "/h/b", b"", 0, 0, true).unwrap();
    assert_eq!(
        mk_q(&mut t, "/h/c", b"", 0, 0, true),
        Err(QUOTA_EXCEEDED),
        "a 4th node"
    );
    assert_eq!(
        mk_q(&mut t, "/h/a", b"", 0, 0, true),
        Err(err::NODE_EXISTS),
        "the earlier checks come first"
    );
    assert_eq!(
        mk_q(&mut t, "/h/c", b"", 0, 0, false).map(|_| ()),
        Ok(()),
        "not enforced"
    );
    assert_eq!(data(&t, &stat_path("/h")), "count=4,bytes=6");
    // Bytes: 6 of 10.
    set(&mut t, "/h/b", b"1234", -1, true).unwrap();
    assert_eq!(set(&mut t, "/h/b", b"12345", -1, true), Err(QUOTA_EXCEEDED));
    assert_eq!(
        set(&mut t, "/h/b", b"12345", 42, true),
        Err(QUOTA_EXCEEDED),
        "the quota is checked before the version"
    );
    assert_eq!(
        set(&mut t, "/h/b", b"1234", 42, true),
        Err(err::BAD_VERSION)
    );
    set(&mut t, "/h/b", b"123456789", -1, false).unwrap();
    assert_eq!(data(&t, &stat_path("/h")), "count=4,bytes=15");
    assert_eq!(
        set(&mut t, "/h/b", b"12345678", -1, true),
        Err(QUOTA_EXCEEDED),
        "past the hard limit, even shrinking fails (ZooKeeper)"
    );
    set(&mut t, "/h/b", b"", -1, false).unwrap();
    // Deletes are never refused, and an unchanged count or size is not checked.
    del(&mut t, "/h/c").unwrap();
    set(&mut t, "/h/a", b"4321", -1, true).unwrap();
    // Soft limits only log.
    let mut t = Tree::default();
    mk(&mut t, "/s", b"", 0, 0).unwrap();
    setquota(&mut t, "/s", "count=1,bytes=0");
    mk_q(&mut t, "/s/a", b"xyz", 0, 0, true).unwrap();
    assert_eq!(data(&t, &stat_path("/s")), "count=2,bytes=3");
    // A hard limit wins over a soft one of the same kind.
    set(
        &mut t,
        &limit_path("/s"),
        b"count=1,bytes=-1=;countHardLimit=5",
        -1,
        false,
    )
    .unwrap();
    mk_q(&mut t, "/s/b", b"", 0, 0, true).unwrap();
}

struct Machine {
    m: ZkMachine,
    slot: u64,
    session: i64,
    /// The proposer's enforce_quota setting, carried in every write.
    enforce: bool,
}

impl Machine {
    fn new(enforce: bool) -> Self {
        let mut m = Machine {
            m: ZkMachine::default(),
            slot: 0,
            session: 1,
            enforce,
        };
        m.txn(Txn::CreateSession {
            session: 1,
            owner: 0,
            timeout_ms: 10_000,
            password: Bytes::from_static(b"0123456789abcdef"),
        });
        m
    }
    fn txn(&mut self, t: Txn) -> Reply {
        self.slot += 1;
        Reply::decode(&self.m.apply(self.slot, self.slot as i64 + 100, &t.encode()))
    }
    fn op(&mut self, op: i32, body: Bytes) -> Reply {
        self.txn(Txn::Op {
            session: self.session,
            owner: 0,
            enforce_quota: self.enforce,
            time_ms: 5_000,
            auth: vec![],
            op,
            body,
        })
    }
    /// A multi's per-op error codes (empty if it succeeded).
    fn multi(&mut self, ops: &[(i32, Bytes)]) -> Vec<i32> {
        let mut b = BytesMut::new();
        for (ty, body) in ops {
            b.int(*ty);
            b.boolean(false);
            b.int(-1);
            b.put_slice(body);
        }
        b.int(-1);
        b.boolean(true);
        b.int(-1);
        let r = self.op(op::MULTI, b.freeze());
        assert_eq!(r.err, err::OK);
        let mut rd = Reader::new(r.body);
        let mut codes = Vec::new();
        loop {
            let ty = rd.int().unwrap();
            let done = rd.boolean().unwrap();
            let e = rd.int().unwrap();
            if done {
                return codes;
            }
            if ty != op::ERROR {
                return Vec::new();
            }
            assert_eq!(rd.int().unwrap(), e);
            codes.push(e);
        }
    }
}

fn create_body(p: &str, d: &[u8], flags: i32) -> Bytes {
    let mut b = BytesMut::new();
    b.string(p);
    b.buffer(d);
    write_acls(&mut b, &open_acl());
    b.int(flags);
    b.freeze()
}

fn set_body(p: &str, d: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.string(p);
    b.buffer(d);
    b.int(-1);
    b.freeze()
}

fn delete_body(p: &str) -> Bytes {
    let mut b = BytesMut::new();
    b.string(p);
    b.int(-1);
    b.freeze()
}

#[test]
fn a_multi_cannot_pass_a_hard_quota() {
    let mut m = Machine::new(true);
    m.op(op::CREATE, create_body("/m", b"", 0));
    setquota(&mut m.m.tree, "/m", "count=-1,bytes=-1=;countHardLimit=2");
    let codes = m.multi(&[
        (op::CREATE, create_body("/m/a", b"", 0)),
        (op::CREATE, create_body("/m/b", b"", 0)),
    ]);
    assert_eq!(codes, vec![err::OK, QUOTA_EXCEEDED]);
    assert!(m.m.tree.get("/m/a").is_none());
    assert_eq!(data(&m.m.tree, &stat_path("/m")), "count=1,bytes=0");
    // A delete earlier in the multi makes room.
    m.op(op::CREATE, create_body("/m/a", b"", 0));
    let codes = m.multi(&[
        (op::DELETE, delete_body("/m/a")),
        (op::CREATE, create_body("/m/b", b"", 0)),
        (op::SET_DATA, set_body("/m/b", b"xyz")),
    ]);
    assert_eq!(codes, Vec::<i32>::new());
    assert_eq!(data(&m.m.tree, &stat_path("/m")), "count=2,bytes=3");
    assert_eq!(
        m.op(op::CREATE2, create_body("/m/c", b"", 0)).err,
        QUOTA_EXCEEDED
    );
    let mut off = Machine::new(false);
    off.op(op::CREATE, create_body("/m", b"", 0));
    setquota(&mut off.m.tree, "/m", "count=-1,bytes=-1=;countHardLimit=1");
    assert_eq!(off.op(op::CREATE, create_body("/m/a", b"", 0)).err, err::OK);
    assert_eq!(data(&off.m.tree, &stat_path("/m")), "count=2,bytes=0");
}

#[test]
fn metrics_sum_per_namespace() {
    let mut t = Tree::default();
    assert!(metrics(&t).is_empty());
    for p in ["/app", "/app/x", "/app/y", "/db"] {
        mk(&mut t, p, b"abcd", 0, 0).unwrap();
    }
    setquota(
        &mut t,
        "/app/x",
        "count=5,bytes=-1=;byteHardLimit=100;countHardLimit=-1",
    );
    setquota(&mut t, "/app/y", "count=2,bytes=7");
    setquota(
        &mut t,
        "/db",
        "count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=9",
    );
    assert_eq!(
        metrics(&t),
        vec![
            ("app_quota_bytes_limit_per_namespace".to_string(), 107),
            ("app_quota_bytes_usage_per_namespace".to_string(), 8),
            ("app_quota_count_limit_per_namespace".to_string(), 7),
            ("app_quota_count_usage_per_namespace".to_string(), 2),
            ("db_quota_bytes_limit_per_namespace".to_string(), -1),
            ("db_quota_bytes_usage_per_namespace".to_string(), 4),
            ("db_quota_count_limit_per_namespace".to_string(), 9),
            ("db_quota_count_usage_per_namespace".to_string(), 1),
        ]
    );
    assert!(mntr_lines(&t).contains("zk_db_quota_count_limit_per_namespace\t9\n"));
}

/// One random write of the checker.
#[derive(Clone, Debug)]
enum Op {
    Create(usize, usize, i32),
    Delete(usize),
    Set(usize, usize),
    Close,
    Multi(Vec<Op>),
}

const PATHS: [&str; 7] = ["/a", "/a/b", "/a/b/c", "/a/c", "/b", "/b/c", "/c"];
/// Quotas set before any node below them exists, /a/b nested in /a.
const QUOTAS: [(&str, &str); 3] = [
    ("/a", "count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=5"),
    (
        "/a/b",
        "count=2,bytes=-1=;byteHardLimit=5;countHardLimit=-1",
    ),
    ("/b", "count=3,bytes=40"),
];

fn simple_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            0..PATHS.len(),
            0..8usize,
            prop::sample::select(vec![
                0,
                0,
                0,
                mode::EPHEMERAL,
                mode::PERSISTENT_SEQUENTIAL,
                mode::CONTAINER
            ])
        )
            .prop_map(|(p, n, f)| Op::Create(p, n, f)),
        (0..PATHS.len()).prop_map(Op::Delete),
        (0..PATHS.len(), 0..8usize).prop_map(|(p, n)| Op::Set(p, n)),
        Just(Op::Close),
    ]
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => simple_op(),
        1 => prop::collection::vec(simple_op(), 1..4).prop_map(Op::Multi),
    ]
}

fn request(o: &Op) -> Option<(i32, Bytes)> {
    Some(match *o {
        Op::Create(p, n, f) => (op::CREATE, create_body(PATHS[p], &vec![b'x'; n], f)),
        Op::Delete(p) => (op::DELETE, delete_body(PATHS[p])),
        Op::Set(p, n) => (op::SET_DATA, set_body(PATHS[p], &vec![b'y'; n])),
        Op::Close | Op::Multi(_) => return None,
    })
}

fn contents(t: &Tree) -> Vec<(String, Option<Bytes>)> {
    t.nodes
        .iter()
        .map(|(p, n)| (p.to_string(), n.data.clone()))
        .collect()
}

/// The checker: each quota's stats must be the count and bytes of the nodes whose deepest
/// quota it is (worked out here by brute force), and no write may pass a hard limit when
/// they are enforced.
fn check(t: &Tree, enforce: bool) -> Result<(), TestCaseError> {
    for (q, limits) in QUOTAS {
        let (mut count, mut bytes) = (0i64, 0i64);
        for (p, n) in t.nodes.iter() {
            let deepest = QUOTAS
                .iter()
                .map(|(r, _)| *r)
                .filter(|r| crate::path::is_under(p, r))
                .max_by_key(|r| r.len());
            if deepest == Some(q) {
                count += 1;
                bytes += n.data.as_ref().map_or(0, |d| d.len() as i64);
            }
        }
        let stats = data(t, &stat_path(q));
        prop_assert_eq!(
            &stats,
            &StatsTrack::usage(count, bytes).to_string(),
            "{}",
            q
        );
        let l = StatsTrack::parse(limits.as_bytes()).unwrap();
        if enforce && l.count_hard_limit() > -1 {
            prop_assert!(count <= l.count_hard_limit(), "{} count {}", q, count);
        }
        if enforce && l.byte_hard_limit() > -1 {
            prop_assert!(bytes <= l.byte_hard_limit(), "{} bytes {}", q, bytes);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(synod_testkit::config(500))]
    #[test]
    fn stats_always_match_the_tree(enforce: bool, ops in prop::collection::vec(any_op(), 1..40)) {
        let mut m = Machine::new(enforce);
        for (q, limits) in QUOTAS {
            setquota(&mut m.m.tree, q, limits);
        }
        check(&m.m.tree, enforce)?;
        for o in &ops {
            match o {
                Op::Close => {
                    m.txn(Txn::CloseSession { session: m.session });
                    m.session += 1;
                    m.txn(Txn::CreateSession {
                        session: m.session,
                        owner: 0,
                        timeout_ms: 10_000,
                        password: Bytes::from_static(b"0123456789abcdef"),
                    });
                }
                Op::Multi(ops) => {
                    let reqs: Vec<(i32, Bytes)> = ops.iter().filter_map(request).collect();
                    let before = contents(&m.m.tree);
                    let failed = !m.multi(&reqs).is_empty();
                    if failed {
                        prop_assert!(before == contents(&m.m.tree), "a failed multi changed nothing");
                    }
                }
                o => {
                    let (code, body) = request(o).unwrap();
                    m.op(code, body);
                }
            }
            check(&m.m.tree, enforce)?;
        }
    }
}

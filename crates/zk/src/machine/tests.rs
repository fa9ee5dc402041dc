use super::*;
use crate::jute::{err, event, mode, op, write_acls, Acl, Id, JuteWrite, Reader, Stat};
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::{Arc, Mutex};

#[derive(Default, Clone)]
struct Record(Arc<Mutex<Vec<(i64, i32, String)>>>);

impl Effects for Record {
    fn watch(&self, session: i64, event_type: i32, path: &str, _: Option<&Arc<Vec<Acl>>>) {
        self.0
            .lock()
            .unwrap()
            .push((session, event_type, path.to_string()));
    }
    fn session_closed(&self, s: i64) {
        self.0.lock().unwrap().push((s, -1, "closed".into()));
    }
    fn touched(&self, _: &[i64]) {}
}

struct Harness {
    m: ZkMachine,
    slot: u64,
    events: Record,
}

fn open() -> Vec<Acl> {
    tree::open_acl().to_vec()
}

fn create_body(p: &str, data: &[u8], flags: i32) -> Bytes {
    let mut b = BytesMut::new();
    b.string(p);
    b.buffer(data);
    write_acls(&mut b, &open());
    b.int(flags);
    b.freeze()
}

impl Harness {
    fn new() -> Self {
        let events = Record::default();
        let mut m = ZkMachine::default();
        m.set_effects(Box::new(events.clone()));
        let mut h = Harness { m, slot: 0, events };
        h.txn(Txn::CreateSession {
            session: 1,
            owner: 0,
            timeout_ms: 10_000,
            password: Bytes::from_static(b"0123456789abcdef"),
        });
        h
    }
    fn txn(&mut self, t: Txn) -> Reply {
        self.slot += 1;
        Reply::decode(&self.m.apply(self.slot, self.slot as i64 + 100, &t.encode()))
    }
    fn op(&mut self, op: i32, body: Bytes) -> Reply {
        self.txn(Txn::Op {
            session: 1,
            owner: 0,
            enforce_quota: false,
            time_ms: 5_000 + self.slot as i64,
            auth: vec![],
            op,
            body,
        })
    }
    fn read(&mut self, op: i32, body: Bytes) -> Reply {
        self.m.read(1, &[], op, body).unwrap()
    }
}

fn path_watch(p: &str, watch: bool) -> Bytes {
    let mut b = BytesMut::new();
    b.string(p);
    b.boolean(watch);
    b.freeze()
}

#[test]
fn txns_round_trip() {
    for t in [
        Txn::CreateSession {
            session: 9,
            owner: 0,
            timeout_ms: 4000,
            password: Bytes::from_static(b"pw"),
        },
        Txn::CloseSession { session: 9 },
        Txn::Attach {
            session: 9,
            owner: 3,
            password: Bytes::from_static(b"pw"),
        },
        Txn::Touch {
            sessions: vec![1, 2, 3],
        },
        Txn::Op {
            session: 9,
            owner: 0,
            enforce_quota: false,
            time_ms: 77,
            auth: vec![Id {
                scheme: "digest".into(),
                id: "a:b".into(),
            }],
            op: op::CREATE,
            body: Bytes::from_static(b"body"),
        },
        Txn::Reap {
            path: "/c".into(),
            time_ms: 5,
        },
        Txn::Expire {
            session: 9,
            touched: u64::MAX - 3,
        },
    ] {
        assert_eq!(Txn::decode(t.encode()).unwrap(), t);
    }
}

#[test]
fn create_read_and_watch() {
    let mut h = Harness::new();
    // A data watch on a node that does not exist yet (exists with watch).
    assert_eq!(h.read(op::EXISTS, path_watch("/a", true)).err, err::NO_NODE);
    let r = h.op(op::CREATE, create_body("/a", b"hello", mode::PERSISTENT));
    assert_eq!(r.err, err::OK);
    let mut rd = Reader::new(r.body);
    assert_eq!(rd.string().unwrap(), "/a");
    let r = h.read(op::GET_DATA, path_watch("/a", true));
    let mut rd = Reader::new(r.body);
    assert_eq!(rd.buffer().unwrap(), Bytes::from_static(b"hello"));
    let stat = Stat::read(&mut rd).unwrap();
    assert_eq!(stat.czxid, 102);
    let mut set = BytesMut::new();
    set.string("/a");
    set.buffer(b"x");
    set.int(0);
    assert_eq!(h.op(op::SET_DATA, set.freeze()).err, err::OK);
    let ev = h.events.0.lock().unwrap().clone();
    assert_eq!(
        ev,
        vec![
            (1, event::NODE_CREATED, "/a".to_string()),
            (1, event::NODE_DATA_CHANGED, "/a".to_string())
        ]
    );
}

#[test]
fn multi_is_all_or_nothing() {
    let mut h = Harness::new();
    let mut b = BytesMut::new();
    for (ty, body) in [
        (op::CREATE, create_body("/m1", b"", 0)),
        (op::CREATE, create_body("/m1/x", b"", 0)),
        (op::CREATE, create_body("/missing/y", b"", 0)),
        (op::CREATE, create_body("/m2", b"", 0)),
    ] {
        b.int(ty);
        b.boolean(false);
        b.int(-1);
        b.put_slice(&body);
    }
    b.int(-1);
    b.boolean(true);
    b.int(-1);
    let r = h.op(op::MULTI, b.freeze());
    assert_eq!(r.err, err::OK);
    assert!(
        h.m.tree.get("/m1").is_none(),
        "nothing of a failed multi is applied"
    );
    let mut rd = Reader::new(r.body);
    let mut codes = Vec::new();
    loop {
        let ty = rd.int().unwrap();
        let done = rd.boolean().unwrap();
        let e = rd.int().unwrap();
        if done {
            break;
        }
        assert_eq!(ty, op::ERROR);
        assert_eq!(rd.int().unwrap(), e);
        codes.push(e);
    }
    assert_eq!(
        codes,
        vec![err::OK, err::OK, err::NO_NODE, err::RUNTIME_INCONSISTENCY]
    );
}

#[test]
fn closing_a_session_removes_its_ephemerals() {
    let mut h = Harness::new();
    assert_eq!(
        h.op(op::CREATE, create_body("/e", b"", mode::EPHEMERAL))
            .err,
        err::OK
    );
    assert_eq!(h.m.tree.get("/e").unwrap().stat.ephemeral_owner, 1);
    h.txn(Txn::CloseSession { session: 1 });
    assert!(h.m.tree.get("/e").is_none());
    assert_eq!(
        h.op(op::CREATE, create_body("/f", b"", 0)).err,
        err::SESSION_EXPIRED
    );
}

#[test]
fn snapshots_round_trip() {
    let mut h = Harness::new();
    h.op(op::CREATE, create_body("/a", b"1", 0));
    h.op(op::CREATE, create_body("/a/b", b"2", mode::EPHEMERAL));
    h.op(op::CREATE, create_body("/c", b"", mode::CONTAINER));
    let data = h.m.snapshot_view()();
    let mut r = ZkMachine::default();
    r.restore(h.slot, data.clone()).unwrap();
    assert_eq!(r.digest, h.m.digest);
    assert_eq!(r.tree.get("/a").unwrap().children.len(), 1);
    assert_eq!(r.tree.ephemerals(1, "/"), vec!["/a/b".to_string()]);
    assert!(r.tree.reapable.contains("/c"));
    assert_eq!(
        r.tree.get("/").unwrap().stat(),
        h.m.tree.get("/").unwrap().stat()
    );
    assert!(ZkMachine::default()
        .restore(h.slot + 1, data.clone())
        .is_err());
    assert!(ZkMachine::default()
        .restore(h.slot, data.slice(..data.len() - 3))
        .is_err());
}

#[test]
fn garbage_never_panics() {
    let mut h = Harness::new();
    let mut seed = 0x1234_5678u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let ops = [
        1, 2, 3, 4, 5, 7, 8, 12, 14, 15, 17, 18, 19, 21, 22, 101, 103, 104, 105, 106,
    ];
    for _ in 0..20_000 {
        let len = (next() % 48) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let op_code = ops[(next() % ops.len() as u64) as usize];
        let _ = h.m.read(1, &[], op_code, Bytes::from(bytes.clone()));
        let _ = h.op(op_code, Bytes::from(bytes.clone()));
        h.slot += 1;
        let _ = h.m.apply(h.slot, 0, &Bytes::from(bytes));
    }
}

/// Session duties may be decided twice (two holders: Mencius's failure detectors may disagree)
/// or late (a holder cut off): an expiry applies once, and never after a later touch; a second
/// close, an expiry of a closed session, a touch of a closed session and a second reap do
/// nothing, with no watch fired and no connection told twice.
#[test]
fn duties_decided_twice_or_late_are_harmless() {
    let mut h = Harness::new();
    h.txn(Txn::CreateSession {
        session: 2,
        owner: 0,
        timeout_ms: 10_000,
        password: Bytes::from_static(b"0123456789abcdef"),
    });
    let created = h.slot;
    assert_eq!(h.m.tree.sessions[&2].touched, created);
    assert_eq!(
        h.op(op::CREATE, create_body("/e", b"", mode::EPHEMERAL))
            .err,
        err::OK
    );
    // /e is session 1's: session 2 is what expires below.
    h.txn(Txn::Touch { sessions: vec![2] });
    let touched = h.slot;
    assert_eq!(h.m.tree.sessions[&2].touched, touched);
    // An expiry made before the last touch is void.
    h.txn(Txn::Expire {
        session: 2,
        touched: created,
    });
    assert!(h.m.tree.sessions.contains_key(&2));
    // One made after it closes the session, once.
    h.txn(Txn::Expire {
        session: 2,
        touched,
    });
    assert!(!h.m.tree.sessions.contains_key(&2));
    let closes = |h: &Harness| {
        h.events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0 == 2 && e.1 == -1)
            .count()
    };
    assert_eq!(closes(&h), 1);
    let tree = h.m.tree.clone();
    let events = h.events.0.lock().unwrap().len();
    h.txn(Txn::Expire {
        session: 2,
        touched,
    });
    h.txn(Txn::CloseSession { session: 2 });
    h.txn(Txn::Touch { sessions: vec![2] });
    assert!(
        !h.m.tree.sessions.contains_key(&2),
        "a touch revived a closed session"
    );
    assert_eq!(closes(&h), 1);
    assert_eq!(h.events.0.lock().unwrap().len(), events);
    assert_eq!(format!("{:?}", h.m.tree.nodes), format!("{:?}", tree.nodes));
    // Session 1's ephemeral survived every duty aimed at session 2; closing 1 twice deletes
    // it, and tells its connection, once.
    assert!(h.m.tree.get("/e").is_some());
    h.txn(Txn::CloseSession { session: 1 });
    h.txn(Txn::CloseSession { session: 1 });
    assert!(h.m.tree.get("/e").is_none());
    let closed_1 = h
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.0 == 1 && e.1 == -1)
        .count();
    assert_eq!(closed_1, 1);
    // A reap decided twice removes the node once; the second finds nothing due.
    h.txn(Txn::CreateSession {
        session: 3,
        owner: 0,
        timeout_ms: 10_000,
        password: Bytes::from_static(b"0123456789abcdef"),
    });
    let op3 = |h: &mut Harness, code: i32, body: Bytes| {
        h.slot += 1;
        let t = Txn::Op {
            session: 3,
            owner: 0,
            enforce_quota: false,
            time_ms: 5_000 + h.slot as i64,
            auth: vec![],
            op: code,
            body,
        };
        Reply::decode(&h.m.apply(h.slot, h.slot as i64 + 100, &t.encode()))
    };
    assert_eq!(
        op3(&mut h, op::CREATE, create_body("/c", b"", mode::CONTAINER)).err,
        err::OK
    );
    assert_eq!(
        op3(&mut h, op::CREATE, create_body("/c/x", b"", 0)).err,
        err::OK
    );
    let mut del = BytesMut::new();
    del.string("/c/x");
    del.int(-1);
    assert_eq!(op3(&mut h, op::DELETE, del.freeze()).err, err::OK);
    assert!(h.m.tree.reap_due("/c", 0));
    h.txn(Txn::Reap {
        path: "/c".into(),
        time_ms: 0,
    });
    assert!(h.m.tree.get("/c").is_none());
    // Created again (no child yet): a second reap of the first finds it not due.
    assert_eq!(
        op3(&mut h, op::CREATE, create_body("/c", b"", mode::CONTAINER)).err,
        err::OK
    );
    h.txn(Txn::Reap {
        path: "/c".into(),
        time_ms: 0,
    });
    assert!(h.m.tree.get("/c").is_some());
}

/// Sessions' last touches and the node clock are in snapshots (expiries and node times depend
/// on them, so every replica must agree), and the older formats still restore.
#[test]
fn snapshots_keep_last_touches_and_clock_and_read_the_older_formats() {
    let mut h = Harness::new();
    h.txn(Txn::Touch { sessions: vec![1] });
    let touched = h.slot;
    h.m.clock_ms = 1_234;
    let data = h.m.snapshot_view()();
    let mut r = ZkMachine::default();
    r.restore(h.slot, data.clone()).unwrap();
    assert_eq!(r.tree.sessions[&1].touched, touched);
    assert_eq!(r.clock_ms, 1_234);
    assert_eq!(r.tree.sessions[&1].owner, 0);
    // The owners' section: a marker and one int per session.
    let owners = 4 + 4 * h.m.tree.sessions.len();
    let data = data.slice(..data.len() - owners);
    // Without the clock section (an int and a long): the clock restarts from the tree.
    let mut r = ZkMachine::default();
    r.restore(h.slot, data.slice(..data.len() - 12)).unwrap();
    assert_eq!(r.tree.sessions[&1].touched, touched);
    assert_eq!(r.clock_ms, 0);
    // The oldest format ends after the sessions: without the touches either.
    let old = data.slice(..data.len() - 24);
    let mut r = ZkMachine::default();
    r.restore(h.slot, old).unwrap();
    assert_eq!(r.tree.sessions[&1].touched, 0);
    assert_eq!(r.digest, h.m.digest);
    // A section of another kind is refused.
    let mut bad = BytesMut::from(&data[..data.len() - 12]);
    bad.put_i32(7);
    bad.put_i64(1);
    assert!(ZkMachine::default().restore(h.slot, bad.freeze()).is_err());
}

/// Node times never go back in the order of the log, whatever the proposers' clocks say, and
/// a null data buffer is kept as null.
#[test]
fn node_times_are_monotonic_and_null_data_is_kept() {
    let mut h = Harness::new();
    let at = |h: &mut Harness, p: &str, time_ms: i64, data: Option<&[u8]>| {
        let mut b = BytesMut::new();
        b.string(p);
        b.opt_buffer(data);
        write_acls(&mut b, &open());
        b.int(mode::PERSISTENT);
        h.txn(Txn::Op {
            session: 1,
            owner: 0,
            enforce_quota: false,
            time_ms,
            auth: vec![],
            op: op::CREATE,
            body: b.freeze(),
        });
        h.m.tree.get(p).map(|n| (n.stat.ctime, n.data.clone()))
    };
    assert_eq!(at(&mut h, "/a", 5_000, Some(b"x")).unwrap().0, 5_000);
    // A replica whose clock is behind proposes an earlier time: the node gets the later one.
    assert_eq!(at(&mut h, "/b", 4_000, None).unwrap(), (5_000, None));
    assert_eq!(
        at(&mut h, "/c", 6_000, Some(b"")).unwrap(),
        (6_000, Some(Bytes::new()))
    );
    let b = h.m.read(1, &[], op::GET_DATA, {
        let mut r = BytesMut::new();
        r.string("/b");
        r.boolean(false);
        r.freeze()
    });
    let mut r = Reader::new(b.unwrap().body);
    assert_eq!(r.opt_buffer().unwrap(), None);
    assert_eq!(Stat::read(&mut r).unwrap().data_length, 0);
    // Both survive a snapshot.
    let data = h.m.snapshot_view()();
    let mut m = ZkMachine::default();
    m.restore(h.slot, data).unwrap();
    assert_eq!(m.clock_ms, 6_000);
    assert_eq!(m.tree.get("/b").unwrap().data, None);
}

/// A re-attachment moves the session's owner only with the session's password: session ids are
/// not secret, and a wrong password must neither touch the session nor make its client's writes
/// fail with SESSIONMOVED.
#[test]
fn attach_needs_the_password_and_moves_the_owner() {
    let mut h = Harness::new();
    let pw = h.m.tree.sessions[&1].password.clone();
    let before = h.m.tree.sessions[&1].touched;
    h.txn(Txn::Attach {
        session: 1,
        owner: 9,
        password: Bytes::from_static(b"guess"),
    });
    assert_eq!(h.m.tree.sessions[&1].owner, 0);
    assert_eq!(h.m.tree.sessions[&1].touched, before);
    h.txn(Txn::Attach {
        session: 1,
        owner: 2,
        password: pw,
    });
    assert_eq!(h.m.tree.sessions[&1].owner, 2);
    // A write from a connection at another server: SESSIONMOVED; from the owner: applied.
    let write = |h: &mut Harness, owner: u32, p: &str| {
        h.txn(Txn::Op {
            session: 1,
            owner,
            enforce_quota: false,
            time_ms: 1,
            auth: vec![],
            op: op::CREATE,
            body: create_body(p, b"", mode::PERSISTENT),
        })
        .err
    };
    assert_eq!(write(&mut h, 1, "/old"), err::SESSION_MOVED);
    assert_eq!(write(&mut h, 2, "/new"), err::OK);
    // An unknown flag is refused, by create and by createContainer alike; createContainer
    // makes a container, named sequentially when its flags say so.
    assert_eq!(
        h.op(op::CREATE, create_body("/c", b"", -4)).err,
        err::BAD_ARGUMENTS
    );
    assert_eq!(
        h.op(op::CREATE_CONTAINER, create_body("/c", b"", -4)).err,
        err::BAD_ARGUMENTS
    );
    let seq = create_body("/c", b"", mode::PERSISTENT_SEQUENTIAL);
    assert_eq!(h.op(op::CREATE_CONTAINER, seq).err, err::OK);
    let name =
        h.m.tree
            .get("/")
            .unwrap()
            .children
            .iter()
            .find(|c| c.starts_with('c'))
            .cloned();
    let c =
        h.m.tree
            .get(&format!("/{}", name.expect("a child c...")))
            .unwrap();
    assert_eq!(c.kind(), crate::tree::Kind::Container);
}

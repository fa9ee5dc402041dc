use super::*;
use crate::jute::{err, event, mode, op, write_acls, Acl, Id, JuteWrite, Reader, Stat};
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::{Arc, Mutex};

#[derive(Default, Clone)]
struct Record(Arc<Mutex<Vec<(i64, i32, String)>>>);

impl Effects for Record {
    fn watch(&self, session: i64, event_type: i32, path: &str) {
        self.0
            .lock()
            .unwrap()
            .push((session, event_type, path.to_string()));
    }
    fn session_closed(&self, _: i64) {}
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
            timeout_ms: 4000,
            password: Bytes::from_static(b"pw"),
        },
        Txn::CloseSession { session: 9 },
        Txn::Touch {
            sessions: vec![1, 2, 3],
        },
        Txn::Op {
            session: 9,
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

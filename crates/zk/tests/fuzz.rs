//! Hostile input for every ZooKeeper decoder that sees network or disk input: request bodies of
//! every opcode (served locally as reads or replicated as `Txn::Op`, `multi` included), the
//! replicated `Txn` records, and snapshots. Inputs are random bytes and mutations of valid
//! encodings (bit flips, truncations, splices, forged lengths). The property: no panic, a value
//! or an error, and no allocation sized by a claimed length rather than by the input.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use synod_testkit::{bounded, config, mutate, mutation, Probe};
use synod_zk::jute::{mode, op, write_acls, Acl, Id, JuteWrite};
use synod_zk::machine::{Txn, ZkMachine};

#[global_allocator]
static PROBE: Probe = Probe;

// ------------------------------------------------------------------ valid encodings

fn acls() -> Vec<Acl> {
    vec![Acl {
        perms: 31,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

fn path_watch(p: &str, watch: bool) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.string(p);
    b.boolean(watch);
    b.to_vec()
}

fn create(p: &str, data: &[u8], flags: i32, ttl: Option<i64>) -> BytesMut {
    let mut b = BytesMut::new();
    b.string(p);
    b.buffer(data);
    write_acls(&mut b, &acls());
    b.int(flags);
    if let Some(t) = ttl {
        b.long(t);
    }
    b
}

fn path_version(p: &str, v: i32) -> BytesMut {
    let mut b = BytesMut::new();
    b.string(p);
    b.int(v);
    b
}

/// A valid request body for each opcode a client can send.
fn requests() -> Vec<(i32, Vec<u8>)> {
    let mut v = vec![
        (
            op::CREATE,
            create("/a/x", b"data", mode::PERSISTENT, None).to_vec(),
        ),
        (
            op::CREATE2,
            create("/a/s-", b"", mode::EPHEMERAL_SEQUENTIAL, None).to_vec(),
        ),
        (
            op::CREATE_CONTAINER,
            create("/k", b"", mode::CONTAINER, None).to_vec(),
        ),
        (
            op::CREATE_TTL,
            create("/t", b"", mode::PERSISTENT_WITH_TTL, Some(1000)).to_vec(),
        ),
        (op::DELETE, path_version("/c", -1).to_vec()),
        (op::DELETE_CONTAINER, path_version("/k", -1).to_vec()),
        (op::EXISTS, path_watch("/a", true)),
        (op::GET_DATA, path_watch("/a", true)),
        (op::GET_CHILDREN, path_watch("/", true)),
        (op::GET_CHILDREN2, path_watch("/a", false)),
        (op::SYNC, {
            let mut b = BytesMut::new();
            b.string("/");
            b.to_vec()
        }),
        (op::GET_ACL, {
            let mut b = BytesMut::new();
            b.string("/a");
            b.to_vec()
        }),
        (op::GET_EPHEMERALS, {
            let mut b = BytesMut::new();
            b.string("/");
            b.to_vec()
        }),
        (op::GET_ALL_CHILDREN_NUMBER, {
            let mut b = BytesMut::new();
            b.string("/");
            b.to_vec()
        }),
        (op::WHO_AM_I, Vec::new()),
        (op::PING, Vec::new()),
    ];
    let mut set = BytesMut::new();
    set.string("/a");
    set.buffer(b"new value");
    set.int(-1);
    v.push((op::SET_DATA, set.to_vec()));
    let mut acl = BytesMut::new();
    acl.string("/a");
    write_acls(&mut acl, &acls());
    acl.int(-1);
    v.push((op::SET_ACL, acl.to_vec()));
    let mut add = BytesMut::new();
    add.string("/a");
    add.int(1);
    v.push((op::ADD_WATCH, add.to_vec()));
    for code in [op::CHECK_WATCHES, op::REMOVE_WATCHES] {
        let mut b = BytesMut::new();
        b.string("/a");
        b.int(3);
        v.push((code, b.to_vec()));
    }
    for code in [op::SET_WATCHES, op::SET_WATCHES2] {
        let mut b = BytesMut::new();
        b.long(5);
        let lists = if code == op::SET_WATCHES2 { 5 } else { 3 };
        for _ in 0..lists {
            b.strings(&["/a".into(), "/c".into(), "/nope".into()]);
        }
        v.push((code, b.to_vec()));
    }
    // multi: create, setData, check, delete, then the end marker.
    let mut m = BytesMut::new();
    for (code, body) in [
        (op::CREATE, create("/m", b"1", mode::PERSISTENT, None)),
        (op::CHECK, path_version("/a", -1)),
        (op::DELETE, path_version("/m", 0)),
    ] {
        m.int(code);
        m.boolean(false);
        m.int(-1);
        m.extend_from_slice(&body);
    }
    m.int(-1);
    m.boolean(true);
    m.int(-1);
    v.push((op::MULTI, m.to_vec()));
    let mut r = BytesMut::new();
    for (code, p) in [(op::GET_DATA, "/a"), (op::GET_CHILDREN, "/")] {
        r.int(code);
        r.boolean(false);
        r.int(-1);
        r.extend_from_slice(&path_watch(p, true));
    }
    r.int(-1);
    r.boolean(true);
    r.int(-1);
    v.push((op::MULTI_READ, r.to_vec()));
    // Auth and SASL bodies reach the machine as unknown opcodes.
    let mut auth = BytesMut::new();
    auth.int(0);
    auth.string("digest");
    auth.buffer(b"user:pw");
    v.push((op::AUTH, auth.to_vec()));
    v
}

fn txns() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![
        Txn::CreateSession {
            session: 9,
            owner: 0,
            timeout_ms: 4000,
            password: Bytes::from_static(b"0123456789abcdef"),
        },
        Txn::CloseSession { session: 9 },
        Txn::Touch {
            sessions: vec![1, 2, 3],
        },
        Txn::Reap {
            path: "/k".into(),
            time_ms: 5,
        },
        Txn::Upsert {
            path: "/u".into(),
            data: Bytes::from_static(b"v"),
            time_ms: 5,
        },
        Txn::Remove { path: "/u".into() },
    ]
    .into_iter()
    .map(|t| t.encode().to_vec())
    .collect();
    for (code, body) in requests() {
        v.push(
            Txn::Op {
                session: 1,
                owner: 0,
                enforce_quota: false,
                time_ms: 77,
                auth: vec![Id {
                    scheme: "digest".into(),
                    id: "a:b".into(),
                }],
                op: code,
                body: Bytes::from(body),
            }
            .encode()
            .to_vec(),
        );
    }
    v
}

/// A machine with session 1 and a few nodes, so that requests reach real state.
struct State {
    m: ZkMachine,
    slot: u64,
}

impl State {
    fn new() -> State {
        let mut s = State {
            m: ZkMachine::default(),
            slot: 0,
        };
        s.apply(&Txn::CreateSession {
            session: 1,
            owner: 0,
            timeout_ms: 10_000,
            password: Bytes::from_static(b"0123456789abcdef"),
        });
        for (p, flags) in [
            ("/a", mode::PERSISTENT),
            ("/a/b", mode::PERSISTENT),
            ("/c", mode::PERSISTENT),
            ("/e", mode::EPHEMERAL),
        ] {
            s.apply(&Txn::Op {
                session: 1,
                owner: 0,
                enforce_quota: false,
                time_ms: 1,
                auth: vec![],
                op: op::CREATE,
                body: create(p, b"some data", flags, None).freeze(),
            });
        }
        s
    }
    fn apply(&mut self, t: &Txn) -> Bytes {
        self.apply_raw(&t.encode())
    }
    fn apply_raw(&mut self, payload: &Bytes) -> Bytes {
        self.slot += 1;
        self.m.apply(self.slot, self.slot as i64, payload)
    }
}

// ------------------------------------------------------------------ properties

proptest! {
    #![proptest_config(config(10_000))]

    /// Every request body, mutated, served as a local read and applied as a replicated write.
    #[test]
    fn mutated_requests_never_panic(
        which in any::<usize>(),
        code_override in prop::option::weighted(0.2, prop_oneof![-20i32..120, any::<i32>()]),
        muts in prop::collection::vec(mutation(), 1..5),
    ) {
        let reqs = requests();
        let corpus: Vec<Vec<u8>> = reqs.iter().map(|(_, b)| b.clone()).collect();
        let (code, body) = &reqs[which % reqs.len()];
        let code = code_override.unwrap_or(*code);
        let body = Bytes::from(mutate(body, &muts, &corpus));
        let mut s = State::new();
        let auth = [Id { scheme: "ip".into(), id: "127.0.0.1".into() }];
        bounded(body.len(), || {
            let _ = s.m.read(1, &auth, code, body.clone());
        });
        let txn = Txn::Op { session: 1, owner: 0, enforce_quota: false, time_ms: 5, auth: auth.to_vec(), op: code, body: body.clone() };
        let payload = txn.encode();
        bounded(payload.len(), || {
            let _ = s.apply_raw(&payload);
        });
        // The machine still works afterwards.
        let _ = s.m.read(1, &auth, op::GET_DATA, Bytes::from(path_watch("/a", false)));
    }

    /// Random bytes as a request body of a random opcode.
    #[test]
    fn random_requests_never_panic(
        code in prop_oneof![-20i32..120, any::<i32>()],
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut s = State::new();
        let body = Bytes::from(body);
        bounded(body.len(), || {
            let _ = s.m.read(1, &[], code, body.clone());
        });
        let payload = Txn::Op { session: 1, owner: 0, enforce_quota: false, time_ms: 5, auth: vec![], op: code, body: body.clone() }.encode();
        bounded(payload.len(), || {
            let _ = s.apply_raw(&payload);
        });
    }

    /// Replicated transactions (log records and proposals), mutated or random, decoded and
    /// applied.
    #[test]
    fn mutated_txns_never_panic(
        which in any::<usize>(),
        muts in prop::collection::vec(mutation(), 0..5),
        random in prop::option::weighted(0.2, prop::collection::vec(any::<u8>(), 0..128)),
    ) {
        let corpus = txns();
        let raw = random.unwrap_or_else(|| mutate(&corpus[which % corpus.len()], &muts, &corpus));
        let payload = Bytes::from(raw);
        let decoded = bounded(payload.len(), || Txn::decode(payload.clone()));
        if let Ok(t) = &decoded {
            // What decodes re-encodes to a value that decodes to the same.
            let again = Txn::decode(t.encode());
            prop_assert_eq!(again.as_ref(), Ok(t));
        }
        let mut s = State::new();
        bounded(payload.len(), || {
            let _ = s.apply_raw(&payload);
        });
    }
}

proptest! {
    #![proptest_config(config(3_000))]

    /// Snapshots (read from disk and received from the leader), mutated.
    #[test]
    fn mutated_snapshots_never_panic(muts in prop::collection::vec(mutation(), 1..4)) {
        let s = State::new();
        let snap = (s.m.snapshot_view())().to_vec();
        let data = Bytes::from(mutate(&snap, &muts, std::slice::from_ref(&snap)));
        let mut fresh = ZkMachine::default();
        let _ = bounded(data.len(), || fresh.restore(s.slot, data.clone()));
    }
}

#[test]
fn forged_lengths_in_every_position_are_errors_without_allocation() {
    // Every 4-byte window of every valid request overwritten with huge lengths and counts.
    let reqs = requests();
    for (code, body) in &reqs {
        for i in 0..body.len().saturating_sub(3) {
            for forged in [u32::MAX, i32::MAX as u32, 1 << 30, 1 << 24] {
                let mut b = body.clone();
                b[i..i + 4].copy_from_slice(&forged.to_be_bytes());
                let b = Bytes::from(b);
                let mut s = State::new();
                bounded(b.len(), || {
                    let _ = s.m.read(1, &[], *code, b.clone());
                });
                let payload = Txn::Op {
                    session: 1,
                    owner: 0,
                    enforce_quota: false,
                    time_ms: 5,
                    auth: vec![],
                    op: *code,
                    body: b,
                }
                .encode();
                bounded(payload.len(), || {
                    let _ = s.apply_raw(&payload);
                });
            }
        }
    }
}

#[test]
#[should_panic(expected = "an allocation of")]
fn the_probe_sees_a_claimed_length_allocation() {
    bounded(10, || Vec::<u8>::with_capacity(1 << 24));
}

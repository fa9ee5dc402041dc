//! The etcd app ([`crate::App::Etcd`]): every group runs etcd's store (synod_etcd::EtcdMachine,
//! the server's machine) and every client speaks etcd as a server's front end would send it:
//! Puts, Txns comparing a key's mod revision (then two Puts, else a Get), deletes of a key or
//! of the prefix, leases granted, written under and revoked, compactions, and linearizable
//! reads (a barrier through the log, then the range at the replica that applied it, as the
//! server's `linearize` does). Each client also keeps a watch of the prefix open at its replica
//! with the server's own watchers (synod_etcd::watch), resumed elsewhere from its last revision
//! when the replica crashes, as clientv3 does, and now and then asks for progress.
//!
//! At the end the log of the group is replayed on a model of etcd written apart
//! (check::etcd_model), and three checkers compare:
//! * **revisions**: every acknowledged reply carries the revision, branch and count the model
//!   gives for the same log; the store's final revision is the model's (no gap, no double);
//! * **linearizable**: a write acknowledged before another was submitted is ordered before it;
//!   a read returns the model's state at its revision, and that revision is at least every
//!   write acknowledged before the read began;
//! * **watch**: each stream, resumptions included, has every revision of the prefix from its
//!   start once, in order, with the model's events; a progress response at R means nothing
//!   below R is still owed; a compaction cancel only for a watcher behind it.

use super::World;
use crate::check::etcd_model::{Expect, Model};
use crate::check::Checker;
use crate::{EtcdApp, EtcdPlant};
use bytes::Bytes;
use prost::Message;
use rand_core::RngCore;
use std::collections::{BTreeMap, HashMap};
use synod_etcd::apply;
use synod_etcd::etcdserverpb::{
    compare::{CompareResult, CompareTarget, TargetUnion},
    request_op, CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest,
    LeaseRevokeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest,
    WatchResponse,
};
use synod_etcd::mvccpb::event::EventType;
use synod_etcd::synod::etcd::v1::{self as log, command::Request as C, reply::Result as R};
use synod_etcd::watch::{Plant as WatchPlant, Watchers};
use synod_host::{Applied, Hosted};

/// The watched prefix: every key the clients write.
const PREFIX: &[u8] = b"k";
const PREFIX_END: &[u8] = b"l";

/// A read: when its barrier was submitted, where it was served, what it saw.
struct Read {
    submitted: u64,
    node: u32,
    revision: i64,
    kvs: Vec<(Bytes, Bytes, i64, i64, i64, i64)>,
}

/// A client's watch stream at a replica.
struct Stream {
    node: usize,
    incarnation: u64,
    watchers: Watchers,
    polls: u64,
}

#[derive(Default)]
struct Client {
    seq: u64,
    lease: Option<i64>,
    /// The mod revision the client last saw of each key (its Txns compare against it).
    seen: BTreeMap<u32, i64>,
    stream: Option<Stream>,
    /// The revision its watch resumes from.
    next: i64,
    /// Everything its watch received, each resumption marked with its start.
    received: Vec<Received>,
}

enum Received {
    Start(i64),
    Response(WatchResponse),
}

pub(super) struct EtcdWorld {
    app: EtcdApp,
    /// Every command a client submitted: id → (client, the command, submitted at).
    commands: HashMap<u64, (usize, C, u64)>,
    /// Replies told to clients, in the order told: (id, when, node, reply).
    replies: Vec<(u64, u64, u32, log::Reply)>,
    reads: Vec<Read>,
    clients: Vec<Client>,
    /// The largest revision a reply has named (the clients compact behind it).
    max_revision: i64,
}

impl EtcdWorld {
    pub(super) fn new(app: &EtcdApp, clients: usize) -> Self {
        EtcdWorld {
            app: app.clone(),
            commands: HashMap::new(),
            replies: Vec::new(),
            reads: Vec::new(),
            max_revision: 1,
            clients: (0..clients)
                .map(|_| Client {
                    next: 1,
                    ..Client::default()
                })
                .collect(),
        }
    }
}

/// A barrier command's bytes (a reconfiguration's payload in the etcd app).
pub(super) fn barrier() -> Bytes {
    Bytes::from(
        log::Command {
            request: Some(C::Barrier(log::Barrier {})),
        }
        .encode_to_vec(),
    )
}

fn key(k: u32) -> Bytes {
    Bytes::from(format!("k{k}"))
}

fn put_op(k: Bytes, v: Bytes) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: k,
            value: v,
            ..Default::default()
        })),
    }
}

impl<P: Hosted> World<P> {
    /// Client `c`'s next command, and its bytes.
    pub(super) fn etcd_command(&mut self, c: usize) -> (Bytes, C) {
        let keys = self.etcd.as_ref().expect("etcd").app.keys.max(2);
        let u = self.rng.next_u64() % 100;
        let k = (self.rng.next_u64() % keys as u64) as u32;
        let k2 = (k + 1 + (self.rng.next_u64() % (keys as u64 - 1)) as u32) % keys;
        let max_rev = self.etcd.as_ref().map_or(1, |e| e.max_revision);
        let e = self.etcd.as_mut().expect("etcd");
        let cl = &mut e.clients[c];
        cl.seq += 1;
        let value = Bytes::from(format!("{c}.{}", cl.seq));
        let cmd = match u {
            0..=29 => C::Put(PutRequest {
                key: key(k),
                value,
                ..Default::default()
            }),
            30..=44 => C::Txn(TxnRequest {
                compare: vec![Compare {
                    result: CompareResult::Equal as i32,
                    target: CompareTarget::Mod as i32,
                    key: key(k),
                    target_union: Some(TargetUnion::ModRevision(
                        cl.seen.get(&k).copied().unwrap_or(0),
                    )),
                    range_end: Bytes::new(),
                }],
                success: vec![put_op(key(k), value.clone()), put_op(key(k2), value)],
                failure: vec![RequestOp {
                    request: Some(request_op::Request::RequestRange(RangeRequest {
                        key: key(k),
                        ..Default::default()
                    })),
                }],
            }),
            45..=54 => C::DeleteRange(DeleteRangeRequest {
                key: if u == 45 {
                    Bytes::from_static(PREFIX)
                } else {
                    key(k)
                },
                range_end: if u == 45 {
                    Bytes::from_static(PREFIX_END)
                } else {
                    Bytes::new()
                },
                prev_kv: false,
            }),
            55..=63 => match cl.lease {
                Some(id) if u < 61 => C::Put(PutRequest {
                    key: key(k),
                    value,
                    lease: id,
                    ..Default::default()
                }),
                Some(id) => {
                    cl.lease = None;
                    C::LeaseRevoke(LeaseRevokeRequest { id })
                }
                None => {
                    let id = ((c as i64 + 1) << 32) | cl.seq as i64;
                    cl.lease = Some(id);
                    C::LeaseGrant(LeaseGrantRequest { ttl: 60, id })
                }
            },
            64..=65 => C::Compaction(CompactionRequest {
                revision: (max_rev - 8).max(1),
                physical: false,
            }),
            _ => C::Barrier(log::Barrier {}),
        };
        if matches!(cmd, C::Barrier(_)) && e.app.plant == Some(EtcdPlant::LocalRead) {
            let (node, g) = (self.clients[c].node, self.clients[c].group);
            let submitted = self.now;
            self.etcd_read(node, g, submitted);
        }
        let bytes = Bytes::from(
            log::Command {
                request: Some(cmd.clone()),
            }
            .encode_to_vec(),
        );
        (bytes, cmd)
    }

    /// Client `c`'s command `cmd` was submitted as `id`.
    pub(super) fn etcd_submitted(&mut self, id: u64, c: usize, cmd: C) {
        let now = self.now;
        if let Some(e) = self.etcd.as_mut() {
            e.commands.insert(id, (c, cmd, now));
        }
    }

    /// Command `a` of client `c` was delivered at node `i` and told to the client: record the
    /// reply; after a barrier, read there; then poll the watches at node `i`.
    pub(super) fn etcd_delivered(&mut self, i: usize, c: usize, a: &Applied) {
        let Some(e) = self.etcd.as_mut() else {
            return;
        };
        let Some((_, cmd, submitted)) = e.commands.get(&a.id).cloned() else {
            return;
        };
        let g = self.clients[c].group;
        let (now, node) = (self.now, self.nodes[i].id);
        let Ok(reply) = log::Reply::decode(a.result.clone()) else {
            self.histories[g].violate(
                Checker::Revisions,
                now,
                format!("n{node}: the reply to command {} does not decode", a.id),
            );
            return;
        };
        let e = self.etcd.as_mut().expect("etcd");
        if let Some(R::Txn(t)) = &reply.result {
            if !t.succeeded {
                // The Get of the else branch tells the client the key's mod revision.
                if let (C::Txn(req), Some(r)) = (&cmd, t.responses.first()) {
                    if let Some(synod_etcd::etcdserverpb::response_op::Response::ResponseRange(
                        rr,
                    )) = &r.response
                    {
                        let k = key_index(&req.compare[0].key);
                        let m = rr.kvs.first().map_or(0, |kv| kv.mod_revision);
                        e.clients[c].seen.insert(k, m);
                    }
                }
            }
        }
        if let (C::Put(p), Some(R::Put(r))) = (&cmd, &reply.result) {
            let rev = r.header.as_ref().map_or(0, |h| h.revision);
            e.clients[c].seen.insert(key_index(&p.key), rev);
        }
        let read = matches!(cmd, C::Barrier(_)) && matches!(reply.result, Some(R::Barrier(_)));
        e.max_revision = e.max_revision.max(revision_of(&reply).unwrap_or(1));
        e.replies.push((a.id, now, node, reply));
        if read && e.app.plant != Some(EtcdPlant::LocalRead) {
            self.etcd_read(i, g, submitted);
        }
        self.etcd_poll(i, g);
    }

    /// A read of the prefix at node `i`'s replica of group `g`, begun at `submitted`.
    fn etcd_read(&mut self, i: usize, g: usize, submitted: u64) {
        let Some(m) = self.nodes[i].groups[g].etcd.clone() else {
            return;
        };
        let m = m.lock().expect("etcd machine");
        let req = RangeRequest {
            key: Bytes::from_static(PREFIX),
            range_end: Bytes::from_static(PREFIX_END),
            ..Default::default()
        };
        if let Ok(r) = apply::range(m.store(), m.store().revision(), &req) {
            self.etcd.as_mut().expect("etcd").reads.push(Read {
                submitted,
                node: self.nodes[i].id,
                revision: r.header.map_or(0, |h| h.revision),
                kvs: r
                    .kvs
                    .into_iter()
                    .map(|kv| {
                        (
                            kv.key,
                            kv.value,
                            kv.create_revision,
                            kv.mod_revision,
                            kv.version,
                            kv.lease,
                        )
                    })
                    .collect(),
            });
        }
    }

    /// Poll every watch stream at node `i` (opening the watch of a client that has none
    /// there yet), and resume the streams of crashed replicas at their client's replica.
    fn etcd_poll(&mut self, i: usize, g: usize) {
        let plant = self.etcd.as_ref().expect("etcd").app.plant;
        for c in 0..self.clients.len() {
            if self.clients[c].group != g {
                continue;
            }
            let at = self.clients[c].node;
            let e = self.etcd.as_mut().expect("etcd");
            let broken = e.clients[c].stream.as_ref().is_some_and(|s| {
                !self.nodes[s.node].up || self.nodes[s.node].incarnation != s.incarnation
            });
            if broken {
                e.clients[c].stream = None;
            }
            let Some(m) = self.nodes[i].groups[g].etcd.clone() else {
                continue;
            };
            let cl = &mut e.clients[c];
            if cl.stream.is_none() {
                if at != i {
                    continue;
                }
                let mut watchers = Watchers::new(4);
                if plant == Some(EtcdPlant::WatchOutOfOrder) {
                    watchers.plant(WatchPlant::OutOfOrder);
                }
                let req = WatchCreateRequest {
                    key: Bytes::from_static(PREFIX),
                    range_end: Bytes::from_static(PREFIX_END),
                    start_revision: cl.next,
                    ..Default::default()
                };
                let m = m.lock().expect("etcd machine");
                let created = watchers.create(m.store(), &req, self.now);
                if created.canceled {
                    continue;
                }
                cl.received.push(Received::Start(cl.next));
                cl.stream = Some(Stream {
                    node: i,
                    incarnation: self.nodes[i].incarnation,
                    watchers,
                    polls: 0,
                });
            }
            let s = cl.stream.as_mut().expect("opened");
            if s.node != i {
                continue;
            }
            let m = m.lock().expect("etcd machine");
            let mut out = Vec::new();
            s.watchers.poll(m.store(), self.now, &mut out);
            s.polls += 1;
            if s.polls & 7 == 0 && s.watchers.caught_up(m.store()) {
                out.extend(s.watchers.progress(m.store()));
            }
            drop(m);
            let mut restart = false;
            for r in out {
                let rev = r.header.as_ref().map_or(0, |h| h.revision);
                if r.canceled {
                    // Left behind a compaction: resume from the compaction point.
                    cl.next = r.compact_revision.max(cl.next);
                    restart = true;
                } else {
                    cl.next = cl.next.max(rev + 1);
                }
                cl.received.push(Received::Response(r));
            }
            if restart {
                cl.stream = None;
            }
        }
    }

    /// The etcd checkers, at the end of the run (docs at the top of this file).
    pub(super) fn etcd_checks(&mut self) {
        if self.etcd.is_none() {
            return;
        }
        let now = self.now;
        let groups = self.histories.len();
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].stays_down && self.nodes[i].up)
            .collect();
        // A last poll of every stream, where it stands.
        for &i in &live {
            for g in 0..groups {
                self.etcd_poll(i, g);
            }
        }
        let mut found: Vec<(usize, Checker, String)> = Vec::new();
        let e = self.etcd.as_ref().expect("etcd");
        for g in 0..groups {
            // The longest log among the live replicas, replayed on the model.
            let Some(&longest) = live
                .iter()
                .max_by_key(|&&i| self.nodes[i].groups[g].applied_count())
            else {
                continue;
            };
            let ids = self.nodes[longest].groups[g].ids();
            let mut model = Model::new();
            let mut expect: BTreeMap<u64, (Expect, usize)> = BTreeMap::new();
            for (slot, id) in ids.iter().enumerate() {
                if let Some((c, cmd, _)) = e.commands.get(id) {
                    if self.clients[*c].group == g {
                        expect.insert(*id, (model.apply(cmd), slot));
                    }
                }
            }
            let mut bad = |checker, what: String| found.push((g, checker, what));
            if let Some(m) = &self.nodes[longest].groups[g].etcd {
                let rev = m.lock().expect("etcd machine").store().revision();
                if rev != model.revision() {
                    bad(
                        Checker::Revisions,
                        format!(
                            "n{}'s store is at revision {rev} after {} commands; the model of the same log is at {}",
                            self.nodes[longest].id,
                            ids.len(),
                            model.revision()
                        ),
                    );
                }
            }
            // Every reply told, against the model; the acknowledged writes by time.
            let mut acked: Vec<(u64, i64, usize)> = Vec::new();
            for (id, at, node, reply) in &e.replies {
                let Some((want, slot)) = expect.get(id) else {
                    continue; // not in this group, or not in the log (the acknowledged checker)
                };
                if let Some(why) = differs(want, reply) {
                    bad(
                        Checker::Revisions,
                        format!(
                            "command {id} ({}) answered at n{node}: {why}",
                            what(&e.commands[id].1)
                        ),
                    );
                }
                let revision = match want {
                    Expect::Ok { revision, .. } => *revision,
                    Expect::Fails(_) => 0,
                };
                acked.push((*at, revision, *slot));
            }
            // Real time: a write acknowledged before another was submitted is ordered first.
            let mut by_ack: Vec<(u64, usize, i64)> =
                acked.iter().map(|&(at, r, s)| (at, s, r)).collect();
            by_ack.sort();
            let mut prefix_slot = Vec::with_capacity(by_ack.len());
            let mut prefix_rev = Vec::with_capacity(by_ack.len());
            let (mut ms, mut mr) = (0usize, 0i64);
            for &(_, s, r) in &by_ack {
                ms = ms.max(s);
                mr = mr.max(r);
                prefix_slot.push(ms);
                prefix_rev.push(mr);
            }
            let before = |t: u64| by_ack.partition_point(|&(at, _, _)| at < t);
            for (id, (_, slot)) in &expect {
                let submitted = e.commands[id].2;
                let n = before(submitted);
                if n > 0 && prefix_slot[n - 1] >= *slot {
                    bad(
                        Checker::Linearizable,
                        format!("command {id} was submitted after a command at slot {} was acknowledged, but is at slot {slot}", prefix_slot[n - 1]),
                    );
                }
            }
            // Reads: the model's state at their revision, no older than what was acknowledged.
            for r in &e.reads {
                let n = before(r.submitted);
                let floor = if n > 0 { prefix_rev[n - 1] } else { 1 };
                if r.revision < floor {
                    bad(
                        Checker::Linearizable,
                        format!("a read at n{} saw revision {}, but revision {floor} was acknowledged before it began", r.node, r.revision),
                    );
                }
                let want: Vec<_> = model
                    .range_at(PREFIX, PREFIX_END, r.revision)
                    .into_iter()
                    .map(|(k, kv)| (k, kv.value, kv.create, kv.modified, kv.version, kv.lease))
                    .collect();
                if want != r.kvs {
                    bad(
                        Checker::Linearizable,
                        format!(
                            "a read at n{} at revision {} saw {:?}; the model has {:?}",
                            r.node, r.revision, r.kvs, want
                        ),
                    );
                }
            }
            // Watch streams.
            for (c, cl) in e.clients.iter().enumerate() {
                if self.clients[c].group != g {
                    continue;
                }
                if let Some(why) = check_stream(&model, &cl.received) {
                    bad(
                        Checker::Watch,
                        format!("client {c}'s watch of the prefix: {why}"),
                    );
                }
            }
        }
        for (g, checker, what) in found {
            self.histories[g].violate(checker, now, what);
        }
    }
}

fn key_index(k: &[u8]) -> u32 {
    std::str::from_utf8(&k[1..])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn what(c: &C) -> &'static str {
    match c {
        C::Put(_) => "put",
        C::DeleteRange(_) => "delete",
        C::Txn(_) => "txn",
        C::Compaction(_) => "compact",
        C::LeaseGrant(_) => "lease grant",
        C::LeaseRevoke(_) => "lease revoke",
        C::LeaseRenew(_) => "lease renew",
        C::Barrier(_) => "barrier",
    }
}

/// The revision a reply names in its header, if it has one.
fn revision_of(r: &log::Reply) -> Option<i64> {
    let h = match r.result.as_ref()? {
        R::Put(p) => p.header,
        R::DeleteRange(d) => d.header,
        R::Txn(t) => t.header,
        R::Compaction(c) => c.header,
        R::LeaseGrant(g) => g.header,
        R::LeaseRevoke(r) => r.header,
        _ => None,
    };
    h.map(|h| h.revision)
}

/// How a reply differs from the model's answer, if it does.
fn differs(want: &Expect, got: &log::Reply) -> Option<String> {
    match (want, got.result.as_ref()) {
        (Expect::Fails(m), Some(R::Failure(f))) if f.message == *m => None,
        (Expect::Fails(m), other) => Some(format!(
            "the model fails it with \"{m}\"; the reply is {other:?}"
        )),
        (_, Some(R::Failure(f))) => {
            Some(format!("failed with \"{}\"; the model succeeds", f.message))
        }
        (
            Expect::Ok {
                revision,
                succeeded,
                deleted,
            },
            Some(r),
        ) => {
            if matches!(r, R::Barrier(_) | R::LeaseRenew(_)) {
                return None;
            }
            let rev = revision_of(got).unwrap_or(0);
            if rev != *revision {
                return Some(format!("revision {rev}; the model's is {revision}"));
            }
            if let (Some(s), R::Txn(t)) = (succeeded, r) {
                if t.succeeded != *s {
                    return Some(format!(
                        "txn succeeded = {}; the model's is {s}",
                        t.succeeded
                    ));
                }
            }
            if let (Some(d), R::DeleteRange(x)) = (deleted, r) {
                if x.deleted != *d {
                    return Some(format!("deleted {}; the model deleted {d}", x.deleted));
                }
            }
            None
        }
        (_, None) => Some("an empty reply".into()),
    }
}

/// A watch stream against the model: each revision of the prefix from each start, once, in
/// order, with the model's events; progress and compaction cancels consistent with them. The
/// complaint ends with what the stream received just before.
fn check_stream(model: &Model, received: &[Received]) -> Option<String> {
    let (at, why) = check_stream_at(model, received)?;
    let recent: Vec<String> = received[at.saturating_sub(4)..at]
        .iter()
        .map(|r| match r {
            Received::Start(f) => format!("start {f}"),
            Received::Response(r) => format!(
                "{}{} {}",
                if r.canceled {
                    "cancel "
                } else if r.events.is_empty() {
                    "progress "
                } else {
                    ""
                },
                r.header.as_ref().map_or(0, |h| h.revision),
                if r.canceled {
                    format!("(compacted {})", r.compact_revision)
                } else {
                    format!("({} events)", r.events.len())
                }
            ),
        })
        .collect();
    Some(format!("{why}; before it: {}", recent.join(", ")))
}

fn check_stream_at(model: &Model, received: &[Received]) -> Option<(usize, String)> {
    let mut next = 1i64;
    for (at, r) in received.iter().enumerate() {
        let fail = |why: String| Some((at, why));
        let r = match r {
            Received::Start(from) => {
                if *from < next && next > 1 {
                    return fail(format!(
                        "resumed from revision {from}, but {next} was the next owed"
                    ));
                }
                next = *from;
                continue;
            }
            Received::Response(r) => r,
        };
        let rev = r.header.as_ref().map_or(0, |h| h.revision);
        if r.canceled {
            if r.compact_revision <= next {
                return fail(format!(
                    "cancelled for compaction at {}, but it owed only from {next}",
                    r.compact_revision
                ));
            }
            if r.compact_revision > model.compacted() {
                return fail(format!(
                    "cancelled for compaction at {}, beyond any compaction ({})",
                    r.compact_revision,
                    model.compacted()
                ));
            }
            continue;
        }
        if r.watch_id == -1 || r.events.is_empty() {
            // Progress: nothing below its revision is still owed.
            let owed = model.revisions_with_events(next, rev, PREFIX, PREFIX_END);
            if let Some(o) = owed.first() {
                return fail(format!(
                    "a progress response at revision {rev} while revision {o} was never sent"
                ));
            }
            next = next.max(rev + 1);
            continue;
        }
        if rev < next {
            return fail(format!(
                "revision {rev} sent after the stream had reached {next} (again or out of order)"
            ));
        }
        let skipped = model.revisions_with_events(next, rev - 1, PREFIX, PREFIX_END);
        if let Some(s) = skipped.first() {
            return fail(format!("revision {s} skipped (the next sent was {rev})"));
        }
        let want = model.events_at(rev, PREFIX, PREFIX_END);
        let got: Vec<_> = r
            .events
            .iter()
            .map(|ev| {
                let kv = ev.kv.clone().unwrap_or_default();
                let put = ev.r#type == EventType::Put as i32;
                (
                    kv.key,
                    put.then_some((
                        kv.value,
                        kv.create_revision,
                        kv.mod_revision,
                        kv.version,
                        kv.lease,
                    )),
                )
            })
            .collect();
        let want: Vec<_> = want
            .into_iter()
            .map(|(k, kv)| {
                (
                    k,
                    kv.map(|kv| (kv.value, kv.create, kv.modified, kv.version, kv.lease)),
                )
            })
            .collect();
        if got != want {
            return fail(format!(
                "revision {rev} sent {got:?}; the history has {want:?}"
            ));
        }
        next = rev + 1;
    }
    None
}

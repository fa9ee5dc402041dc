//! The etcd store as a group's state machine: every replica applies the same commands
//! (proto/synod_etcd.proto) to the same [`Store`] and [`Leases`], and answers each with a
//! [`log::Reply`]. Two things are local to a process and not replicated: the revision watchers
//! wait on (a `tokio::sync::watch`), and the set of leases granted or kept alive since the lessor
//! last looked (the lessor keeps the clocks, crates/server/src/etcd/lessor.rs).

use crate::apply;
use crate::errors::{self, Failure};
use crate::etcdserverpb::{
    CompactionResponse, LeaseGrantResponse, LeaseRevokeResponse, ResponseHeader,
};
use crate::lease::{Leases, MIN_TTL_S};
use crate::store::{Entry, Span, Store, Version};
use crate::synod::etcd::v1 as log;
use crate::MAX_LEASE_TTL_S;
use bytes::Bytes;
use prost::Message;
use std::collections::BTreeSet;
use synod_core::wire::WireError;
use synod_core::{Command, GroupMessage, Position, Snapshot, StateMachine};
use tokio::sync::watch;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Most leases whose renewal the lessor has not collected yet (beyond, the oldest news is
/// dropped: the lessor then renews every lease it knows, which only errs late).
const MAX_RENEWED: usize = 100_000;

pub struct EtcdMachine {
    store: Store,
    leases: Leases,
    applied: Position,
    revision: watch::Sender<i64>,
    renewed: BTreeSet<i64>,
    /// The renewals overflowed: the lessor renews every lease.
    renew_all: bool,
    /// The planted revision gap, if any.
    gap: u64,
    /// FNV-1a over every command applied and its reply, in order: equal on replicas that
    /// applied the same commands and answered them alike (O(1) to read; carried by snapshots).
    rolling: u64,
}

impl Default for EtcdMachine {
    fn default() -> Self {
        EtcdMachine::new()
    }
}

fn hdr(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision,
        ..ResponseHeader::default()
    })
}

impl EtcdMachine {
    pub fn new() -> Self {
        EtcdMachine {
            store: Store::new(),
            leases: Leases::default(),
            applied: Position::default(),
            revision: watch::channel(1).0,
            renewed: BTreeSet::new(),
            renew_all: false,
            gap: 0,
            rolling: FNV_OFFSET,
        }
    }

    /// Plant the revision-gap bug ([`Store::plant_gap`]), kept across snapshots.
    pub fn plant_gap(&mut self, every: u64) {
        self.gap = every;
        self.store.plant_gap(every);
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    /// Wakes whenever the revision moves (compaction included: it is sent again).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.revision.subscribe()
    }

    /// The leases granted or kept alive since the last call, and whether news was dropped
    /// (then every lease counts as renewed).
    pub fn take_renewed(&mut self) -> (BTreeSet<i64>, bool) {
        let all = std::mem::take(&mut self.renew_all);
        (std::mem::take(&mut self.renewed), all)
    }

    fn renew(&mut self, id: i64) {
        if self.renewed.len() >= MAX_RENEWED {
            self.renewed.clear();
            self.renew_all = true;
        }
        self.renewed.insert(id);
    }

    /// Apply one command; the reply is what the client is answered.
    pub fn execute(&mut self, cmd: &log::Command) -> log::Reply {
        use log::command::Request as C;
        use log::reply::Result as R;
        let result = match &cmd.request {
            Some(C::Put(p)) => apply::put(&mut self.store, &mut self.leases, p).map(R::Put),
            Some(C::DeleteRange(d)) => {
                apply::delete_range(&mut self.store, &mut self.leases, d).map(R::DeleteRange)
            }
            Some(C::Txn(t)) => apply::txn(&mut self.store, &mut self.leases, t).map(R::Txn),
            Some(C::Compaction(c)) => self.store.compact(c.revision).map(|()| {
                R::Compaction(CompactionResponse {
                    header: hdr(self.store.revision()),
                })
            }),
            Some(C::LeaseGrant(g)) => self.grant(g.id, g.ttl).map(R::LeaseGrant),
            Some(C::LeaseRevoke(r)) => self.revoke(r.id).map(R::LeaseRevoke),
            Some(C::LeaseRenew(id)) => match self.leases.get(*id) {
                Some(l) => {
                    let ttl = l.ttl;
                    self.renew(*id);
                    Ok(R::LeaseRenew(ttl))
                }
                None => Err(errors::LEASE_NOT_FOUND),
            },
            Some(C::Barrier(b)) => Ok(R::Barrier(*b)),
            // A command of a newer build: refused alike everywhere.
            None => Err(errors::NOT_CAPABLE),
        };
        self.revision.send_replace(self.store.revision());
        log::Reply {
            result: Some(result.unwrap_or_else(|f| R::Failure(f.to_log()))),
        }
    }

    fn grant(&mut self, id: i64, ttl: i64) -> Result<LeaseGrantResponse, Failure> {
        if id == 0 {
            // The node the client asked chooses an id for a grant that names none.
            return Err(errors::NOT_CAPABLE);
        }
        if self.leases.contains(id) {
            return Err(errors::LEASE_EXIST);
        }
        if ttl > MAX_LEASE_TTL_S {
            return Err(errors::LEASE_TTL_TOO_LARGE);
        }
        let ttl = ttl.max(MIN_TTL_S);
        self.leases.insert(id, ttl);
        self.renew(id);
        Ok(LeaseGrantResponse {
            header: hdr(self.store.revision()),
            id,
            ttl,
            error: String::new(),
        })
    }

    /// Revoke a lease: its keys are deleted in one revision (none if it holds no key).
    fn revoke(&mut self, id: i64) -> Result<LeaseRevokeResponse, Failure> {
        let lease = self.leases.remove(id).ok_or(errors::LEASE_NOT_FOUND)?;
        let mut w = apply::Writer::new(&mut self.store, &mut self.leases);
        for key in lease.keys.iter() {
            w.delete(&Span::Key(key.clone()), false);
        }
        let rev = w.finish();
        Ok(LeaseRevokeResponse { header: hdr(rev) })
    }

    /// The snapshot's bytes.
    fn encode(store: &Store, leases: &Leases, digest: u64) -> Bytes {
        let snap = log::Snapshot {
            digest,
            revision: store.revision(),
            compacted: store.compacted(),
            keys: store
                .histories()
                .map(|(k, h)| log::History {
                    key: k.clone(),
                    entries: h
                        .iter()
                        .map(|e| match &e.kv {
                            Some(v) => log::Entry {
                                main: e.main,
                                sub: e.sub,
                                tombstone: false,
                                value: v.value.clone(),
                                create: v.create,
                                version: v.version,
                                lease: v.lease,
                            },
                            None => log::Entry {
                                main: e.main,
                                sub: e.sub,
                                tombstone: true,
                                ..log::Entry::default()
                            },
                        })
                        .collect(),
                })
                .collect(),
            leases: leases
                .iter()
                .map(|(id, l)| log::Lease { id, ttl: l.ttl })
                .collect(),
        };
        Bytes::from(snap.encode_to_vec())
    }

    fn decode(data: Bytes) -> Result<(Store, Leases, u64), WireError> {
        let snap = log::Snapshot::decode(data)
            .map_err(|_| WireError::Invalid("an etcd snapshot that does not decode"))?;
        let digest = snap.digest;
        let histories = snap
            .keys
            .into_iter()
            .map(|h| {
                let entries = h
                    .entries
                    .into_iter()
                    .map(|e| Entry {
                        main: e.main,
                        sub: e.sub,
                        kv: (!e.tombstone).then_some(Version {
                            value: e.value,
                            create: e.create,
                            version: e.version,
                            lease: e.lease,
                        }),
                    })
                    .collect();
                (h.key, entries)
            })
            .collect();
        let store = Store::from_parts(snap.revision, snap.compacted, histories).ok_or(
            WireError::Invalid("an etcd snapshot whose histories are inconsistent"),
        )?;
        let mut leases = Leases::default();
        for l in snap.leases {
            leases.insert(l.id, l.ttl);
        }
        // The keys attached to each lease are those whose latest version names it.
        let attached: Vec<(i64, Bytes)> = store
            .histories()
            .filter_map(|(k, h)| match h.last().and_then(|e| e.kv.as_ref()) {
                Some(v) if v.lease != 0 => Some((v.lease, k.clone())),
                _ => None,
            })
            .collect();
        for (id, k) in attached {
            leases.attach(id, &k);
        }
        Ok((store, leases, digest))
    }
}

impl StateMachine for EtcdMachine {
    fn apply(&mut self, at: Position, command: &Command, _out: &mut Vec<GroupMessage>) -> Bytes {
        self.applied = at;
        let reply = match log::Command::decode(command.payload.clone()) {
            Ok(cmd) => self.execute(&cmd),
            // Bytes that are not a command (a no-op of the host, a corrupt submit): refused alike
            // on every replica, nothing changes.
            Err(_) => log::Reply {
                result: Some(log::reply::Result::Failure(errors::NOT_CAPABLE.to_log())),
            },
        };
        let reply = Bytes::from(reply.encode_to_vec());
        self.rolling = fnv(fnv(self.rolling, &command.payload), &reply);
        reply
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        let (store, leases, digest) = (self.store.clone(), self.leases.clone(), self.rolling);
        Box::new(move || EtcdMachine::encode(&store, &leases, digest))
    }

    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError> {
        let (store, leases, digest) = EtcdMachine::decode(snapshot.data.clone())?;
        self.rolling = digest;
        self.store = store;
        self.store.plant_gap(self.gap);
        self.leases = leases;
        self.applied = snapshot.at;
        self.renew_all = true;
        self.revision.send_replace(self.store.revision());
        Ok(())
    }

    fn applied(&self) -> Position {
        self.applied
    }

    fn digest(&self) -> u64 {
        self.rolling
    }
}

//! A bucket's state machine: its keys, the transactions it takes part in, what it coordinated,
//! and its channels to other buckets. Every replica of the bucket's group applies the same
//! commands ([`Bucket::apply`]) and so computes the same state and emits the same messages; the
//! host sends them from the master only. The transaction logic is in `twopc.rs`.

use crate::channel::{Arrival, Channels, Out};
use crate::locks::Locks;
use crate::route::bucket_of;
use crate::txn::{
    get_ops, get_u32s, put_ops, put_u32s, Cmd, Decided, Msg, Op, Reply, TxnId, MAX_BUCKETS,
};
use bytes::{BufMut, Bytes, BytesMut};
use imbl::OrdMap;
use std::collections::{BTreeMap, BTreeSet};
use synod_core::wire::{
    get_bool, get_bytes, get_count, get_u32, get_u64, get_u8, Wire, WireError, WireResult,
};

/// A key's state. A deleted key keeps its version (a tombstone): versions never go back, so a
/// transaction that read `k@v` cannot validate after `k` was deleted and written again
/// (sconekv.md §11.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub value: Option<Bytes>,
    pub version: u64,
}

/// Where this bucket's part of a transaction stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartState {
    /// Waiting for locks (received, or reverted).
    Queued,
    /// Validated, locked, and voted yes: waiting for the global decision.
    Prepared,
}

/// This bucket's part of a transaction in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Every bucket the transaction touches, sorted; the first is its coordinator.
    pub buckets: Vec<u32>,
    pub ops: Vec<Op>,
    pub state: PartState,
    /// While queued: it asked to revert a holder, so younger transactions may not take its keys
    /// first (`Locks::enqueue`).
    pub claim: bool,
}

impl Part {
    pub fn coordinator(&self) -> u32 {
        self.buckets[0]
    }
    pub fn single(&self) -> bool {
        self.buckets.len() == 1
    }
}

/// A transaction this bucket coordinates and has not decided yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coord {
    pub buckets: Vec<u32>,
    /// The buckets whose yes vote stands (a set, not a counter: §13, Algorithm 3), each with
    /// the versions its ops will have.
    pub yes: BTreeMap<u32, Vec<u64>>,
}

/// Counters a bucket keeps (replicated like the rest: every replica counts the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub committed: u64,
    pub aborted: u64,
    /// Votes withdrawn in favour of an older transaction (Algorithm 5).
    pub reverts: u64,
    /// Queued transactions aborted because a commit changed a version they had read.
    pub fast_aborts: u64,
}

/// Most transactions a bucket holds in progress (parts and coordinated ones); a commit beyond
/// it is refused as busy.
pub const MAX_IN_PROGRESS: usize = 200_000;

#[derive(Clone, Debug)]
pub struct Bucket {
    pub(crate) me: u32,
    pub(crate) buckets: u32,
    /// How long (in the microseconds of transaction ids) a decision is kept for a retried
    /// commit; a commit older than that is refused rather than risk deciding it twice.
    pub(crate) retain_us: u64,
    pub(crate) newest_us: u64,
    pub(crate) store: OrdMap<Bytes, Entry>,
    pub(crate) parts: BTreeMap<TxnId, Part>,
    pub(crate) coord: BTreeMap<TxnId, Coord>,
    pub(crate) decided: BTreeMap<TxnId, Decided>,
    /// Commits decided here whose decision some participant has not acknowledged yet: per
    /// participant, the number of the decision message.
    pub(crate) settling: BTreeMap<TxnId, BTreeMap<u32, u64>>,
    /// Prepared transactions whose revert this bucket asked for (asked once per preparation).
    pub(crate) revert_asked: BTreeSet<TxnId>,
    pub(crate) channels: Channels,
    pub(crate) locks: Locks,
    pub(crate) stats: Stats,
    /// A digest of every command applied (so equal on replicas that applied the same ones),
    /// kept as it goes: hashing the whole state on demand would cost O(keys).
    pub(crate) rolling: u64,
    /// Transactions decided since the last [`Bucket::take_announced`] (not replicated state:
    /// how a server learns whose client to answer).
    pub(crate) announced: Vec<TxnId>,
    /// Waiters to try again before the current command ends (always empty between commands).
    pub(crate) wake: BTreeSet<TxnId>,
    /// Planted bug for the checkers' tests: a delete resets the key's version to 0.
    pub(crate) bug_reset_on_delete: bool,
    /// Planted bug for the checkers' tests: reads are not validated at commit.
    pub(crate) bug_skip_read_validation: bool,
}

impl Bucket {
    /// Bucket `me` of `buckets`.
    pub fn new(me: u32, buckets: u32, retain_us: u64) -> Self {
        assert!(me < buckets, "bucket index out of range");
        Bucket {
            me,
            buckets,
            retain_us,
            newest_us: 0,
            store: OrdMap::new(),
            parts: BTreeMap::new(),
            coord: BTreeMap::new(),
            decided: BTreeMap::new(),
            settling: BTreeMap::new(),
            revert_asked: BTreeSet::new(),
            channels: Channels::default(),
            locks: Locks::default(),
            stats: Stats::default(),
            wake: BTreeSet::new(),
            announced: Vec::new(),
            rolling: 0,
            bug_reset_on_delete: false,
            bug_skip_read_validation: false,
        }
    }

    /// Plant the thesis prototype's bug (versions reset on delete) so tests can show the
    /// checker catches it.
    pub fn plant_reset_on_delete(&mut self) {
        self.bug_reset_on_delete = true;
    }

    /// Plant a bug: reads are not validated at commit (write skew and lost updates follow).
    pub fn plant_skip_read_validation(&mut self) {
        self.bug_skip_read_validation = true;
    }

    /// The committed keys as of now (a copy-on-write view: O(1)); a simulated lagging replica
    /// serves reads from an older one.
    pub fn store(&self) -> OrdMap<Bytes, Entry> {
        self.store.clone()
    }

    pub fn index(&self) -> u32 {
        self.me
    }

    /// The latest committed value and version of `key` here (not isolated, not locked).
    pub fn read(&self, key: &[u8]) -> (Option<Bytes>, u64) {
        match self.store.get(key) {
            Some(e) => (e.value.clone(), e.version),
            None => (None, 0),
        }
    }

    pub fn version(&self, key: &[u8]) -> u64 {
        self.store.get(key).map_or(0, |e| e.version)
    }

    /// The outcome of a transaction this bucket coordinated, if decided and still retained.
    /// A commit is answered only once every participant has applied it (acknowledged the
    /// decision), so that a client's next read, at any bucket, sees its writes.
    pub fn decided(&self, id: &TxnId) -> Option<&Decided> {
        self.decided
            .get(id)
            .filter(|_| !self.settling.contains_key(id))
    }

    /// The transactions decided here since the last call (the server answers their clients).
    pub fn take_announced(&mut self) -> Vec<TxnId> {
        std::mem::take(&mut self.announced)
    }

    /// Record the outcome of a transaction this bucket decided.
    pub(crate) fn record(&mut self, id: TxnId, d: Decided) {
        match d.outcome {
            crate::txn::Outcome::Committed => self.stats.committed += 1,
            crate::txn::Outcome::Aborted => self.stats.aborted += 1,
        }
        self.decided.insert(id, d);
        if !self.settling.contains_key(&id) {
            self.announced.push(id);
        }
    }

    /// Bucket `from` applied our messages up to `upto`: forget them, and answer the commits
    /// every participant has now applied.
    fn acked(&mut self, from: u32, upto: u64) {
        self.channels.acked(from, upto);
        if self.settling.is_empty() {
            return;
        }
        let mut settled = Vec::new();
        for (id, waiting) in self.settling.iter_mut() {
            if waiting.get(&from).is_some_and(|seq| *seq <= upto) {
                waiting.remove(&from);
                if waiting.is_empty() {
                    settled.push(*id);
                }
            }
        }
        for id in settled {
            self.settling.remove(&id);
            self.announced.push(id);
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Transactions in progress here: parts, and coordinated ones not decided.
    pub fn in_progress(&self) -> (usize, usize) {
        (self.parts.len(), self.coord.len())
    }

    /// Keys with a lock or a waiter.
    pub fn busy_keys(&self) -> usize {
        self.locks.busy_keys()
    }

    /// Messages to other buckets not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.channels.unacked()
    }

    /// Every message to another bucket not acknowledged yet (the host re-sends them).
    pub fn pending(&self, emit: &mut Vec<Out>) {
        self.channels.pending(self.me, emit)
    }

    /// Apply one command of the bucket's log.
    pub fn apply(&mut self, payload: &Bytes, emit: &mut Vec<Out>) -> Reply {
        self.rolling = crate::route::fnv1a_64(
            &[
                self.rolling.to_be_bytes(),
                crate::route::fnv1a_64(payload).to_be_bytes(),
            ]
            .concat(),
        );
        let cmd = match Cmd::from_bytes(payload.clone()) {
            Ok(c) => c,
            Err(e) => return Reply::Refused(format!("malformed command: {e}")),
        };
        let reply = match cmd {
            Cmd::Commit { id, parts } => self.on_commit(id, parts, emit),
            Cmd::Abort { id } => self.on_client_abort(id, emit),
            Cmd::Channel {
                from,
                seq,
                ack,
                msg,
            } => {
                if from == self.me || from >= self.buckets {
                    return Reply::Refused("channel from a bucket that does not exist".into());
                }
                self.acked(from, ack);
                match self.channels.arrive(from, seq) {
                    Arrival::Apply => {
                        let before = emit.iter().filter(|o| o.to == from).count();
                        self.on_message(from, msg, emit);
                        if emit.iter().filter(|o| o.to == from).count() == before {
                            emit.push(self.channels.ack_for(self.me, from));
                        }
                    }
                    Arrival::Skip => emit.push(self.channels.ack_for(self.me, from)),
                }
                Reply::Internal
            }
            Cmd::Ack { from, upto } => {
                self.acked(from, upto);
                Reply::Internal
            }
        };
        self.run_wakeups(emit);
        self.check_invariants();
        reply
    }

    /// Check a commit's shape; `None` if it is well formed for this (coordinator) bucket.
    pub(crate) fn malformed(&self, parts: &[(u32, Vec<Op>)]) -> Option<String> {
        if parts.is_empty() {
            return Some("empty transaction".into());
        }
        if parts.len() > MAX_BUCKETS {
            return Some("too many buckets".into());
        }
        if parts[0].0 != self.me {
            return Some(format!(
                "bucket {} is not the coordinator (the lowest bucket touched)",
                self.me
            ));
        }
        for w in parts.windows(2) {
            if w[0].0 >= w[1].0 {
                return Some("parts not sorted by bucket".into());
            }
        }
        for (b, ops) in parts {
            if *b >= self.buckets {
                return Some(format!("bucket {b} does not exist"));
            }
            if ops.is_empty() {
                return Some(format!("empty part for bucket {b}"));
            }
            let mut keys = BTreeSet::new();
            for op in ops {
                if op.key.is_empty() {
                    return Some("empty key".into());
                }
                if !keys.insert(&op.key) {
                    return Some("a key twice in one transaction".into());
                }
                if bucket_of(&op.key, self.buckets) != *b {
                    return Some(format!(
                        "a key of bucket {} in the part of bucket {b}",
                        bucket_of(&op.key, self.buckets)
                    ));
                }
                if op.blind && !op.writes() {
                    return Some("a blind read".into());
                }
            }
        }
        None
    }

    /// Install a committed write or delete.
    pub(crate) fn install(&mut self, op: &Op) {
        if !op.writes() {
            return;
        }
        let current = self.version(&op.key);
        if !op.blind {
            assert_eq!(
                current, op.version,
                "a validated, locked key changed under its transaction"
            );
        }
        let version = current + 1;
        let entry = match op.kind {
            crate::txn::OpKind::Write => Entry {
                value: Some(op.value.clone()),
                version,
            },
            crate::txn::OpKind::Delete if self.bug_reset_on_delete => {
                self.store.remove(&op.key);
                return;
            }
            crate::txn::OpKind::Delete => Entry {
                value: None,
                version,
            },
            crate::txn::OpKind::Read => return,
        };
        self.store.insert(op.key.clone(), entry);
    }

    fn check_invariants(&self) {
        for (id, p) in &self.parts {
            debug_assert!(
                p.buckets.contains(&self.me),
                "a part of {id} that does not involve this bucket"
            );
            if p.state == PartState::Prepared {
                debug_assert!(
                    self.locks.blockers(*id, &p.ops).holders.is_empty(),
                    "a prepared {id} without its locks"
                );
            }
        }
        assert!(
            self.coord.keys().all(|id| !self.decided.contains_key(id)),
            "a transaction both deciding and decided"
        );
    }

    /// A digest of the commands applied, equal on replicas that applied the same ones (and
    /// carried by snapshots).
    pub fn digest(&self) -> u64 {
        self.rolling
    }

    /// A digest of the whole state (O(keys)): equal on replicas whose states are equal.
    pub fn state_digest(&self) -> u64 {
        crate::route::fnv1a_64(&self.encode())
    }

    /// The whole replicated state (locks are rebuilt from the parts).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u8(1); // format
        b.put_u32(self.me);
        b.put_u32(self.buckets);
        b.put_u64(self.retain_us);
        b.put_u64(self.newest_us);
        b.put_u64(self.rolling);
        b.put_u8(self.bug_reset_on_delete as u8 | (self.bug_skip_read_validation as u8) << 1);
        b.put_u64(self.store.len() as u64);
        for (k, e) in &self.store {
            synod_core::wire::put_bytes(&mut b, k);
            b.put_u64(e.version);
            match &e.value {
                Some(v) => {
                    b.put_u8(1);
                    synod_core::wire::put_bytes(&mut b, v);
                }
                None => b.put_u8(0),
            }
        }
        b.put_u32(self.parts.len() as u32);
        for (id, p) in &self.parts {
            id.encode(&mut b);
            put_u32s(&mut b, &p.buckets);
            put_ops(&mut b, &p.ops);
            b.put_u8(match (p.state, p.claim) {
                (PartState::Queued, false) => 0,
                (PartState::Prepared, _) => 1,
                (PartState::Queued, true) => 2,
            });
        }
        b.put_u32(self.coord.len() as u32);
        for (id, c) in &self.coord {
            id.encode(&mut b);
            put_u32s(&mut b, &c.buckets);
            b.put_u32(c.yes.len() as u32);
            for (bucket, versions) in &c.yes {
                b.put_u32(*bucket);
                crate::txn::put_u64s(&mut b, versions);
            }
        }
        b.put_u32(self.decided.len() as u32);
        for (id, d) in &self.decided {
            id.encode(&mut b);
            d.encode(&mut b);
        }
        b.put_u32(self.settling.len() as u32);
        for (id, waiting) in &self.settling {
            id.encode(&mut b);
            b.put_u32(waiting.len() as u32);
            for (bucket, seq) in waiting {
                b.put_u32(*bucket);
                b.put_u64(*seq);
            }
        }
        b.put_u32(self.revert_asked.len() as u32);
        for id in &self.revert_asked {
            id.encode(&mut b);
        }
        self.channels.encode(&mut b);
        let s = self.stats;
        for x in [s.committed, s.aborted, s.reverts, s.fast_aborts] {
            b.put_u64(x);
        }
        b.freeze()
    }

    pub fn decode(mut b: Bytes) -> WireResult<Self> {
        let b = &mut b;
        if get_u8(b)? != 1 {
            return Err(WireError::Invalid("kv snapshot format"));
        }
        let me = get_u32(b)?;
        let buckets = get_u32(b)?;
        if me >= buckets {
            return Err(WireError::Invalid("kv snapshot bucket index"));
        }
        let mut s = Bucket::new(me, buckets, get_u64(b)?);
        s.newest_us = get_u64(b)?;
        s.rolling = get_u64(b)?;
        let bugs = get_u8(b)?;
        s.bug_reset_on_delete = bugs & 1 != 0;
        s.bug_skip_read_validation = bugs & 2 != 0;
        let n = get_u64(b)?;
        for _ in 0..n {
            let k = get_bytes(b, "key", crate::txn::MAX_KEY_BYTES as u64)?;
            let version = get_u64(b)?;
            let value = if get_bool(b)? {
                Some(get_bytes(b, "value", crate::txn::MAX_VALUE_BYTES as u64)?)
            } else {
                None
            };
            s.store.insert(k, Entry { value, version });
        }
        for _ in 0..get_count(b, "parts", 16)? {
            let id = TxnId::decode(b)?;
            let buckets = get_u32s(b, MAX_BUCKETS)?;
            let ops = get_ops(b)?;
            if buckets.is_empty() || ops.is_empty() {
                return Err(WireError::Invalid("kv snapshot part"));
            }
            let (state, claim) = match get_u8(b)? {
                0 => (PartState::Queued, false),
                1 => (PartState::Prepared, false),
                2 => (PartState::Queued, true),
                _ => return Err(WireError::Invalid("kv snapshot part state")),
            };
            s.parts.insert(
                id,
                Part {
                    buckets,
                    ops,
                    state,
                    claim,
                },
            );
        }
        for _ in 0..get_count(b, "coordinated", 16)? {
            let id = TxnId::decode(b)?;
            let buckets = get_u32s(b, MAX_BUCKETS)?;
            let mut yes = BTreeMap::new();
            for _ in 0..get_count(b, "votes", 8)? {
                yes.insert(get_u32(b)?, crate::txn::get_u64s(b, crate::txn::MAX_OPS)?);
            }
            s.coord.insert(id, Coord { buckets, yes });
        }
        for _ in 0..get_count(b, "decided", 16)? {
            let id = TxnId::decode(b)?;
            s.decided.insert(id, Decided::decode(b)?);
        }
        for _ in 0..get_count(b, "settling", 20)? {
            let id = TxnId::decode(b)?;
            let mut waiting = BTreeMap::new();
            for _ in 0..get_count(b, "participants", 12)? {
                waiting.insert(get_u32(b)?, get_u64(b)?);
            }
            s.settling.insert(id, waiting);
        }
        for _ in 0..get_count(b, "reverts", 16)? {
            s.revert_asked.insert(TxnId::decode(b)?);
        }
        s.channels = Channels::decode(b)?;
        s.stats = crate::bucket::Stats {
            committed: get_u64(b)?,
            aborted: get_u64(b)?,
            reverts: get_u64(b)?,
            fast_aborts: get_u64(b)?,
        };
        // Rebuild the lock table: prepared parts hold their locks, queued ones wait, in id order.
        for (id, p) in &s.parts {
            match p.state {
                PartState::Prepared => {
                    if !s.locks.blockers(*id, &p.ops).holders.is_empty() {
                        return Err(WireError::Invalid(
                            "kv snapshot: conflicting prepared transactions",
                        ));
                    }
                    s.locks.acquire(*id, &p.ops);
                }
                PartState::Queued => s.locks.enqueue(*id, &p.ops, p.claim),
            }
        }
        Ok(s)
    }
}

/// The message handlers, dispatched from [`Bucket::apply`].
impl Bucket {
    fn on_message(&mut self, from: u32, msg: Msg, emit: &mut Vec<Out>) {
        match msg {
            Msg::Prepare { id, buckets, ops } => self.on_prepare(from, id, buckets, ops, emit),
            Msg::Vote {
                id,
                yes,
                reason,
                versions,
            } => self.on_vote(id, from, yes, reason, versions, emit),
            Msg::Decision { id, commit } => self.on_decision(id, commit),
            Msg::RevertRequest { id } => self.on_revert_request(id, from, emit),
            Msg::RevertGrant { id } => self.on_revert_grant(id),
        }
    }
}

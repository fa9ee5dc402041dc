//! A SconeKV bucket as a group's state machine: [`Bucket`] applied from the group's log, its
//! messages to other buckets turned into messages to their groups, and the clients waiting for
//! a decision woken when it is applied here (the server's KV service waits this way; the
//! simulator reads the decisions from [`KvMachine::take_decided`] instead).

use crate::{Bucket, Decided, Out, TxnId};
use bytes::Bytes;
use std::collections::HashMap;
use synod_core::wire::{Wire, WireError};
use synod_core::{Command, GroupMessage, Position, Snapshot, StateMachine};
use tokio::sync::oneshot;

/// Most clients waiting for decisions at one bucket replica (the front end refuses more as
/// busy before submitting).
pub const MAX_WAITERS: usize = 100_000;

pub struct KvMachine {
    bucket: Bucket,
    /// Bucket `b` is group `group_base + b`.
    group_base: u32,
    applied: Position,
    /// Clients waiting for the decision of a transaction (not replicated: local to this
    /// process, woken when the decision is applied here).
    waiters: HashMap<TxnId, Vec<oneshot::Sender<Decided>>>,
    /// Every decision applied here since the last [`KvMachine::take_decided`], when asked to
    /// keep them (the simulator's checkers).
    decided: Option<Vec<(TxnId, Decided)>>,
}

impl KvMachine {
    pub fn new(bucket: u32, buckets: u32, group_base: u32, retain_us: u64) -> Self {
        KvMachine {
            bucket: Bucket::new(bucket, buckets, retain_us),
            group_base,
            applied: Position::default(),
            waiters: HashMap::new(),
            decided: None,
        }
    }

    /// Keep every decision applied from now on, for [`KvMachine::take_decided`].
    pub fn keep_decisions(&mut self) {
        self.decided.get_or_insert_with(Vec::new);
    }

    /// The decisions applied here since the last call (with [`KvMachine::keep_decisions`]).
    pub fn take_decided(&mut self) -> Vec<(TxnId, Decided)> {
        self.decided
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// For planting a bug (`debug_bug`, fault injection only).
    pub fn bucket_mut(&mut self) -> &mut Bucket {
        &mut self.bucket
    }

    /// Be told the decision of `id` when it is applied here (at once if it already was).
    pub fn wait(&mut self, id: TxnId) -> Result<oneshot::Receiver<Decided>, &'static str> {
        let (tx, rx) = oneshot::channel();
        if let Some(d) = self.bucket.decided(&id) {
            let _ = tx.send(d.clone());
            return Ok(rx);
        }
        if self.waiters.len() >= MAX_WAITERS {
            return Err("too many clients waiting for decisions at this node");
        }
        self.waiters.entry(id).or_default().push(tx);
        Ok(rx)
    }

    /// Forget the waiters of `id` that gave up.
    pub fn forget(&mut self, id: &TxnId) {
        if let Some(w) = self.waiters.get_mut(id) {
            w.retain(|tx| !tx.is_closed());
            if w.is_empty() {
                self.waiters.remove(id);
            }
        }
    }

    fn to_group(&self, o: Out) -> GroupMessage {
        GroupMessage {
            to: self.group_base + o.to,
            payload: o.payload,
        }
    }
}

impl StateMachine for KvMachine {
    fn apply(&mut self, at: Position, command: &Command, out: &mut Vec<GroupMessage>) -> Bytes {
        let mut emit = Vec::new();
        let reply = self.bucket.apply(&command.payload, &mut emit);
        out.extend(emit.into_iter().map(|o| self.to_group(o)));
        self.applied = at;
        for id in self.bucket.take_announced() {
            let d = self.bucket.decided(&id).expect("announced");
            if let Some(log) = &mut self.decided {
                log.push((id, d.clone()));
            }
            if let Some(ws) = self.waiters.remove(&id) {
                for w in ws {
                    let _ = w.send(d.clone());
                }
            }
        }
        reply.to_bytes()
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        let b = self.bucket.clone();
        Box::new(move || b.encode())
    }

    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError> {
        let b = Bucket::decode(snapshot.data.clone())?;
        if b.index() != self.bucket.index() {
            return Err(WireError::Invalid("a snapshot of another bucket"));
        }
        self.bucket = b;
        self.applied = snapshot.at;
        // Decisions in the snapshot answer whoever waits for them.
        let done: Vec<TxnId> = self
            .waiters
            .keys()
            .filter(|id| self.bucket.decided(id).is_some())
            .copied()
            .collect();
        for id in done {
            let d = self.bucket.decided(&id).expect("filtered").clone();
            for w in self.waiters.remove(&id).unwrap_or_default() {
                let _ = w.send(d.clone());
            }
        }
        Ok(())
    }

    fn applied(&self) -> Position {
        self.applied
    }

    fn digest(&self) -> u64 {
        self.bucket.digest()
    }

    fn pending(&self, out: &mut Vec<GroupMessage>) {
        let mut emit = Vec::new();
        self.bucket.pending(&mut emit);
        out.extend(emit.into_iter().map(|o| self.to_group(o)));
    }
}

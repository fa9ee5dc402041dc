//! [`Txn`]: a transaction's read/write set, buffered at the client until commit (sconekv.md
//! §3, §8.5).
//!
//! * `get` answers from the buffer if the key is already in the set (read-your-writes);
//!   otherwise one `Read` at the key's bucket master, recorded as `READ(key, version)`.
//! * `put` and `delete` of a key already in the set replace its entry with a `WRITE` or
//!   `DELETE` that keeps the version observed earlier (the thesis's coalescing, no request);
//!   otherwise one `Read` fetches the version. The value stays in the buffer.
//! * `put_blind` and `delete_blind` of a key new to the set send nothing: the op is marked
//!   `blind`, so the store validates no version for it (it only waits for the key's lock). The
//!   commit's answer tells the version each write installed ([`Txn::committed_version`]).
//! * `commit` sends one `CommitRequest` with every op to the master of the coordinator bucket,
//!   the lowest bucket index among the keys' buckets; the coordinator forwards each other
//!   bucket its part. The store commits only if every observed version is still current.
//!   Read-only transactions commit too: that is what validates their reads.

use crate::client::{Client, Repeat, Stop, Target};
use crate::error::{Error, Result};
use crate::history::{RecordedOp, RecordedOutcome, TxnRecord};
use crate::limits::{check_key, check_txn_ops, check_value};
use crate::proto::{self, OpKind};
use crate::routing::Routing;
use bytes::Bytes;
use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

/// A transaction id, unique in the cluster and ordered by age (`time`, then `node`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId {
    /// Microseconds at the node that began it.
    pub time: u64,
    /// That node's id `<< 32 |` a per-node counter.
    pub node: u64,
}

impl From<proto::TxnId> for TxnId {
    fn from(id: proto::TxnId) -> TxnId {
        TxnId {
            time: id.time,
            node: id.node,
        }
    }
}

impl From<TxnId> for proto::TxnId {
    fn from(id: TxnId) -> proto::TxnId {
        proto::TxnId {
            time: id.time,
            node: id.node,
        }
    }
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@n{}.{}",
            self.time,
            self.node >> 32,
            self.node & 0xffff_ffff
        )
    }
}

/// A decided transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    /// None of its writes applied; `reason` says why ("version of k changed", "aborted by
    /// client", ...).
    Aborted {
        reason: String,
    },
}

impl Outcome {
    pub fn is_committed(&self) -> bool {
        matches!(self, Outcome::Committed)
    }
}

/// What the transaction will write at a key.
#[derive(Clone, Debug)]
enum Write {
    Put(Bytes),
    Delete,
}

/// One key of the read/write set.
#[derive(Clone, Debug)]
struct Entry {
    key: Bytes,
    /// The version observed when the key first entered the set.
    version: u64,
    /// `Some(value)` if the transaction read the key from the store.
    read: Option<Option<Bytes>>,
    write: Option<Write>,
    /// Written without a version to validate (the key entered the set by a blind write).
    blind: bool,
    /// After a commit: the key's version the commit left (installed by a write, read by a read).
    committed: Option<u64>,
}

impl Entry {
    fn op(&self) -> proto::Op {
        let (kind, value) = match &self.write {
            None => (OpKind::Read, Bytes::new()),
            Some(Write::Put(v)) => (OpKind::Write, v.clone()),
            Some(Write::Delete) => (OpKind::Delete, Bytes::new()),
        };
        proto::Op {
            key: self.key.clone(),
            kind: kind as i32,
            version: self.version,
            value,
            blind: self.blind && self.write.is_some(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Reading and writing.
    Active,
    /// A commit was sent and its outcome never learned.
    Unknown,
    /// Decided (or aborted before its commit was sent).
    Done(Outcome),
}

/// A transaction. Begin one with [`Client::begin`].
pub struct Txn {
    client: Client,
    id: TxnId,
    /// The read/write set in the order keys entered it.
    entries: Vec<Entry>,
    index: HashMap<Bytes, usize>,
    state: State,
    begun: Instant,
    recorded: bool,
}

impl Txn {
    pub(crate) fn new(client: Client, id: TxnId) -> Txn {
        Txn {
            client,
            id,
            entries: Vec::new(),
            index: HashMap::new(),
            state: State::Active,
            begun: Instant::now(),
            recorded: false,
        }
    }

    /// Its id.
    pub fn id(&self) -> TxnId {
        self.id
    }

    /// The number of keys in its read/write set.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if it has touched no key.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The outcome, once decided.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.state {
            State::Done(o) => Some(o),
            _ => None,
        }
    }

    fn check_active(&self) -> Result<()> {
        match &self.state {
            State::Active => Ok(()),
            State::Unknown => Err(Error::TxnState(format!("{} is committing", self.id))),
            State::Done(o) => Err(Error::TxnState(format!("{} is already {o:?}", self.id))),
        }
    }

    /// A new key's entry, after one `Read` for its version (and value).
    async fn fetch(&mut self, key: Bytes) -> Result<(usize, Option<Bytes>)> {
        check_txn_ops(self.entries.len() + 1)?;
        let v = self.client.read(key.clone()).await?;
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push(Entry {
            key,
            version: v.version,
            read: None,
            write: None,
            blind: false,
            committed: None,
        });
        Ok((self.entries.len() - 1, v.value))
    }

    /// The value of `key` as this transaction sees it: its own write if it wrote the key, the
    /// value it read before if it did, the store's latest committed value otherwise.
    pub async fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.check_active()?;
        let key = key.as_ref();
        check_key(key)?;
        if let Some(&i) = self.index.get(key) {
            let e = &self.entries[i];
            return Ok(match &e.write {
                Some(Write::Put(v)) => Some(v.clone()),
                Some(Write::Delete) => None,
                None => e.read.clone().flatten(),
            });
        }
        let (i, value) = self.fetch(Bytes::copy_from_slice(key)).await?;
        self.entries[i].read = Some(value.clone());
        Ok(value)
    }

    /// Buffers a write of `value` at `key`, conditional on the version the transaction
    /// observed for it (fetched now if the key is new to the transaction).
    pub async fn put(&mut self, key: impl AsRef<[u8]>, value: impl Into<Bytes>) -> Result<()> {
        let value = value.into();
        check_value(&value)?;
        self.set(key.as_ref(), Write::Put(value), false).await
    }

    /// Buffers a delete of `key`, conditional like [`Txn::put`].
    pub async fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.set(key.as_ref(), Write::Delete, false).await
    }

    /// Buffers a write of `value` at `key` without fetching its version: if the key is new to
    /// the transaction, nothing is sent and the store validates no version for it (a blind
    /// write, `Op.blind`). A key already in the set is written as by [`Txn::put`].
    pub async fn put_blind(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl Into<Bytes>,
    ) -> Result<()> {
        let value = value.into();
        check_value(&value)?;
        self.set(key.as_ref(), Write::Put(value), true).await
    }

    /// Buffers a delete of `key` without fetching its version, like [`Txn::put_blind`].
    pub async fn delete_blind(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.set(key.as_ref(), Write::Delete, true).await
    }

    async fn set(&mut self, key: &[u8], write: Write, blind: bool) -> Result<()> {
        self.check_active()?;
        check_key(key)?;
        let i = match self.index.get(key) {
            Some(&i) => i,
            None if blind => {
                check_txn_ops(self.entries.len() + 1)?;
                let key = Bytes::copy_from_slice(key);
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push(Entry {
                    key,
                    version: 0,
                    read: None,
                    write: None,
                    blind: true,
                    committed: None,
                });
                self.entries.len() - 1
            }
            None => self.fetch(Bytes::copy_from_slice(key)).await?.0,
        };
        self.entries[i].write = Some(write);
        Ok(())
    }

    /// After a commit, the version of `key` it left: the version a write or delete installed,
    /// or the version a read validated. `None` before, for a key not in the set, or if the
    /// server did not report versions.
    pub fn committed_version(&self, key: impl AsRef<[u8]>) -> Option<u64> {
        let &i = self.index.get(key.as_ref())?;
        self.entries[i].committed
    }

    /// The ops sent at commit, one per key.
    fn ops(&self) -> Vec<proto::Op> {
        self.entries.iter().map(Entry::op).collect()
    }

    fn coordinator(&self, routing: &Routing) -> u32 {
        self.entries
            .iter()
            .map(|e| routing.bucket_of(&e.key))
            .min()
            .expect("a transaction with keys")
    }

    fn buckets(&self, routing: &Routing) -> Vec<u32> {
        let mut b: Vec<u32> = self
            .entries
            .iter()
            .map(|e| routing.bucket_of(&e.key))
            .collect();
        b.sort_unstable();
        b.dedup();
        b
    }

    /// Commits: sends the read/write set to the coordinator bucket's master and waits for its
    /// decision. Retries with the same id (the commit is idempotent) on timeouts and
    /// unavailability, and after a redirect to another master. If the retries run out after an
    /// attempt that may have arrived, returns [`Error::Unknown`]: call `commit` again, or
    /// [`Txn::abort`] to have the coordinator decide.
    pub async fn commit(&mut self) -> Result<Outcome> {
        match &self.state {
            State::Active | State::Unknown => {}
            State::Done(o) => return Err(Error::TxnState(format!("{} is already {o:?}", self.id))),
        }
        if self.entries.is_empty() {
            // Nothing read or written: nothing to validate.
            return Ok(self.finish(Outcome::Committed));
        }
        let ops = self.ops();
        let id = proto::TxnId::from(self.id);
        let sent = self
            .client
            .request(
                |r| Target::Master(self.coordinator(r)),
                Repeat::Always,
                |r| proto::CommitRequest {
                    view_version: r.version(),
                    id: Some(id),
                    ops: ops.clone(),
                },
                |mut c, r| async move { c.commit(r).await },
            )
            .await;
        self.decided(sent, "commit")
    }

    /// Aborts. Before a commit was sent this is local: nothing is sent, and it can never
    /// commit. After a commit whose outcome is unknown it asks the coordinator to abort, which
    /// it does unless it had already decided commit: the returned outcome says which. After a
    /// decision it returns that decision.
    pub async fn abort(&mut self) -> Result<Outcome> {
        match &self.state {
            State::Active => {
                return Ok(self.finish(Outcome::Aborted {
                    reason: "aborted by client".into(),
                }))
            }
            State::Done(o) => return Ok(o.clone()),
            State::Unknown => {}
        }
        let id = proto::TxnId::from(self.id);
        let sent = self
            .client
            .request(
                |r| Target::Master(self.coordinator(r)),
                Repeat::Always,
                |r| proto::AbortRequest {
                    view_version: r.version(),
                    id: Some(id),
                    buckets: self.buckets(r),
                },
                |mut c, r| async move { c.abort(r).await },
            )
            .await;
        self.decided(sent, "abort")
    }

    /// The state after a `Commit` or `Abort` exchange.
    fn decided(
        &mut self,
        sent: std::result::Result<proto::CommitResponse, Stop>,
        what: &str,
    ) -> Result<Outcome> {
        let was_unknown = self.state == State::Unknown;
        match sent {
            Ok(resp) => match proto::Outcome::try_from(resp.outcome) {
                Ok(proto::Outcome::Committed) => {
                    // Versions in the order of the ops sent, which is the entries' order.
                    if resp.versions.len() == self.entries.len() {
                        for (e, v) in self.entries.iter_mut().zip(resp.versions) {
                            e.committed = Some(v);
                        }
                    }
                    Ok(self.finish(Outcome::Committed))
                }
                Ok(proto::Outcome::Aborted) => Ok(self.finish(Outcome::Aborted {
                    reason: resp.reason,
                })),
                _ => {
                    self.state = State::Unknown;
                    Err(Error::Unknown {
                        txn: Some(self.id),
                        detail: format!("{what} answered without a decision"),
                    })
                }
            },
            // Never delivered anywhere, now or before: it can never commit.
            Err(Stop::Failed {
                ambiguous: false,
                why,
            }) if !was_unknown => {
                self.finish(Outcome::Aborted {
                    reason: format!("commit never delivered: {why}"),
                });
                Err(Error::Unavailable(why))
            }
            Err(Stop::Refused(code, detail)) if !was_unknown => {
                self.finish(Outcome::Aborted {
                    reason: format!("refused: {detail}"),
                });
                Err(Error::Rejected { code, detail })
            }
            Err(Stop::Refused(code, detail)) => {
                self.state = State::Unknown;
                Err(Error::Unknown {
                    txn: Some(self.id),
                    detail: format!("{what} refused ({}): {detail}", code.as_str_name()),
                })
            }
            Err(Stop::Failed { why, .. }) => {
                self.state = State::Unknown;
                Err(Error::Unknown {
                    txn: Some(self.id),
                    detail: why,
                })
            }
        }
    }

    fn finish(&mut self, outcome: Outcome) -> Outcome {
        self.state = State::Done(outcome.clone());
        self.record();
        outcome
    }

    /// Hands the record to the recorder, once.
    fn record(&mut self) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let Some(recorder) = &self.client.config().recorder else {
            return;
        };
        let outcome = match &self.state {
            State::Done(Outcome::Committed) => RecordedOutcome::Committed,
            State::Done(Outcome::Aborted { .. }) | State::Active => RecordedOutcome::Aborted,
            State::Unknown => RecordedOutcome::Unknown,
        };
        let mut ops = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            if let Some(value) = &e.read {
                ops.push(RecordedOp {
                    key: e.key.clone(),
                    kind: OpKind::Read,
                    version: e.version,
                    value: value.clone(),
                    blind: false,
                    installed: None,
                });
            }
            let (kind, value) = match &e.write {
                None => continue,
                Some(Write::Put(v)) => (OpKind::Write, Some(v.clone())),
                Some(Write::Delete) => (OpKind::Delete, None),
            };
            ops.push(RecordedOp {
                key: e.key.clone(),
                kind,
                version: e.version,
                value,
                blind: e.blind,
                installed: e.committed,
            });
        }
        recorder.record(TxnRecord {
            id: self.id,
            outcome,
            ops,
            begun: self.begun,
            finished: Instant::now(),
        });
    }
}

impl Drop for Txn {
    /// A transaction dropped undecided is recorded: aborted if its commit was never sent,
    /// unknown if it was.
    fn drop(&mut self) {
        self.record();
    }
}

impl fmt::Debug for Txn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Txn")
            .field("id", &self.id)
            .field("keys", &self.entries.len())
            .field("state", &self.state)
            .finish()
    }
}

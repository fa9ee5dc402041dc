//! The transaction algorithms of sconekv.md §5, as handlers of a bucket's commands.
//!
//! | thesis | here |
//! |---|---|
//! | CommitRequest (Alg. 1) | [`Bucket::on_commit`] at the coordinator bucket, which sends each other bucket its part ([`Msg::Prepare`] → [`Bucket::on_prepare`]) |
//! | MakeLocalDecision (Alg. 2): validate, lock all or queue, ask to revert | [`Bucket::local_decision`] |
//! | SendLocalDecision after the Prepare entry commits | [`Bucket::vote`]: the vote is emitted by `apply`, i.e. once the command that decided it is committed in the bucket's log |
//! | LocalDecisionResponse at the coordinator (Alg. 3) | [`Bucket::on_vote`] (votes kept as a set of buckets) |
//! | GlobalDecision, Commit, Abort, ReleaseLocks (Alg. 4) | [`Bucket::decide`], [`Bucket::on_decision`] |
//! | RequestRevertLocalDecision / RevertLocalDecisionResponse / RevertLocalDecision (Alg. 5) | [`Bucket::request_revert`], [`Bucket::on_revert_request`] (granted only while undecided: the ∧ erratum), [`Bucket::on_revert_grant`] (the reverted part is queued again) |
//! | fast aborts (§4.6) | [`Bucket::run_wakeups`]: a waiter re-validates first, so a commit that changed a version it read aborts it at once, and its abort vote is replicated like any vote |
//!
//! A transaction that touches one bucket is decided in the command that takes its locks: its
//! validation, its writes and its outcome are one log entry (the thesis's two replications,
//! local then global, collapse because nobody else votes).

use crate::bucket::{Bucket, Coord, Part, PartState, MAX_IN_PROGRESS};
use crate::channel::Out;
use crate::txn::{Decided, Msg, Op, Outcome, Reply, TxnId};

impl Bucket {
    /// A client's commit, at the coordinator bucket.
    pub(crate) fn on_commit(
        &mut self,
        id: TxnId,
        parts: Vec<(u32, Vec<Op>)>,
        emit: &mut Vec<Out>,
    ) -> Reply {
        if self.decided.contains_key(&id) {
            return self.answer(id);
        }
        if self.coord.contains_key(&id) || self.parts.contains_key(&id) {
            return Reply::Pending; // a retry of a commit in progress
        }
        if id.time.saturating_add(self.retain_us) < self.newest_us {
            return Reply::Refused(
                "transaction too old to tell from a retry: begin it again".into(),
            );
        }
        if let Some(why) = self.malformed(&parts) {
            return Reply::Refused(why);
        }
        if self.parts.len() + self.coord.len() >= MAX_IN_PROGRESS {
            return Reply::Refused("busy: too many transactions in progress in this bucket".into());
        }
        self.newest_us = self.newest_us.max(id.time);
        self.forget_old_decisions();
        let buckets: Vec<u32> = parts.iter().map(|(b, _)| *b).collect();
        let mut parts = parts.into_iter();
        let (_, own) = parts.next().expect("checked non-empty");
        if buckets.len() > 1 {
            self.coord.insert(
                id,
                Coord {
                    buckets: buckets.clone(),
                    yes: Default::default(),
                },
            );
            for (b, ops) in parts {
                self.channels.send(
                    self.me,
                    b,
                    Msg::Prepare {
                        id,
                        buckets: buckets.clone(),
                        ops,
                    },
                    emit,
                );
            }
        }
        self.parts.insert(
            id,
            Part {
                buckets,
                ops: own,
                state: PartState::Queued,
                claim: false,
            },
        );
        self.local_decision(id, false, emit);
        if self.decided.contains_key(&id) {
            self.answer(id)
        } else {
            Reply::Pending
        }
    }

    fn forget_old_decisions(&mut self) {
        while let Some((id, _)) = self.decided.first_key_value() {
            if id.time.saturating_add(self.retain_us) >= self.newest_us
                || self.settling.contains_key(id)
            {
                break;
            }
            self.decided.pop_first();
        }
    }

    /// A client gives up on a commit it sent: abort unless decided; remember the id as aborted
    /// so that a late copy of the commit is refused.
    pub(crate) fn on_client_abort(&mut self, id: TxnId, emit: &mut Vec<Out>) -> Reply {
        const WHY: &str = "aborted by the client";
        if self.decided.contains_key(&id) {
            return self.answer(id);
        }
        if self.coord.contains_key(&id) {
            self.decide(id, false, WHY.into(), emit);
        } else if let Some(p) = self.parts.get(&id) {
            if !p.single() {
                return Reply::Refused(format!(
                    "bucket {} is not the coordinator of {id}",
                    self.me
                ));
            }
            self.fail(id, WHY.into(), false, emit);
        } else if id.time.saturating_add(self.retain_us) < self.newest_us {
            return Reply::Refused("transaction too old to abort".into());
        } else {
            self.record(
                id,
                Decided {
                    outcome: Outcome::Aborted,
                    reason: WHY.into(),
                    version: 0,
                    versions: Vec::new(),
                },
            );
        }
        self.answer(id)
    }

    /// The reply for a decided transaction: its decision, or `Pending` while a commit is not
    /// yet applied by every participant (the client is answered then).
    fn answer(&self, id: TxnId) -> Reply {
        match self.decided(&id) {
            Some(d) => Reply::Decided(d.clone()),
            None => Reply::Pending,
        }
    }

    /// This bucket's part of a transaction coordinated by bucket `from`.
    pub(crate) fn on_prepare(
        &mut self,
        from: u32,
        id: TxnId,
        buckets: Vec<u32>,
        ops: Vec<Op>,
        emit: &mut Vec<Out>,
    ) {
        assert!(
            !self.parts.contains_key(&id),
            "a second prepare of {id}: the channel applies each message once"
        );
        let wrong = buckets.first() != Some(&from)
            || !buckets.contains(&self.me)
            || ops.is_empty()
            || ops.iter().any(|op| {
                crate::route::bucket_of(&op.key, self.buckets) != self.me
                    || (op.blind && !op.writes())
            });
        if wrong {
            self.channels.send(
                self.me,
                from,
                Msg::Vote {
                    id,
                    yes: false,
                    reason: "malformed part".into(),
                    versions: Vec::new(),
                },
                emit,
            );
            return;
        }
        self.parts.insert(
            id,
            Part {
                buckets,
                ops,
                state: PartState::Queued,
                claim: false,
            },
        );
        self.local_decision(id, false, emit);
    }

    /// Why `ops` would fail validation now, if they would (exact version equality for every
    /// read, write and delete the transaction observed; a blind write, of a key the transaction
    /// did not read, validates nothing: it only needs its lock, since it depends on no value).
    fn stale(&self, ops: &[Op]) -> Option<String> {
        let planted = |op: &&Op| self.bug_skip_read_validation && !op.writes();
        ops.iter()
            .filter(|op| !op.blind && !planted(op))
            .find(|op| self.version(&op.key) != op.version)
            .map(|op| {
                format!(
                    "the version of {} is {}, the transaction saw {}",
                    String::from_utf8_lossy(&op.key),
                    self.version(&op.key),
                    op.version
                )
            })
    }

    /// MakeLocalDecision (Algorithm 2). `woken`: a waiter tried again after locks were freed.
    pub(crate) fn local_decision(&mut self, id: TxnId, woken: bool, emit: &mut Vec<Out>) {
        let p = &self.parts[&id];
        debug_assert_eq!(p.state, PartState::Queued);
        if let Some(reason) = self.stale(&p.ops) {
            self.fail(id, reason, woken, emit);
            return;
        }
        let blockers = self.locks.blockers(id, &p.ops);
        if blockers.is_empty() {
            let ops = p.ops.clone();
            self.locks.acquire(id, &ops);
            // The versions the ops will have if the transaction commits: fixed now, since the
            // locks keep every other writer out until the decision.
            let versions: Vec<u64> = ops
                .iter()
                .map(|op| self.version(&op.key) + op.writes() as u64)
                .collect();
            if p.single() {
                // Validation, writes and outcome in one log entry.
                let p = self.parts.remove(&id).expect("present");
                for op in &p.ops {
                    self.install(op);
                }
                self.locks.release(id, &p.ops, &mut self.wake);
                let version = self.version(&p.ops[0].key);
                self.record(
                    id,
                    Decided {
                        outcome: Outcome::Committed,
                        reason: String::new(),
                        version,
                        versions,
                    },
                );
                return;
            }
            let p = self.parts.get_mut(&id).expect("present");
            p.state = PartState::Prepared;
            p.claim = false;
            let coordinator = self.parts[&id].coordinator();
            self.vote(id, coordinator, true, String::new(), versions, emit);
            return;
        }
        let ops = p.ops.clone();
        // Older than every holder: it may ask them to revert (Algorithm 2, l.11).
        let asks = blockers.holders.first().is_some_and(|oldest| id < *oldest);
        let p = self.parts.get_mut(&id).expect("present");
        p.claim |= asks;
        let claim = p.claim;
        self.locks.enqueue(id, &ops, claim);
        if asks {
            for t in blockers.holders {
                let prepared = self
                    .parts
                    .get(&t)
                    .is_some_and(|q| q.state == PartState::Prepared);
                if prepared && self.revert_asked.insert(t) {
                    self.request_revert(t, emit);
                }
            }
        }
    }

    /// The part fails validation (or the client gave up on it): abort it here.
    fn fail(&mut self, id: TxnId, reason: String, fast: bool, emit: &mut Vec<Out>) {
        let p = self.parts.remove(&id).expect("a part to fail");
        debug_assert_eq!(p.state, PartState::Queued);
        self.locks.dequeue(id, &p.ops, &mut self.wake);
        if fast {
            self.stats.fast_aborts += 1;
        }
        if p.single() {
            let version = self.version(&p.ops[0].key);
            self.record(
                id,
                Decided {
                    outcome: Outcome::Aborted,
                    reason,
                    version,
                    versions: Vec::new(),
                },
            );
        } else {
            // Nothing of this part remains here: the decision can only be abort.
            self.vote(id, p.coordinator(), false, reason, Vec::new(), emit);
        }
    }

    /// Send this bucket's local decision to the coordinator (or count it, if that is us).
    pub(crate) fn vote(
        &mut self,
        id: TxnId,
        coordinator: u32,
        yes: bool,
        reason: String,
        versions: Vec<u64>,
        emit: &mut Vec<Out>,
    ) {
        if coordinator == self.me {
            self.on_vote(id, self.me, yes, reason, versions, emit);
        } else {
            let vote = Msg::Vote {
                id,
                yes,
                reason,
                versions,
            };
            self.channels.send(self.me, coordinator, vote, emit);
        }
    }

    /// LocalDecisionResponse at the coordinator (Algorithm 3).
    pub(crate) fn on_vote(
        &mut self,
        id: TxnId,
        from: u32,
        yes: bool,
        reason: String,
        versions: Vec<u64>,
        emit: &mut Vec<Out>,
    ) {
        let Some(c) = self.coord.get_mut(&id) else {
            return; // decided already (an abort vote, or the client's abort, came first)
        };
        assert!(
            c.buckets.contains(&from),
            "a vote from a bucket outside the transaction"
        );
        if !yes {
            self.decide(id, false, reason, emit);
            return;
        }
        c.yes.insert(from, versions);
        if c.yes.len() == c.buckets.len() {
            self.decide(id, true, String::new(), emit);
        }
    }

    /// The global decision: sent to every other participant, applied to our own part, and
    /// kept for the client (and its retries).
    pub(crate) fn decide(&mut self, id: TxnId, commit: bool, reason: String, emit: &mut Vec<Out>) {
        let c = self
            .coord
            .remove(&id)
            .expect("deciding a transaction we coordinate");
        let mut waiting = std::collections::BTreeMap::new();
        for &b in c.buckets.iter().filter(|b| **b != self.me) {
            let seq = self
                .channels
                .send(self.me, b, Msg::Decision { id, commit }, emit);
            waiting.insert(b, seq);
        }
        if commit && !waiting.is_empty() {
            // Answer the client once every participant has applied the commit.
            self.settling.insert(id, waiting);
        }
        self.on_decision(id, commit);
        // Every vote is in when it commits: the versions of all parts, in bucket order.
        let versions = if commit {
            c.buckets
                .iter()
                .flat_map(|b| c.yes[b].iter().copied())
                .collect()
        } else {
            Vec::new()
        };
        let outcome = if commit {
            Outcome::Committed
        } else {
            Outcome::Aborted
        };
        self.record(
            id,
            Decided {
                outcome,
                reason,
                version: 0,
                versions,
            },
        );
    }

    /// The global decision reaches this bucket's part (Algorithm 4).
    pub(crate) fn on_decision(&mut self, id: TxnId, commit: bool) {
        let Some(p) = self.parts.remove(&id) else {
            assert!(!commit, "a commit of {id}, whose part here voted no");
            return;
        };
        self.revert_asked.remove(&id);
        match p.state {
            PartState::Prepared => {
                if commit {
                    for op in &p.ops {
                        self.install(op);
                    }
                }
                self.locks.release(id, &p.ops, &mut self.wake);
            }
            PartState::Queued => {
                assert!(!commit, "a commit of {id}, whose vote here was withdrawn");
                self.locks.dequeue(id, &p.ops, &mut self.wake);
            }
        }
    }

    /// Ask `t`'s coordinator to withdraw our vote for `t`, which holds locks an older
    /// transaction waits for.
    fn request_revert(&mut self, t: TxnId, emit: &mut Vec<Out>) {
        let coordinator = self.parts[&t].coordinator();
        if coordinator == self.me {
            self.on_revert_request(t, self.me, emit);
        } else {
            self.channels
                .send(self.me, coordinator, Msg::RevertRequest { id: t }, emit);
        }
    }

    /// At the coordinator: grant iff `t` is undecided (sconekv.md §13: the condition is ∧).
    pub(crate) fn on_revert_request(&mut self, t: TxnId, from: u32, emit: &mut Vec<Out>) {
        let Some(c) = self.coord.get_mut(&t) else {
            return; // decided: the decision will free the locks
        };
        if c.yes.remove(&from).is_none() {
            return;
        }
        self.stats.reverts += 1;
        if from == self.me {
            self.on_revert_grant(t);
        } else {
            self.channels
                .send(self.me, from, Msg::RevertGrant { id: t }, emit);
        }
    }

    /// Our vote for `t` is withdrawn: release its locks and queue it again; it is decided
    /// afresh once the older transaction is done.
    pub(crate) fn on_revert_grant(&mut self, t: TxnId) {
        let p = self
            .parts
            .get_mut(&t)
            .expect("a revert grant for a transaction prepared here");
        assert_eq!(
            p.state,
            PartState::Prepared,
            "a revert of {t}, which is not prepared here"
        );
        p.state = PartState::Queued;
        let ops = p.ops.clone();
        self.revert_asked.remove(&t);
        self.locks.release(t, &ops, &mut self.wake);
        self.locks.enqueue(t, &ops, false);
        self.wake.insert(t);
    }

    /// Try the waiters of freed keys again, oldest first.
    pub(crate) fn run_wakeups(&mut self, emit: &mut Vec<Out>) {
        while let Some(id) = self.wake.pop_first() {
            if self
                .parts
                .get(&id)
                .is_some_and(|p| p.state == PartState::Queued)
            {
                self.local_decision(id, true, emit);
            }
        }
    }
}

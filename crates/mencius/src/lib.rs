//! Mencius (Mao, Junqueira and Marzullo, UCSD 2008; mencius.md): multi-leader state machine
//! replication for wide-area networks, as a sans-IO core on synod's contract.
//!
//! Every replica coordinates its own share of the instances (round robin, M1) and suggests a
//! client batch to its next one at once (Rule 1), as ballot 0 of a Coordinated Paxos instance
//! that every acceptor starts prepared for (M2). One file per mechanism (docs/protocols/
//! mencius.md maps every rule of the report here):
//!
//! * **Suggest, accept, learn, skip** ([`suggest`]): Rule 1 ([`Mencius::suggest`]), Rule 2
//!   ([`Mencius::on_suggest`]), Optimizations 1 and 2 (skips inferred from an in-sync stream:
//!   [`Mencius::infer_skips`]), Accelerator 1 ([`Mencius::accelerate`]), Rule 4
//!   ([`Mencius::rule4`]).
//! * **Commit** ([`commit`]): in instance order ([`Mencius::commit`]), out of order for
//!   commuting commands (M13, [`Mencius::commit_out_of_order`]), dedup, snapshots and state
//!   transfer.
//! * **Revocation** ([`revoke`]): the failure detector, one elected revoker per suspected
//!   replica, Rule 3 with Optimization 3 (blocks of β), the three Paxos phases over a block.
//! * **Streams** ([`stream`]): per-peer FIFO with sequence numbers (M8); a gap, a new
//!   connection or a restarted peer stops skip inference until [`msg::Body::Sync`]; catch-up
//!   of decided instances ([`msg::Body::Need`]).

pub mod commit;
pub mod msg;
pub mod revoke;
pub mod stream;
pub mod suggest;
#[cfg(test)]
mod tests;

pub use msg::{Body, Hard, Msg, Rec};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use synod_core::{
    rng::CoreRng, Actions, Cluster, Command, Dest, DurableState, Envelope, Event, Input, NodeId,
    Protocol, Role, Snapshot, StorageOp, TimeUs, View,
};

pub type MenciusActions = Actions<Msg, Rec, Hard>;

/// The state machine's commutativity test (M13's `ISCOMMUTE(u, v)`): two commands commute when
/// applying them in either order leaves the same state and the same replies.
pub type Commute = fn(&Command, &Command) -> bool;

/// Deliberately broken behaviours, used only by tests to prove that the simulator's checkers
/// catch the hazards of mencius.md §6.3. Never set in production.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// H2 and H3 literally: the estimate of a peer's index is set, not raised, and a skip is
    /// inferred for every instance below it, suggested or not.
    StaleSkip,
    /// H3 and H4 literally: a SUGGEST for an instance already learned is dropped (so the
    /// skips it implies are not recorded), and a later inferred skip overwrites the learned
    /// value with a no-op.
    OverwriteLearned,
    /// Every replica revokes a suspect on its own (no elected revoker), and a revoker proposes
    /// no-op over the whole block whatever phase 1 reported: dueling revokers overwrite a value.
    DuelingRevokers,
    /// Out-of-order commit without asking whether the commands commute.
    CommitNonCommuting,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Every peer hears from a replica at least this often (an explicit SKIP that doubles as
    /// the failure detector's heartbeat).
    pub heartbeat_us: TimeUs,
    /// A peer silent for this long is suspected (◇P, M11: only liveness depends on it).
    pub suspect_timeout_us: TimeUs,
    /// Accelerator 1: skips owed to a peer are sent once more than `alpha` are outstanding or
    /// the oldest has waited `tau_us` (report: α = 20, τ = 50 ms).
    pub alpha: u64,
    pub tau_us: TimeUs,
    /// Optimization 3: revoke a suspect's instances up to `index + 2β` once its first
    /// undecided one is below `index + β` (β in instances; the report's 100,000).
    pub beta: u64,
    /// A revocation that has not finished in this long starts again with a higher ballot.
    pub revoke_timeout_us: TimeUs,
    /// Commands per instance.
    pub max_batch: usize,
    /// Own instances suggested and not yet decided; beyond it commands wait and batch.
    pub max_inflight: usize,
    /// Commands waiting at one replica; beyond it submissions are refused (`Busy`).
    pub max_queued: usize,
    /// An own suggestion not decided after this long is sent again (lost messages).
    pub resuggest_us: TimeUs,
    /// The commit point not moving for this long starts catch-up (NEED).
    pub catch_up_us: TimeUs,
    /// Instances per LEARNED answer.
    pub catch_up_max: u64,
    /// Snapshot bytes per state-transfer chunk.
    pub snap_chunk_bytes: usize,
    /// Delivered command ids remembered to drop duplicates.
    pub dedup_memory: usize,
    /// Out-of-order commit of commuting commands (M13), with the state machine's test.
    pub commute: Option<Commute>,
    /// How far past the commit point out-of-order commit looks (instances).
    pub ooo_window: u64,
    pub bug: Option<Bug>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            heartbeat_us: 50_000,
            suspect_timeout_us: 500_000,
            alpha: 20,
            tau_us: 50_000,
            beta: 100_000,
            revoke_timeout_us: 500_000,
            max_batch: 512,
            max_inflight: 64,
            max_queued: 10_000,
            resuggest_us: 1_000_000,
            catch_up_us: 200_000,
            catch_up_max: 4_096,
            snap_chunk_bytes: 256 << 10,
            dedup_memory: 1 << 18,
            commute: None,
            ooo_window: 4_096,
            bug: None,
        }
    }
}

/// One instance as this replica holds it (instances at or above the log base).
#[derive(Clone, Debug, Default)]
pub(crate) struct Inst {
    /// The value accepted here and its ballot (from the record).
    pub accepted: Option<(u64, Vec<Command>)>,
    /// This replica suggested it (it is the owner).
    pub own: bool,
    /// The owner's SUGGEST reached here (or a SYNC listed it): never a skip (H3).
    pub suggested: bool,
    /// Decided: the value (empty: no-op).
    pub learned: Option<Vec<Command>>,
    /// Owner only: members (by position) that accepted the ballot-0 suggestion.
    pub acks: u64,
    /// The storage op that wrote the record (0: restored, durable).
    pub seq: u64,
    /// When the owner suggested it (for re-sending).
    pub suggested_at: TimeUs,
}

/// What this replica follows of one peer's stream.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StreamIn {
    pub epoch: u64,
    pub last: u64,
    /// Followed without a gap since a SYNC (or since the peer's first message ever).
    pub synced: bool,
    /// When a SYNCREQUEST was last sent (0: none pending).
    pub asked_at: Option<TimeUs>,
}

/// A state transfer under way.
#[derive(Debug)]
pub(crate) struct Transfer {
    pub from: usize,
    pub at: Option<synod_core::Position>,
    pub total: u64,
    pub buf: bytes::BytesMut,
    pub asked_at: TimeUs,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub suggested: u64,
    pub skips_sent: u64,
    pub skips_inferred: u64,
    pub revocations: u64,
    pub revoked_instances: u64,
    pub resuggested: u64,
    pub rejected: u64,
    pub out_of_order: u64,
    pub syncs: u64,
    pub catch_up: u64,
    pub duplicates: u64,
}

pub struct Mencius {
    pub(crate) cluster: Cluster,
    pub(crate) opt: Options,
    pub(crate) rng: CoreRng,
    pub(crate) now: TimeUs,
    /// This replica's position among the members, and their number.
    pub(crate) me: usize,
    pub(crate) n: u64,
    pub(crate) hard: Hard,
    /// Storage ops issued (synod_core::kit::issuer), the last `SetHard`, and what is durable.
    pub(crate) issuer: synod_core::kit::issuer::Issuer,
    pub(crate) hard_seq: u64,
    pub(crate) durable_upto: u64,
    /// I_p: the next own instance to suggest to (never goes back, H1). `floor` is the index
    /// that stable storage already justifies (records and hard state), with the op that did.
    pub(crate) index: u64,
    pub(crate) floor: u64,
    pub(crate) floor_seq: u64,
    /// Own instances below this, never suggested, are skips a restart keeps: the index that
    /// durable storage justifies. An own skip is decided here only below it, not below
    /// `index`: delivering past an own skip whose justification is not yet durable, then
    /// crashing, let the restarted replica suggest a value there and the group deliver it in
    /// an order the replica had not delivered (seeds 8041, 9530 of whole-node mencius, three register groups).
    pub(crate) skips_durable: u64,
    pub(crate) insts: BTreeMap<u64, Inst>,
    /// Revoked ranges decided no-op (but for the values their DECIDE listed, kept in `insts`).
    pub(crate) decided_blocks: Vec<msg::Range>,
    /// Instances below `base` are in the snapshot; below `expected`, delivered in order.
    pub(crate) base: u64,
    pub(crate) expected: u64,
    /// Deliveries so far (dense), and a snapshot that ended inside a batch.
    pub(crate) slot: u64,
    pub(crate) resume_left: Option<(u64, usize)>,
    /// Delivered out of order, above `expected`.
    pub(crate) ooo: BTreeSet<u64>,
    /// Slot ranges after which the delivered state was not an instance prefix (out-of-order
    /// deliveries above it): snapshots there are refused (docs/contract.md §7).
    pub(crate) dirty: Vec<(u64, u64)>,
    /// est_index of each member (by position): every instance of it below that it did not
    /// suggest is a skip. Raised only from in-sync streams (M5).
    pub(crate) est: Vec<u64>,
    pub(crate) streams_out: Vec<u64>,
    pub(crate) streams_in: Vec<StreamIn>,
    /// Per peer: every own instance below it has been accounted for on its stream.
    pub(crate) told: Vec<u64>,
    /// Per peer: when the oldest untold skip was made (Accelerator 1's τ).
    pub(crate) skip_since: Vec<Option<TimeUs>>,
    pub(crate) last_heard: Vec<TimeUs>,
    pub(crate) last_sent: Vec<TimeUs>,
    pub(crate) queue: VecDeque<Command>,
    /// Own instances suggested and not decided.
    pub(crate) inflight: BTreeSet<u64>,
    /// Own instances decided no-op while they held a suggestion (Rule 4's input).
    pub(crate) orphans: BTreeMap<u64, Vec<Command>>,
    /// The highest own instance decided with a value.
    pub(crate) own_valued: u64,
    /// Command id → the latest own instance that carries it (Rule 4 suggests a command again
    /// only from its latest instance).
    pub(crate) own_ids: synod_core::kit::dedup::Window<u64>,
    /// Messages to this replica itself (its own acceptor's replies), released once durable.
    pub(crate) loopback: Vec<(u64, Body)>,
    pub(crate) revocations: BTreeMap<usize, revoke::Revocation>,
    /// Per suspect: no new revocation before this time (after being preempted).
    pub(crate) revoke_backoff: BTreeMap<usize, TimeUs>,
    /// The highest revocation round seen refused (NACK), so the next attempt goes above it.
    pub(crate) round_seen: u64,
    /// Ids delivered recently (synod_core::kit::dedup): a command ordered twice is skipped.
    pub(crate) recent: synod_core::kit::dedup::Window,
    /// The commit point and since when it has not moved; when NEED was last sent.
    pub(crate) stuck: (u64, TimeUs),
    pub(crate) need_sent_at: TimeUs,
    pub(crate) snap: Option<Snapshot>,
    pub(crate) transfer: Option<Transfer>,
    pub(crate) next_tick: TimeUs,
    /// Restored with a lost disk: this core does not take part (docs/protocols/mencius.md).
    pub(crate) mute: bool,
    pub(crate) reported: View,
    pub(crate) counters: Counters,
}

impl Mencius {
    pub(crate) fn id_of(&self, pos: usize) -> NodeId {
        self.cluster.members[pos]
    }

    pub(crate) fn pos_of(&self, id: NodeId) -> Option<usize> {
        self.cluster.members.iter().position(|&m| m == id)
    }

    /// The member (by position) that coordinates instance `i` (M1: round robin).
    pub fn owner(&self, i: u64) -> usize {
        (i % self.n) as usize
    }

    /// The first instance of `pos` at or after `i`.
    pub(crate) fn own_at_or_after(&self, pos: usize, i: u64) -> u64 {
        let r = i % self.n;
        let p = pos as u64;
        if r <= p {
            i - r + p
        } else {
            i - r + self.n + p
        }
    }

    /// The first instance of `pos` after `i`.
    pub(crate) fn own_after(&self, pos: usize, i: u64) -> u64 {
        self.own_at_or_after(pos, i + 1)
    }

    pub(crate) fn quorum(&self) -> usize {
        self.cluster.quorum()
    }

    pub(crate) fn peers(&self) -> impl Iterator<Item = usize> {
        let me = self.me;
        (0..self.n as usize).filter(move |&p| p != me)
    }

    pub(crate) fn persist(&mut self, op: StorageOp<Rec, Hard>, out: &mut MenciusActions) -> u64 {
        let hard = matches!(op, StorageOp::SetHard(_));
        let seq = self.issuer.issue(op, &mut out.persist);
        if hard {
            self.hard_seq = seq;
        }
        seq
    }

    pub(crate) fn save_hard(&mut self, out: &mut MenciusActions) -> u64 {
        self.collect_blocks();
        let h = self.hard.clone();
        self.persist(StorageOp::SetHard(h), out)
    }

    /// Send `body` to the member at `to` on its stream, once every storage op up to `after`
    /// (and the hard state) is durable. To itself, it waits in the loopback.
    pub(crate) fn send(&mut self, to: usize, body: Body, after: u64, out: &mut MenciusActions) {
        let after = after.max(self.hard_seq);
        if to == self.me {
            self.loopback.push((after, body));
            return;
        }
        self.streams_out[to] += 1;
        self.last_sent[to] = self.now;
        let msg = Msg {
            epoch: self.hard.incarnation,
            seq: self.streams_out[to],
            body,
        };
        out.send.push(Envelope {
            to: Dest::One(self.id_of(to)),
            msg,
            after_durable: after,
        });
    }

    pub(crate) fn broadcast(&mut self, body: Body, after: u64, out: &mut MenciusActions) {
        let peers: Vec<usize> = self.peers().collect();
        for p in peers {
            self.send(p, body.clone(), after, out);
        }
    }

    /// Whether `pos` is suspected (silent for longer than the timeout).
    pub(crate) fn suspected(&self, pos: usize) -> bool {
        pos != self.me
            && self.now.saturating_sub(self.last_heard[pos]) > self.opt.suspect_timeout_us
    }

    fn view_now(&self) -> View {
        if self.mute {
            return View::electing(0);
        }
        // The duty holder (session expiry): the lowest-id member this replica does not
        // suspect. Two replicas may name different holders while their detectors disagree;
        // duties are idempotent in the state machine (docs/protocols/mencius.md §9).
        let leader = (0..self.n as usize)
            .find(|&p| !self.suspected(p))
            .map(|p| self.id_of(p));
        View {
            role: Role::Proposer,
            leader,
            epoch: 0,
        }
    }

    fn report_view(&mut self, out: &mut MenciusActions) {
        let v = self.view_now();
        if v != self.reported {
            self.reported = v;
            out.events.push(Event::View(v));
        }
    }

    /// Raise the index to `to` (Rule 2, a revocation): own instances skipped on the way are
    /// decided no-ops here once the new index is durable (`skips_durable`). `justified` is the
    /// storage op that makes the new index derivable after a restart (a record at or beyond
    /// it); without one the hard state is written.
    pub(crate) fn raise_index(
        &mut self,
        to: u64,
        justified: Option<u64>,
        out: &mut MenciusActions,
    ) {
        if to <= self.index {
            return;
        }
        debug_assert_eq!(self.owner(to), self.me);
        self.index = to;
        match justified {
            Some(s) => {
                self.floor = to;
                self.floor_seq = self.floor_seq.max(s);
            }
            None => {
                self.hard.index = to;
                let s = self.save_hard(out);
                self.floor = to;
                self.floor_seq = s;
            }
        }
        self.note_skips();
    }

    /// The floor's justification is durable: its skips survive a restart.
    pub(crate) fn note_durable_floor(&mut self) {
        if self.floor_seq <= self.durable_upto {
            self.skips_durable = self.skips_durable.max(self.floor);
        }
    }

    fn on_timeout(&mut self, out: &mut MenciusActions) {
        if self.now < self.next_tick {
            return;
        }
        let tick = (self.opt.heartbeat_us.min(self.opt.tau_us) / 2).max(1_000);
        self.next_tick = self.now + tick;
        self.heartbeat(out);
        self.accelerate(out, false);
        self.resend_suggestions(out);
        self.stream_timers(out);
        self.catch_up(out);
        self.revoke_timers(out);
    }

    fn heartbeat(&mut self, out: &mut MenciusActions) {
        let peers: Vec<usize> = self.peers().collect();
        for p in peers {
            if self.now.saturating_sub(self.last_sent[p]) >= self.opt.heartbeat_us {
                self.send_skip(p, out);
            }
        }
    }

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut MenciusActions) {
        let Some(q) = self.pos_of(from) else {
            return;
        };
        if q == self.me {
            return;
        }
        self.last_heard[q] = self.now;
        let Some(in_sync) = self.follow(q, msg.epoch, msg.seq, out) else {
            return;
        };
        self.handle(q, msg.body, in_sync, out);
    }

    /// One message's body from member `q` (`in_sync`: skips may be inferred from it).
    pub(crate) fn handle(&mut self, q: usize, body: Body, in_sync: bool, out: &mut MenciusActions) {
        match body {
            Body::Suggest { instance, commands } => {
                self.on_suggest(q, instance, Some(commands), in_sync, out)
            }
            Body::Accept { instance } => self.on_accept(q, instance, in_sync, out),
            Body::Learn { instance } => self.on_learn(q, instance, out),
            Body::Skip { upto } => {
                if in_sync {
                    self.infer_skips(q, upto);
                }
            }
            Body::Prepare { ballot, range } => self.on_prepare(q, ballot, range, out),
            Body::Ack {
                ballot,
                range,
                values,
                noops,
            } => self.on_ack(q, ballot, range, values, noops, out),
            Body::Nack {
                ballot,
                range,
                promised,
            } => self.on_nack(q, ballot, range, promised, out),
            Body::Propose {
                ballot,
                range,
                values,
            } => self.on_propose(q, ballot, range, values, out),
            Body::Accepted { ballot, range } => self.on_accepted(q, ballot, range, out),
            Body::Decide { range, values } => self.learn_block(range, values, out),
            Body::Need { from } => self.on_need(q, from, out),
            Body::Learned { from, to, values } => self.on_learned(from, to, values, out),
            Body::SyncRequest { from } => self.on_sync_request(q, from, out),
            Body::Sync {
                from,
                upto,
                more,
                suggested,
            } => self.on_sync(q, from, upto, more, suggested, out),
            Body::SnapRequest { from, offset } => self.on_snap_request(q, from, offset, out),
            Body::SnapChunk {
                at,
                total,
                offset,
                data,
            } => self.on_snap_chunk(q, at, total, offset, data, out),
        }
    }

    fn on_durable(&mut self, upto: u64, out: &mut MenciusActions) {
        if upto <= self.durable_upto {
            return;
        }
        self.durable_upto = upto;
        self.note_durable_floor();
        // The owner's own accept of its suggestions counts once its record is durable.
        let me_bit = 1u64 << self.me;
        let own: Vec<u64> = self
            .inflight
            .iter()
            .copied()
            .filter(|i| {
                self.insts
                    .get(i)
                    .is_some_and(|x| x.seq <= upto && x.acks & me_bit == 0)
            })
            .collect();
        for i in own {
            if let Some(x) = self.insts.get_mut(&i) {
                x.acks |= me_bit;
            }
            self.check_chosen(i, out);
        }
        self.run_loopback(out);
    }

    /// Deliver to itself the replies its own acceptor made, once durable.
    pub(crate) fn run_loopback(&mut self, out: &mut MenciusActions) {
        loop {
            let upto = self.durable_upto;
            let Some(k) = self.loopback.iter().position(|(s, _)| *s <= upto) else {
                return;
            };
            let (_, body) = self.loopback.remove(k);
            self.handle(self.me, body, false, out);
        }
    }

    fn on_submit(&mut self, commands: Vec<Command>, out: &mut MenciusActions) {
        for c in commands {
            if self.mute || self.queue.len() >= self.opt.max_queued {
                self.counters.rejected += 1;
                out.events.push(Event::Rejected {
                    id: c.id,
                    reason: if self.mute {
                        synod_core::Reject::NoLeader
                    } else {
                        synod_core::Reject::Busy
                    },
                });
            } else {
                self.queue.push_back(c);
            }
        }
    }
}

impl Protocol for Mencius {
    type Options = Options;
    type Message = Msg;
    type Record = Rec;
    type Hard = Hard;

    fn restore(
        cluster: Cluster,
        opt: Options,
        durable: DurableState<Rec, Hard>,
        seed: u64,
    ) -> Self {
        let n = cluster.size() as u64;
        assert!(n <= 64, "Mencius counts acks in a 64-bit mask");
        let me = cluster
            .members
            .iter()
            .position(|&m| m == cluster.me)
            .expect("a member");
        let mut hard = durable.hard;
        let fresh = hard.incarnation == 0;
        hard.incarnation += 1;
        let mut m = Mencius {
            cluster,
            rng: CoreRng::new(seed),
            now: 0,
            me,
            n,
            hard,
            issuer: Default::default(),
            hard_seq: 0,
            durable_upto: 0,
            index: 0,
            floor: 0,
            floor_seq: 0,
            skips_durable: 0,
            insts: BTreeMap::new(),
            decided_blocks: Vec::new(),
            base: n,
            expected: n,
            slot: 0,
            resume_left: None,
            ooo: BTreeSet::new(),
            dirty: Vec::new(),
            est: Vec::new(),
            streams_out: vec![0; n as usize],
            streams_in: vec![StreamIn::default(); n as usize],
            told: vec![0; n as usize],
            skip_since: vec![None; n as usize],
            last_heard: vec![0; n as usize],
            last_sent: vec![0; n as usize],
            queue: VecDeque::new(),
            inflight: BTreeSet::new(),
            orphans: BTreeMap::new(),
            own_valued: 0,
            own_ids: synod_core::kit::dedup::Window::new(opt.dedup_memory),
            loopback: Vec::new(),
            revocations: BTreeMap::new(),
            revoke_backoff: BTreeMap::new(),
            round_seen: 0,
            recent: synod_core::kit::dedup::Window::new(opt.dedup_memory),
            stuck: (0, 0),
            need_sent_at: 0,
            snap: None,
            transfer: None,
            next_tick: 0,
            mute: durable.lost,
            reported: View::default(),
            counters: Counters::default(),
            opt,
        };
        // Where the snapshot leaves off (instances start at n: instance i < n is never used).
        if let Some(s) = &durable.snapshot {
            m.slot = s.at.slot;
            let (i, left) = (msg::tag_instance(s.at.tag), msg::tag_left(s.at.tag));
            if s.at.slot > 0 {
                if left == 0 {
                    m.expected = i + 1;
                } else {
                    m.expected = i;
                    m.resume_left = Some((i, left));
                }
            }
            m.snap = Some(s.clone());
        }
        m.expected = m.expected.max(n);
        m.base = m.expected;
        // The index: never below what the hard state, the records (an accept promises nothing
        // below its instance; an own record was suggested) and the snapshot justify.
        let mut index = m.own_at_or_after(me, m.hard.index.max(m.expected));
        for (&i, r) in &durable.records {
            if i < m.base {
                continue;
            }
            index = index.max(m.own_after(me, i));
            let x = m.insts.entry(i).or_default();
            x.accepted = Some((r.ballot, r.commands.clone()));
            x.own = r.own;
            x.suggested = r.ballot == 0 || r.own;
            if r.own {
                m.inflight.insert(i);
                for c in &r.commands {
                    m.note_own_id(c.id, i);
                }
            }
        }
        for b in m.hard.promises.clone() {
            if m.owner(b.range.to) == me {
                index = index.max(m.own_after(me, b.range.to));
            }
        }
        m.index = index;
        m.floor = index;
        m.skips_durable = index;
        m.decided_blocks = m.hard.decided.clone();
        m.est = (0..n as usize)
            .map(|p| {
                if p == me {
                    0
                } else {
                    m.own_at_or_after(p, m.expected)
                }
            })
            .collect();
        if fresh {
            // Nothing was ever sent: every stream starts in sync (see `follow`).
            m.est = (0..n as usize).map(|p| n + p as u64).collect();
            m.est[me] = 0;
        }
        m.told = vec![m.expected; n as usize];
        m
    }

    fn step(&mut self, now_us: TimeUs, input: Input<Msg>, out: &mut MenciusActions) {
        self.now = self.now.max(now_us);
        if let Input::Start = input {
            self.boot(out);
            return;
        }
        if self.mute {
            if let Input::Submit(cs) = input {
                self.on_submit(cs, out);
            }
            self.report_view(out);
            return;
        }
        match input {
            Input::Submit(cs) => self.on_submit(cs, out),
            Input::Message { from, msg } => self.on_message(from, msg, out),
            Input::Timeout => self.on_timeout(out),
            Input::Durable { upto } => self.on_durable(upto, out),
            Input::Disconnected { peer } => {
                if let Some(q) = self.pos_of(peer) {
                    self.streams_in[q].synced = false;
                }
            }
            Input::Compact(s) => self.on_compact(s, out),
            // Online configuration change is Zab's so far (docs/membership.md).
            Input::Reconfigure { command, .. } => out.events.push(synod_core::Event::Rejected {
                id: command.id,
                reason: synod_core::Reject::Config(synod_core::ConfigReject::Unsupported),
            }),
            Input::Start => {} // booted above
        }
        self.flush_queue(out);
        self.rule4(out);
        self.commit(out);
        self.accelerate(out, true);
        self.run_loopback(out);
        self.report_view(out);
    }

    fn deadline(&self) -> Option<TimeUs> {
        Some(self.next_tick)
    }

    fn view(&self) -> View {
        self.reported
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let c = &self.counters;
        vec![
            ("mencius_index", self.index as f64),
            ("mencius_expected", self.expected as f64),
            ("mencius_inflight", self.inflight.len() as f64),
            ("mencius_queued", self.queue.len() as f64),
            ("mencius_suggested", c.suggested as f64),
            ("mencius_skips_sent", c.skips_sent as f64),
            ("mencius_skips_inferred", c.skips_inferred as f64),
            ("mencius_revocations", c.revocations as f64),
            ("mencius_revoked_instances", c.revoked_instances as f64),
            ("mencius_resuggested", c.resuggested as f64),
            ("mencius_rejected", c.rejected as f64),
            ("mencius_out_of_order", c.out_of_order as f64),
            ("mencius_syncs", c.syncs as f64),
            ("mencius_catch_up", c.catch_up as f64),
            ("mencius_duplicates", c.duplicates as f64),
        ]
    }

    fn settled(views: &[View]) -> bool {
        synod_core::every_replica_proposes(views)
    }
}

impl Mencius {
    /// The first step of an incarnation ([`Input::Start`]): its number is durable before any
    /// message leaves
    /// (every message waits for the hard state), so a receiver tells this incarnation's stream
    /// from the last one's.
    fn boot(&mut self, out: &mut MenciusActions) {
        self.hard.index = self.hard.index.max(self.index);
        self.save_hard(out);
        self.floor_seq = self.hard_seq;
        self.next_tick = self.now;
        let now = self.now;
        for p in self.peers().collect::<Vec<_>>() {
            self.last_heard[p] = now;
        }
        self.report_view(out);
    }

    /// Drop hard-state blocks wholly below the log base. Not below the commit point: after a
    /// restart the replica starts again from its snapshot, and between the snapshot and the
    /// old commit point it is an acceptor again, bound by the promises it gave (a promise
    /// forgotten there would let a stale ballot-0 SUGGEST be accepted after a revocation).
    fn collect_blocks(&mut self) {
        let b = self.base;
        self.hard.promises.retain(|x| x.range.to >= b);
        self.hard.noops.retain(|x| x.range.to >= b);
        self.hard.decided.retain(|r| r.to >= b);
        let e = self.expected;
        self.decided_blocks.retain(|r| r.to >= e);
    }
}

//! The simulated world around the buckets: each bucket's replicated log (a [`Bucket`] holding
//! its committed state, fed in submission order after a replication delay) with a master that
//! can fail over, a lagging replica that serves some reads, the network between buckets and to
//! the clients, and the queue of events in virtual time (microseconds).
//!
//! What a master failure does, as the host's contract says (docs/contract.md §3): submissions
//! still being replicated survive only as a random prefix (applied by the new master, whose
//! emitted messages and replies are dropped: `pending()` covers the messages), submissions that
//! arrive while the bucket has no master are lost, and every message or reply the old master
//! sent that has not been delivered yet is lost. A new master re-sends `pending()` at once and
//! every master does so every second.

use crate::bucket::{Bucket, Entry};
use crate::txn::{Decided, Reply, TxnId};
use bytes::Bytes;
use imbl::OrdMap;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::{BTreeMap, VecDeque};

/// Delays and fault rates of the world (all times in microseconds of virtual time).
#[derive(Clone, Debug)]
pub struct NetCfg {
    /// From a submission reaching the master to its commit in the bucket's log.
    pub replicate_us: (u64, u64),
    /// One way between two buckets' masters.
    pub bucket_net_us: (u64, u64),
    /// One way between a client and a master.
    pub client_net_us: (u64, u64),
    /// How long a bucket has no master after its master fails.
    pub failover_us: (u64, u64),
    /// Every master re-sends its unacknowledged messages this often.
    pub resend_us: u64,
    /// How often the lagging replica's view of a bucket catches up.
    pub refresh_us: (u64, u64),
    /// Probability that a message (between buckets, or between a client and a bucket) is lost,
    /// during the fault window only.
    pub loss: f64,
    /// Probability that a message between buckets is delivered twice (at any time).
    pub dup: f64,
    /// Probability that a new message between buckets ignores its lane's order (the channels
    /// drop a message after a gap, so each costs a re-send period on its lane).
    pub reorder: f64,
    /// Probability that a client's message is slow (up to `slow_us`), during the fault window
    /// only: a commit may then arrive after the client gave up on it and aborted.
    pub slow: f64,
    pub slow_us: u64,
    /// How long a coordinator keeps a decision for retried commits (ids older than that are
    /// refused).
    pub retain_us: u64,
    /// Probability that a message or reply a failed master sent is still delivered (a deposed
    /// master's packets already on the wire); otherwise it is lost.
    pub zombie: f64,
}

impl Default for NetCfg {
    fn default() -> Self {
        NetCfg {
            replicate_us: (1_000, 5_000),
            bucket_net_us: (200, 10_000),
            client_net_us: (100, 2_000),
            failover_us: (50_000, 800_000),
            resend_us: 1_000_000,
            refresh_us: (1_000, 20_000),
            loss: 0.05,
            dup: 0.02,
            reorder: 0.0,
            slow: 0.01,
            slow_us: 1_000_000,
            retain_us: 3_600_000_000,
            zombie: 0.2,
        }
    }
}

impl NetCfg {
    /// Fixed delays, no loss and no duplicates: for scripted scenarios.
    pub fn fixed(replicate_us: u64, bucket_net_us: u64, client_net_us: u64) -> Self {
        NetCfg {
            replicate_us: (replicate_us, replicate_us),
            bucket_net_us: (bucket_net_us, bucket_net_us),
            client_net_us: (client_net_us, client_net_us),
            failover_us: (100_000, 100_000),
            resend_us: 1_000_000,
            refresh_us: (5_000, 5_000),
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            slow: 0.0,
            slow_us: 0,
            retain_us: 3_600_000_000,
            zombie: 0.0,
        }
    }
}

/// Who waits for the reply to a submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    pub client: u32,
    /// The client's request tag (replies to an older request are ignored by the client).
    pub tag: u64,
    /// The transaction a commit or abort is about: the master keeps the client as its waiter
    /// while the reply is `Pending`, and answers it when the bucket announces the decision.
    pub id: TxnId,
}

/// What the world hands to the clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// A client's timer fired.
    Wake { client: u32, tag: u64 },
    /// The reply to a submission (or the decision it waited for).
    Reply { client: u32, tag: u64, reply: Reply },
}

/// A fault injected into the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The bucket's master fails; a new one takes over after `down_us`, restored from a
    /// snapshot if `restore`.
    Failover {
        bucket: u32,
        down_us: u64,
        restore: bool,
    },
    /// The bucket's state is replaced by its snapshot (a replica restored from one takes over
    /// without losing anything).
    Restore { bucket: u32 },
}

#[derive(Clone, Debug)]
pub(super) enum Ev {
    /// The next submission of the bucket's pipeline commits (if the master is still `epoch`).
    Apply {
        bucket: u32,
        epoch: u64,
    },
    /// A submission reaches a bucket's master: from another bucket (its master's epoch when it
    /// sent it) or from a client.
    Arrive {
        to: u32,
        from: Option<(u32, u64)>,
        payload: Bytes,
        reply_to: Option<ReplyTo>,
    },
    /// A reply from a bucket's master (of `epoch`) reaches its client.
    ToClient {
        from: (u32, u64),
        client: u32,
        tag: u64,
        reply: Reply,
    },
    Up {
        bucket: u32,
    },
    Resend {
        bucket: u32,
        epoch: u64,
    },
    Refresh {
        bucket: u32,
    },
    Wake {
        client: u32,
        tag: u64,
    },
    Fault(Fault),
}

pub(super) struct Submission {
    pub(super) payload: Bytes,
    pub(super) reply_to: Option<ReplyTo>,
}

/// One bucket: its committed state, its master, its pipeline of submissions being replicated.
pub struct Node {
    pub bucket: Bucket,
    pub up: bool,
    /// Incremented at every master failure: what the old master sent is recognised as such.
    pub epoch: u64,
    /// The lagging replica's view of the committed keys.
    pub replica: OrdMap<Bytes, Entry>,
    pub(super) pipeline: VecDeque<Submission>,
    /// Commit time of the last submission in the pipeline (they commit in order).
    pub(super) tail: u64,
    /// Submissions that were being replicated when the master failed and made it into the log.
    pub(super) survivors: Vec<Submission>,
    pub(super) restore_on_up: bool,
    /// Clients waiting for a decision, kept by the master only (lost when it fails).
    pub(super) waiters: BTreeMap<TxnId, (u32, u64)>,
    /// After a restore from a snapshot: the state it was restored from, still applying every
    /// command, which must keep answering and emitting exactly what the restored state does.
    pub(super) shadow: Option<Bucket>,
}

/// Counters of what the world did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorldStats {
    pub applied: u64,
    pub failovers: u64,
    pub restores: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Messages a master sent to another bucket (re-sends included, stray copies not).
    pub messages: u64,
}

pub struct World {
    pub now: u64,
    pub rng: Xoshiro256PlusPlus,
    pub net: NetCfg,
    pub nodes: Vec<Node>,
    /// Messages are lost (with `net.loss`) only before this time.
    pub faulty_until: u64,
    /// Every decision a coordinator announced, and when (kept here whatever the buckets'
    /// retention: the truth about outcomes clients never heard).
    pub decisions: BTreeMap<TxnId, (Decided, u64)>,
    /// Problems found by the world itself (a snapshot that does not round-trip).
    pub violations: Vec<String>,
    pub stats: WorldStats,
    /// When a master last came up.
    pub last_up: u64,
    /// With `trace`, every command applied and every fault, in order (`log`).
    pub trace: bool,
    pub log: Vec<String>,
    /// The CPU cost model ([`super::cost`]), off if `None`; set it with [`World::set_cost`].
    pub cost: Option<super::cost::CostCfg>,
    /// The nodes' CPU queues, with the cost model.
    pub cpu: Option<super::cost::Cpu>,
    pub(super) queue: BTreeMap<(u64, u64), Ev>,
    pub(super) seq: u64,
    /// Deliveries and replies in flight (the world is quiet when none are).
    pub(super) in_flight: usize,
    /// The latest delivery time on each lane (from, to, resend): a lane is FIFO, like a
    /// connection; re-sends take their own lane, so they may overtake new messages and be
    /// overtaken by them.
    pub(super) lanes: BTreeMap<(u32, u32, bool), u64>,
}

impl World {
    pub fn new(buckets: u32, net: NetCfg, seed: u64) -> Self {
        let retain_us = net.retain_us;
        let mut w = World {
            now: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            net,
            nodes: (0..buckets)
                .map(|b| Node {
                    bucket: Bucket::new(b, buckets, retain_us),
                    up: true,
                    epoch: 0,
                    replica: OrdMap::new(),
                    pipeline: VecDeque::new(),
                    tail: 0,
                    survivors: Vec::new(),
                    restore_on_up: false,
                    waiters: BTreeMap::new(),
                    shadow: None,
                })
                .collect(),
            faulty_until: 0,
            decisions: BTreeMap::new(),
            violations: Vec::new(),
            stats: WorldStats::default(),
            last_up: 0,
            trace: false,
            log: Vec::new(),
            cost: None,
            cpu: None,
            queue: BTreeMap::new(),
            seq: 0,
            in_flight: 0,
            lanes: BTreeMap::new(),
        };
        for b in 0..buckets {
            let r = w.net.resend_us;
            w.schedule(
                r,
                Ev::Resend {
                    bucket: b,
                    epoch: 0,
                },
            );
            let d = w.between(w.net.refresh_us);
            w.schedule(d, Ev::Refresh { bucket: b });
        }
        w
    }

    /// Turn the CPU cost model on (or off with `None`), with idle nodes.
    pub fn set_cost(&mut self, cost: Option<super::cost::CostCfg>) {
        self.cpu = cost.as_ref().map(|c| super::cost::Cpu::new(c.nodes));
        self.cost = cost;
    }

    /// A uniform draw in `lo..=hi`.
    pub fn between(&mut self, (lo, hi): (u64, u64)) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.rng.next_u64() % (hi - lo + 1)
        }
    }

    pub fn rng_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    pub(super) fn schedule(&mut self, after: u64, ev: Ev) {
        if matches!(ev, Ev::Arrive { .. } | Ev::ToClient { .. }) {
            self.in_flight += 1;
        }
        self.seq += 1;
        self.queue.insert((self.now + after, self.seq), ev);
    }

    pub(super) fn lose(&mut self) -> bool {
        let lost = self.now < self.faulty_until && self.chance(self.net.loss);
        if lost {
            self.stats.lost += 1;
        }
        lost
    }

    /// A client's timer, `after` microseconds from now.
    pub fn wake(&mut self, client: u32, tag: u64, after: u64) {
        self.schedule(after, Ev::Wake { client, tag });
    }

    /// A fault, `after` microseconds from now.
    pub fn inject(&mut self, after: u64, fault: Fault) {
        self.schedule(after, Ev::Fault(fault));
    }

    /// A client sends `payload` to bucket `to` (it may be lost on the way).
    pub fn submit(&mut self, to: u32, payload: Bytes, reply_to: Option<ReplyTo>) {
        if self.lose() {
            return;
        }
        let copies = 1 + self.chance(self.net.dup) as usize;
        for _ in 0..copies {
            let mut d = self.between(self.net.client_net_us);
            if self.now < self.faulty_until && self.chance(self.net.slow) {
                d += self.between((0, self.net.slow_us));
            }
            self.schedule(
                d,
                Ev::Arrive {
                    to,
                    from: None,
                    payload: payload.clone(),
                    reply_to,
                },
            );
        }
    }

    /// Whether what the master of `bucket` sent in `epoch` is still delivered.
    pub(super) fn delivered(&mut self, bucket: u32, epoch: u64) -> bool {
        self.nodes[bucket as usize].epoch == epoch || self.chance(self.net.zombie)
    }

    /// What a client reading `key` of `bucket` gets: from the master's committed state, or from
    /// the lagging replica; `None` if it asked the master and there is none.
    pub fn read(&self, bucket: u32, key: &[u8], replica: bool) -> Option<(Option<Bytes>, u64)> {
        let n = &self.nodes[bucket as usize];
        if replica {
            Some(match n.replica.get(key) {
                Some(e) => (e.value.clone(), e.version),
                None => (None, 0),
            })
        } else if n.up {
            Some(n.bucket.read(key))
        } else {
            None
        }
    }

    /// Nothing in flight, every master up and idle.
    pub fn quiet(&self) -> bool {
        self.in_flight == 0
            && self
                .nodes
                .iter()
                .all(|n| n.up && n.pipeline.is_empty() && n.survivors.is_empty())
    }

    /// Every bucket has finished its transactions and had its messages acknowledged.
    pub fn settled(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.bucket.in_progress() == (0, 0) && n.bucket.busy_keys() == 0 && n.bucket.unacked() == 0
        })
    }

    /// Process events up to the next one for a client (returned), or until `until`.
    pub fn step(&mut self, until: u64) -> Option<ClientEvent> {
        while let Some(entry) = self.queue.first_entry() {
            let (at, _) = *entry.key();
            if at > until {
                break;
            }
            let ev = entry.remove();
            self.now = at;
            if let Some(ce) = self.handle(ev) {
                return Some(ce);
            }
        }
        self.now = self.now.max(until);
        None
    }

    fn handle(&mut self, ev: Ev) -> Option<ClientEvent> {
        match ev {
            Ev::Apply { bucket, epoch } => {
                let n = &mut self.nodes[bucket as usize];
                if n.epoch == epoch && n.up {
                    let s = n
                        .pipeline
                        .pop_front()
                        .expect("a submission per apply event");
                    self.apply(bucket, s, true);
                }
            }
            Ev::Arrive {
                to,
                from,
                payload,
                reply_to,
            } => {
                self.in_flight -= 1;
                if let Some((b, e)) = from {
                    if !self.delivered(b, e) {
                        return None; // its sender failed before it was delivered
                    }
                }
                // (Drawn before looking at the master, as without the cost model it always was.)
                let drawn = self
                    .cost
                    .is_none()
                    .then(|| self.between(self.net.replicate_us));
                if !self.nodes[to as usize].up {
                    return None;
                }
                let d = match drawn {
                    Some(d) => d,
                    None => self
                        .commit_delay(to, &payload)
                        .expect("the cost model is on"),
                };
                let n = &mut self.nodes[to as usize];
                n.tail = n.tail.max(self.now + d);
                n.pipeline.push_back(Submission { payload, reply_to });
                let (after, epoch) = (n.tail - self.now, n.epoch);
                self.schedule(after, Ev::Apply { bucket: to, epoch });
            }
            Ev::ToClient {
                from,
                client,
                tag,
                reply,
            } => {
                self.in_flight -= 1;
                if self.delivered(from.0, from.1) {
                    return Some(ClientEvent::Reply { client, tag, reply });
                }
            }
            Ev::Up { bucket } => self.master_up(bucket),
            Ev::Resend { bucket, epoch } => {
                if self.nodes[bucket as usize].epoch == epoch {
                    self.resend(bucket);
                    let r = self.net.resend_us;
                    self.schedule(r, Ev::Resend { bucket, epoch });
                }
            }
            Ev::Refresh { bucket } => {
                let n = &mut self.nodes[bucket as usize];
                n.replica = n.bucket.store();
                let d = self.between(self.net.refresh_us);
                self.schedule(d, Ev::Refresh { bucket });
            }
            Ev::Wake { client, tag } => return Some(ClientEvent::Wake { client, tag }),
            Ev::Fault(f) => self.fault(f),
        }
        None
    }
}

impl super::env::ClientEnv for World {
    fn now(&self) -> u64 {
        self.now
    }
    fn rng_u64(&mut self) -> u64 {
        World::rng_u64(self)
    }
    fn between(&mut self, r: (u64, u64)) -> u64 {
        World::between(self, r)
    }
    fn chance(&mut self, p: f64) -> bool {
        World::chance(self, p)
    }
    fn wake(&mut self, client: u32, tag: u64, after: u64) {
        World::wake(self, client, tag, after)
    }
    fn submit(&mut self, to: u32, payload: Bytes, reply_to: Option<ReplyTo>) {
        World::submit(self, to, payload, reply_to)
    }
    fn client_net_us(&self) -> (u64, u64) {
        self.net.client_net_us
    }
    fn serve_read(&mut self, bucket: u32) -> Option<u64> {
        World::serve_read(self, bucket)
    }
    fn costed(&self) -> bool {
        self.cost.is_some()
    }
    fn master_up(&self, bucket: u32) -> bool {
        self.nodes[bucket as usize].up
    }
    fn read(&mut self, bucket: u32, key: &[u8], replica: bool) -> Option<(Option<Bytes>, u64)> {
        World::read(self, bucket, key, replica)
    }
}

impl super::env::StoreView for World {
    fn now(&self) -> u64 {
        self.now
    }
    fn buckets(&self) -> u32 {
        self.nodes.len() as u32
    }
    fn decision(&self, id: &TxnId) -> Option<(Decided, u64)> {
        self.decisions.get(id).cloned()
    }
    fn bucket(&self, b: u32) -> Option<Bucket> {
        self.nodes.get(b as usize).map(|n| n.bucket.clone())
    }
    fn retain_us(&self) -> u64 {
        self.net.retain_us
    }
    fn violations(&self) -> Vec<String> {
        self.violations.clone()
    }
    fn stats(&self) -> WorldStats {
        self.stats
    }
    fn master_up(&self, b: u32) -> bool {
        self.nodes[b as usize].up
    }
}

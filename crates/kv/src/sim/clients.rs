//! The simulated clients: closed loops of transactions over a small key space, each recorded
//! for the checker as it happened from the client's side.
//!
//! A transaction reads keys (from the bucket's master or from its lagging replica), buffers its
//! writes and deletes, reads its own writes from the buffer (those reads are not recorded: the
//! store never saw them), and commits at its coordinator bucket (the lowest bucket it touches)
//! with, for every key, the version it first observed. A commit without an answer is sent again
//! after a timeout (the same id: the bucket answers a retry with its decision); after a few
//! tries the client sends an abort, and if that is not answered either it records the outcome
//! as unknown. A write or delete of a key the transaction has not read is, some of the time,
//! blind (no version fetched, none validated: the decision reports the version it installed).
//! Single-key operations are one-op commits: a blind put or delete, or a compare-and-set (a
//! read, then a write of the version read).

use super::env::ClientEnv;
use super::scaling;
use super::world::{ClientEvent, ReplyTo};
use crate::route::bucket_of;
use crate::txn::{Cmd, Op, OpKind, Outcome, Reply, TxnId};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use synod_core::wire::Wire;

/// What the clients do.
#[derive(Clone, Debug)]
pub struct Workload {
    pub clients: u32,
    /// Keys `k0..k{keys}`: few, so that transactions contend.
    pub keys: u32,
    /// Zipf exponent of the key choice (0: uniform).
    pub zipf: f64,
    /// Transactions per client.
    pub txns: usize,
    /// Operations per transaction: 1..=max_ops.
    pub max_ops: usize,
    /// Relative weights of reads, writes and deletes in a transaction.
    pub mix: (u32, u32, u32),
    /// Fraction of single-key operations (blind put 40%, blind delete 20%, CAS 40%).
    pub single: f64,
    /// Probability that a transaction's write or delete of a key it has not read is blind
    /// (otherwise the client fetches the key's version first).
    pub blind: f64,
    /// Fraction of reads served by the lagging replica.
    pub replica_reads: f64,
    /// Pause between a transaction's end and the next one.
    pub think_us: (u64, u64),
    /// A read from a master that does not answer is tried again after this.
    pub read_timeout_us: u64,
    /// A commit or abort without an answer is sent again after this.
    pub commit_timeout_us: u64,
    /// Commits sent before the client gives up and aborts.
    pub commit_tries: u32,
    /// Aborts sent before the client records the outcome as unknown.
    pub abort_tries: u32,
    /// Largest offset of a client's clock (transaction ids carry the client's time, and the
    /// oldest id wins a conflict).
    pub clock_skew_us: u64,
    /// The shape of the scaling experiment ([`super::scaling`]) if `Some(p)`: every
    /// transaction that is not a single-key operation has exactly `max_ops` distinct keys
    /// (uniform, `zipf` ignored), spanning two buckets (half in each) with probability `p`,
    /// else all in one bucket. `None` (the default): keys drawn independently.
    pub cross: Option<f64>,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            clients: 8,
            keys: 12,
            zipf: 0.0,
            txns: 60,
            max_ops: 5,
            mix: (5, 4, 1),
            single: 0.25,
            blind: 0.3,
            replica_reads: 0.2,
            think_us: (0, 20_000),
            read_timeout_us: 50_000,
            commit_timeout_us: 200_000,
            commit_tries: 3,
            abort_tries: 2,
            clock_skew_us: 20_000,
            cross: None,
        }
    }
}

/// One operation as the client recorded it; keys are indices into the key space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ROp {
    Read {
        key: u32,
        version: u64,
        value: Option<u64>,
    },
    /// `read_version`: the version the write was validated against; `None` for a blind write
    /// (it is the installed version minus one, known from the decision).
    Write {
        key: u32,
        value: u64,
        read_version: Option<u64>,
    },
    Delete {
        key: u32,
        read_version: Option<u64>,
    },
}

/// One transaction as the client saw it.
#[derive(Clone, Debug)]
pub struct Record {
    /// Its id in the history: `(client + 1) * 1_000_000 + n` for the client's `n`th
    /// transaction (T3000017 is client 2's 17th).
    pub hid: u64,
    pub id: TxnId,
    pub client: u32,
    pub coordinator: u32,
    /// Buckets touched.
    pub buckets: usize,
    /// `None`: the client never learnt the outcome.
    pub status: Option<Outcome>,
    /// The decision's versions of the keys of `order` (empty unless it heard a commit).
    pub versions: Vec<u64>,
    /// The keys of the commit in the order of its ops (parts in bucket order).
    pub order: Vec<u32>,
    pub ops: Vec<ROp>,
    pub begin_us: u64,
    pub end_us: u64,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Read(u32),
    Write(u32),
    Delete(u32),
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    Read { key: u32, replica: bool },
    Commit { tries: u32 },
    Abort { tries: u32 },
}

struct Active {
    id: TxnId,
    begin: u64,
    plan: VecDeque<Step>,
    /// Keys written or deleted without reading them.
    blind: BTreeSet<u32>,
    /// The version first observed of each key.
    observed: BTreeMap<u32, u64>,
    /// Buffered writes (`Some`) and deletes (`None`).
    buffer: BTreeMap<u32, Option<u64>>,
    reads: Vec<ROp>,
    phase: Phase,
    /// With the cost model: the current read from a master has been queued there (its timer
    /// is now the answer's arrival).
    served: bool,
    coordinator: u32,
    buckets: usize,
    order: Vec<u32>,
    commit: Bytes,
}

#[derive(Default)]
struct Client {
    /// Timer generation: a timer set before the latest one is ignored.
    timer: u64,
    /// Added to the true time for its transaction ids.
    clock: u64,
    /// The time of its last transaction id (ids never go back).
    last_time: u64,
    txns: u64,
    writes: u64,
    done: usize,
    cur: Option<Active>,
}

pub struct Clients {
    cfg: Workload,
    buckets: u32,
    pub keys: Vec<Bytes>,
    cdf: Vec<f64>,
    /// With [`Workload::cross`]: each bucket's keys.
    by_bucket: Vec<Vec<u32>>,
    clients: Vec<Client>,
    pub records: Vec<Record>,
    /// Refusals: the transaction, when, why.
    pub refused: Vec<(TxnId, u64, String)>,
}

pub fn key_name(k: u32) -> String {
    format!("k{k}")
}

pub fn value_of(v: &Option<Bytes>) -> Option<u64> {
    v.as_ref()
        .map(|b| u64::from_be_bytes(b[..].try_into().expect("8-byte values")))
}

impl Clients {
    pub fn new(cfg: &Workload, buckets: u32) -> Self {
        let weights: Vec<f64> = (0..cfg.keys)
            .map(|i| 1.0 / ((i + 1) as f64).powf(cfg.zipf))
            .collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        let keys: Vec<Bytes> = (0..cfg.keys).map(|k| Bytes::from(key_name(k))).collect();
        let by_bucket = cfg
            .cross
            .map_or(Vec::new(), |_| scaling::by_bucket(&keys, buckets));
        Clients {
            cfg: cfg.clone(),
            buckets,
            keys,
            cdf,
            by_bucket,
            clients: (0..cfg.clients).map(|_| Client::default()).collect(),
            records: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// Every client begins after a first pause.
    pub fn start(&mut self, w: &mut impl ClientEnv) {
        for c in 0..self.cfg.clients {
            self.clients[c as usize].clock = w.between((0, 2 * self.cfg.clock_skew_us));
            let d = w.between(self.cfg.think_us);
            self.timer(c, w, d);
        }
    }

    pub fn done(&self) -> bool {
        self.clients
            .iter()
            .all(|c| c.done >= self.cfg.txns && c.cur.is_none())
    }

    pub fn bucket(&self, k: u32) -> u32 {
        bucket_of(&self.keys[k as usize], self.buckets)
    }

    fn timer(&mut self, c: u32, w: &mut impl ClientEnv, after: u64) {
        let cl = &mut self.clients[c as usize];
        cl.timer += 1;
        w.wake(c, cl.timer, after);
    }

    fn pick_key(&self, w: &mut impl ClientEnv) -> u32 {
        let u = (w.rng_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf
            .partition_point(|&p| p <= u)
            .min(self.cdf.len() - 1) as u32
    }

    pub fn handle(&mut self, ev: ClientEvent, w: &mut impl ClientEnv) {
        match ev {
            ClientEvent::Wake { client, tag } => {
                if self.clients[client as usize].timer != tag {
                    return;
                }
                match self.clients[client as usize].cur.as_ref().map(|a| a.phase) {
                    None if self.clients[client as usize].done < self.cfg.txns => {
                        self.begin(client, w)
                    }
                    None => {}
                    Some(Phase::Read { key, replica }) => self.read_done(client, key, replica, w),
                    Some(Phase::Commit { tries }) => {
                        if tries < self.cfg.commit_tries {
                            self.send_commit(client, tries + 1, w);
                        } else {
                            self.send_abort(client, 1, w);
                        }
                    }
                    Some(Phase::Abort { tries }) => {
                        if tries < self.cfg.abort_tries {
                            self.send_abort(client, tries + 1, w);
                        } else {
                            self.finish(client, None, Vec::new(), w);
                        }
                    }
                }
            }
            ClientEvent::Reply { client, tag, reply } => {
                let Some(a) = self.clients[client as usize].cur.as_ref() else {
                    return;
                };
                if a.id.node != tag || matches!(a.phase, Phase::Read { .. }) {
                    return; // a late answer about an earlier transaction
                }
                match reply {
                    Reply::Decided(d) => self.finish(client, Some(d.outcome), d.versions, w),
                    // The coordinator holds the transaction (deciding it, or waiting for its
                    // participants to apply a commit): it is alive, so wait on without
                    // spending a try.
                    Reply::Pending => {
                        if let Some(a) = self.clients[client as usize].cur.as_mut() {
                            a.phase = match a.phase {
                                Phase::Commit { .. } => Phase::Commit { tries: 0 },
                                Phase::Abort { .. } => Phase::Abort { tries: 0 },
                                p => p,
                            };
                        }
                    }
                    Reply::Internal => {}
                    Reply::Refused(why) => {
                        self.refused.push((a.id, w.now(), why));
                        self.finish(client, None, Vec::new(), w);
                    }
                }
            }
        }
    }

    fn begin(&mut self, c: u32, w: &mut impl ClientEnv) {
        let cl = &mut self.clients[c as usize];
        cl.txns += 1;
        // Its clock: the true time plus its offset (0..=2 * skew: the clients' clocks are up
        // to 2 * skew apart, which is what decides who is older).
        let time = (w.now() + cl.clock).max(cl.last_time + 1);
        cl.last_time = time;
        let id = TxnId {
            time,
            node: (c as u64) << 32 | cl.txns,
        };
        let mut plan = VecDeque::new();
        let mut buffer = BTreeMap::new();
        let mut blind = BTreeSet::new();
        if w.chance(self.cfg.single) {
            let k = self.pick_key(w);
            match w.between((0, 9)) {
                0..=3 => {
                    blind.insert(k);
                    let v = self.next_value(c);
                    buffer.insert(k, Some(v));
                }
                4..=5 => {
                    blind.insert(k);
                    buffer.insert(k, None);
                }
                _ => {
                    plan.push_back(Step::Read(k));
                    plan.push_back(Step::Write(k));
                }
            }
        } else {
            let spread = (self.cfg.cross)
                .map(|p| scaling::spread(&self.by_bucket, self.cfg.max_ops.max(1), p, w))
                .filter(|keys| !keys.is_empty());
            let n = match &spread {
                Some(keys) => keys.len() as u64,
                None => w.between((1, self.cfg.max_ops as u64)),
            };
            let (r, wr, d) = self.cfg.mix;
            for i in 0..n as usize {
                let k = match &spread {
                    Some(keys) => keys[i],
                    None => self.pick_key(w),
                };
                let x = w.between((0, (r + wr + d).max(1) as u64 - 1)) as u32;
                plan.push_back(if x < r {
                    Step::Read(k)
                } else if x < r + wr {
                    Step::Write(k)
                } else {
                    Step::Delete(k)
                });
            }
        }
        self.clients[c as usize].cur = Some(Active {
            id,
            begin: w.now(),
            plan,
            blind,
            observed: BTreeMap::new(),
            buffer,
            reads: Vec::new(),
            phase: Phase::Commit { tries: 0 },
            served: false,
            coordinator: 0,
            buckets: 0,
            order: Vec::new(),
            commit: Bytes::new(),
        });
        self.advance(c, w);
    }

    fn next_value(&mut self, c: u32) -> u64 {
        let cl = &mut self.clients[c as usize];
        cl.writes += 1;
        (c as u64) << 32 | cl.writes
    }

    /// Run the plan until it needs a read from the store, then commit.
    fn advance(&mut self, c: u32, w: &mut impl ClientEnv) {
        loop {
            let a = self.clients[c as usize].cur.as_mut().expect("active");
            let Some(step) = a.plan.front().copied() else {
                break;
            };
            match step {
                Step::Read(k) if a.buffer.contains_key(&k) || a.observed.contains_key(&k) => {
                    a.plan.pop_front(); // read-your-writes, or a repeated read: from the client
                }
                Step::Write(k) | Step::Delete(k)
                    if a.blind.contains(&k)
                        || a.observed.contains_key(&k)
                        || (w.chance(self.cfg.blind) && a.blind.insert(k)) =>
                {
                    a.plan.pop_front();
                    let v = match step {
                        Step::Write(_) => Some(self.next_value(c)),
                        _ => None,
                    };
                    let a = self.clients[c as usize].cur.as_mut().expect("active");
                    a.buffer.insert(k, v);
                }
                Step::Read(k) | Step::Write(k) | Step::Delete(k) => {
                    let replica = w.chance(self.cfg.replica_reads);
                    self.start_read(c, k, replica, w);
                    return;
                }
            }
        }
        self.build_commit(c);
        self.send_commit(c, 1, w);
    }

    fn start_read(&mut self, c: u32, key: u32, replica: bool, w: &mut impl ClientEnv) {
        let a = self.clients[c as usize].cur.as_mut().expect("active");
        a.phase = Phase::Read { key, replica };
        a.served = false;
        // With the cost model, a read from a master: until it reaches the master (read_done).
        let back = !w.costed() || replica;
        let net = w.client_net_us();
        let rtt = w.between(net) + back as u64 * w.between(net);
        self.timer(c, w, rtt);
    }

    fn read_done(&mut self, c: u32, key: u32, replica: bool, w: &mut impl ClientEnv) {
        let b = self.bucket(key);
        let a = self.clients[c as usize].cur.as_mut().expect("active");
        if !replica && !a.served && w.master_up(b) {
            if let Some(served) = w.serve_read(b) {
                // The cost model: the read reached the master now, waits for its CPU, and the
                // answer (the state when it arrives back) travels back.
                a.served = true;
                let net = w.client_net_us();
                let back = w.between(net);
                self.timer(c, w, served + back);
                return;
            }
        }
        let Some((value, version)) = w.read(b, &self.keys[key as usize], replica) else {
            // No master answered: try again, perhaps from the replica.
            let a = self.clients[c as usize].cur.as_mut().expect("active");
            a.phase = Phase::Read {
                key,
                replica: w.chance(0.5),
            };
            a.served = false;
            let t = self.cfg.read_timeout_us;
            self.timer(c, w, t);
            return;
        };
        let a = self.clients[c as usize].cur.as_mut().expect("active");
        a.observed.insert(key, version);
        if let Some(Step::Read(_)) = a.plan.front() {
            a.plan.pop_front();
            a.reads.push(ROp::Read {
                key,
                version,
                value: value_of(&value),
            });
        }
        self.advance(c, w);
    }

    fn build_commit(&mut self, c: u32) {
        let buckets = self.buckets;
        let keys = &self.keys; // (borrowed: a clone per commit is costly with many keys)
        let a = self.clients[c as usize].cur.as_mut().expect("active");
        let mut parts: BTreeMap<u32, Vec<(u32, Op)>> = BTreeMap::new();
        let mut all: BTreeMap<u32, Op> = BTreeMap::new();
        for (&k, &version) in &a.observed {
            all.insert(
                k,
                Op {
                    key: keys[k as usize].clone(),
                    kind: OpKind::Read,
                    version,
                    value: Bytes::new(),
                    blind: false,
                },
            );
        }
        for (&k, v) in &a.buffer {
            let op = all.entry(k).or_insert_with(|| Op {
                key: keys[k as usize].clone(),
                kind: OpKind::Read,
                version: 0,
                value: Bytes::new(),
                blind: true,
            });
            match v {
                Some(v) => {
                    op.kind = OpKind::Write;
                    op.value = Bytes::copy_from_slice(&v.to_be_bytes());
                }
                None => op.kind = OpKind::Delete,
            }
        }
        for (k, op) in all {
            parts
                .entry(bucket_of(&keys[k as usize], buckets))
                .or_default()
                .push((k, op));
        }
        a.order = parts.values().flatten().map(|(k, _)| *k).collect();
        let parts: Vec<(u32, Vec<Op>)> = parts
            .into_iter()
            .map(|(b, ops)| (b, ops.into_iter().map(|(_, op)| op).collect()))
            .collect();
        a.coordinator = parts[0].0;
        a.buckets = parts.len();
        a.commit = Cmd::Commit { id: a.id, parts }.to_bytes();
    }

    fn send_commit(&mut self, c: u32, tries: u32, w: &mut impl ClientEnv) {
        let a = self.clients[c as usize].cur.as_mut().expect("active");
        a.phase = Phase::Commit { tries };
        let rt = ReplyTo {
            client: c,
            tag: a.id.node,
            id: a.id,
        };
        w.submit(a.coordinator, a.commit.clone(), Some(rt));
        let t = self.cfg.commit_timeout_us;
        self.timer(c, w, t);
    }

    fn send_abort(&mut self, c: u32, tries: u32, w: &mut impl ClientEnv) {
        let a = self.clients[c as usize].cur.as_mut().expect("active");
        a.phase = Phase::Abort { tries };
        let rt = ReplyTo {
            client: c,
            tag: a.id.node,
            id: a.id,
        };
        w.submit(a.coordinator, Cmd::Abort { id: a.id }.to_bytes(), Some(rt));
        let t = self.cfg.commit_timeout_us;
        self.timer(c, w, t);
    }

    fn finish(
        &mut self,
        c: u32,
        status: Option<Outcome>,
        versions: Vec<u64>,
        w: &mut impl ClientEnv,
    ) {
        let cl = &mut self.clients[c as usize];
        let a = cl.cur.take().expect("active");
        cl.done += 1;
        cl.timer += 1; // the transaction's timers are void
        let mut ops = a.reads;
        for (&k, v) in &a.buffer {
            let read_version = (!a.blind.contains(&k)).then(|| a.observed[&k]);
            ops.push(match v {
                Some(value) => ROp::Write {
                    key: k,
                    value: *value,
                    read_version,
                },
                None => ROp::Delete {
                    key: k,
                    read_version,
                },
            });
        }
        self.records.push(Record {
            hid: (c as u64 + 1) * 1_000_000 + (a.id.node & 0xffff_ffff),
            id: a.id,
            client: c,
            coordinator: a.coordinator,
            buckets: a.buckets,
            status,
            versions,
            order: a.order,
            ops,
            begin_us: a.begin,
            end_us: w.now(),
        });
        if self.clients[c as usize].done < self.cfg.txns {
            let d = w.between(self.cfg.think_us);
            self.timer(c, w, d);
        }
    }
}

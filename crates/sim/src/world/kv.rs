//! The SconeKV app ([`crate::App::Kv`]): every group is a bucket (synod_kv::KvMachine) on real
//! cores, under the simulator's faults. SconeKV's own transactional clients
//! (synod_kv::sim::clients) run against it through [`KvEnv`]: a read goes to a bucket's
//! leader (or, some of the time, to another replica: a lagging read), a commit or abort is a
//! command submitted at the node the client believes leads the coordinator's bucket, and a
//! `Pending` answer leaves the client waiting there for the decision, as the server's KV
//! service does. Two-phase commit crosses between bucket groups through the hosts.
//!
//! At the end SconeKV's checkers (synod_kv::sim::check) read the outcomes each coordinator
//! decided and every bucket's final state: serializability of the history, atomicity,
//! agreement of outcomes, and liveness once the faults healed.

use super::node::Shared;
use super::{Ev, Token, World};
use crate::check::Checker;
use crate::KvApp;
use bytes::Bytes;
use rand_core::RngCore;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use synod_core::wire::Wire;
use synod_core::GroupId;
use synod_host::{Hosted, SubmitResult};
use synod_kv::sim::clients::Clients;
use synod_kv::sim::env::{ClientEnv, StoreView};
use synod_kv::sim::world::{ClientEvent, ReplyTo, WorldStats};
use synod_kv::sim::{KvReport, KvSweep, Plant};
use synod_kv::{Bucket, Decided, KvMachine, Reply, TxnId};

/// A client's command on its way to a node.
pub(super) struct Arrival {
    node: usize,
    bucket: u32,
    payload: Bytes,
    reply_to: Option<ReplyTo>,
}

/// The app's state beside the world.
pub(super) struct KvWorld {
    /// Out while they handle an event.
    clients: Option<Clients>,
    /// Every decision applied anywhere, with when it was first applied.
    decisions: BTreeMap<TxnId, (Decided, u64)>,
    /// Clients waiting at a node for the decision of a transaction: (node, bucket, id) → (client,
    /// tag). They die with the node.
    waiters: BTreeMap<(usize, u32, TxnId), (u32, u64)>,
    violations: Vec<String>,
    retain_us: u64,
    crashes: u64,
}

impl KvWorld {
    pub(super) fn new(app: &KvApp, buckets: u32) -> Self {
        KvWorld {
            clients: Some(Clients::new(&app.workload, buckets)),
            decisions: BTreeMap::new(),
            waiters: BTreeMap::new(),
            violations: Vec::new(),
            retain_us: app.retain_us,
            crashes: 0,
        }
    }
}

/// Bucket `b` of `buckets` as group `b`'s machine, keeping its decisions for the checkers.
pub(super) fn machine(app: &KvApp, b: u32, buckets: u32) -> Arc<Mutex<KvMachine>> {
    let mut m = KvMachine::new(b, buckets, 0, app.retain_us);
    m.keep_decisions();
    match app.plant {
        Plant::None => {}
        Plant::ResetOnDelete => m.bucket_mut().plant_reset_on_delete(),
        Plant::SkipReadValidation => m.bucket_mut().plant_skip_read_validation(),
    }
    Arc::new(Mutex::new(m))
}

/// The kv machine of node `i`'s replica of group `g`, behind the recorder.
pub(super) fn shared(m: &Arc<Mutex<KvMachine>>) -> Box<Shared<KvMachine>> {
    Box::new(Shared(m.clone()))
}

impl<P: Hosted> World<P> {
    /// Start the transactional clients.
    pub(super) fn kv_start(&mut self) {
        let Some(mut clients) = self.kv.as_mut().and_then(|k| k.clients.take()) else {
            return;
        };
        clients.start(&mut KvEnv(self));
        self.kv.as_mut().expect("kv").clients = Some(clients);
    }

    /// A transactional client's timer or reply.
    pub(super) fn kv_client(&mut self, ev: ClientEvent) {
        let Some(mut clients) = self.kv.as_mut().and_then(|k| k.clients.take()) else {
            return;
        };
        clients.handle(ev, &mut KvEnv(self));
        self.kv.as_mut().expect("kv").clients = Some(clients);
    }

    /// A client's command arrives at a node.
    pub(super) fn kv_arrive(&mut self, a: Arrival) {
        let Arrival {
            node: i,
            bucket: b,
            payload,
            reply_to: to,
        } = a;
        if !self.nodes[i].up {
            return; // lost with the node: the client tries again
        }
        let now = self.local_now(i);
        self.with_host(i, |h| {
            let _ = h.submit(now, b as GroupId, payload, Token::Kv(to, b));
        });
    }

    /// Node `i` answered a client's command to bucket `b`.
    pub(super) fn kv_reply(&mut self, i: usize, to: Option<ReplyTo>, b: u32, result: SubmitResult) {
        let Ok(applied) = result else {
            return; // refused (no leader, busy): the client's timer sends it again
        };
        // Whoever waits for it, an answer must be true.
        let (now, node) = (self.now, self.nodes[i].id);
        self.histories[b as usize].acknowledged(now, node, applied.id, applied.at.slot);
        self.acknowledged.push((b as usize, applied.id));
        let Some(rt) = to else {
            return;
        };
        let reply = match Reply::from_bytes(applied.result.clone()) {
            Ok(r) => r,
            Err(e) => {
                let now = self.now;
                self.histories[0].violate(
                    Checker::Codec,
                    now,
                    format!("a bucket's reply does not decode: {e}"),
                );
                return;
            }
        };
        if reply == Reply::Pending {
            if let Some(k) = self.kv.as_mut() {
                k.waiters.insert((i, b, rt.id), (rt.client, rt.tag));
            }
        }
        self.kv_to_client(rt.client, rt.tag, reply);
    }

    /// Send `reply` to a client, after the network's one-way delay.
    fn kv_to_client(&mut self, client: u32, tag: u64, reply: Reply) {
        let d = self.rand_between(self.cfg.net.latency_min_us, self.cfg.net.latency_max_us);
        let at = self.now + d;
        self.at(
            at,
            Ev::Kv(Box::new(ClientEvent::Reply { client, tag, reply })),
        );
    }

    /// Read what node `i`'s buckets decided since the last look: each decision is recorded
    /// (and must agree with every other replica's), and the clients waiting for it here are
    /// answered.
    pub(super) fn kv_decisions(&mut self, i: usize) {
        if self.kv.is_none() {
            return;
        }
        let mut found = Vec::new();
        for (b, m) in self.nodes[i].groups.iter().enumerate() {
            if let Some(kv) = &m.kv {
                for (id, d) in kv.lock().expect("kv").take_decided() {
                    found.push((b as u32, id, d));
                }
            }
        }
        let now = self.now;
        for (b, id, d) in found {
            let k = self.kv.as_mut().expect("kv");
            match k.decisions.get(&id) {
                Some((first, _)) if *first != d => {
                    let detail = format!(
                        "{id}: n{} decided {:?} {:?} at bucket {b}, {:?} {:?} was decided before",
                        i + 1,
                        d.outcome,
                        d.versions,
                        first.outcome,
                        first.versions
                    );
                    self.histories[b as usize].violate(Checker::CrossGroup, now, detail);
                }
                Some(_) => {}
                None => {
                    k.decisions.insert(id, (d.clone(), now));
                }
            }
            let k = self.kv.as_mut().expect("kv");
            if let Some((client, tag)) = k.waiters.remove(&(i, b, id)) {
                self.kv_to_client(client, tag, Reply::Decided(d));
            }
        }
    }

    /// Node `i` crashed: the clients waiting there are forgotten (they try again).
    pub(super) fn kv_crashed(&mut self, i: usize) {
        if let Some(k) = self.kv.as_mut() {
            k.waiters.retain(|(n, _, _), _| *n != i);
            k.crashes += 1;
        }
    }

    /// The transactional clients are done, and every bucket finished its transactions and had
    /// its messages acknowledged (true without the app).
    pub(super) fn kv_quiet(&self) -> bool {
        let Some(k) = &self.kv else {
            return true;
        };
        k.clients.as_ref().is_some_and(|c| c.done()) && synod_kv::sim::check::settled(&KvView(self))
    }

    /// SconeKV's checks at the end of a run; their findings are the report's.
    pub(super) fn kv_checks(&mut self) {
        let Some(k) = &self.kv else {
            return;
        };
        let Some(clients) = k.clients.as_ref() else {
            return;
        };
        let stable_at = self.stable_at.unwrap_or(self.now);
        let mut r: KvReport = synod_kv::sim::check::check(&KvView(self), clients, stable_at);
        r.seed = self.cfg.seed;
        let now = self.now;
        for a in r.anomalies.iter().chain(&r.violations) {
            self.histories[0].violate(Checker::CrossGroup, now, format!("sconekv: {a}"));
        }
        let mut sweep = KvSweep::default();
        sweep.add(r);
        self.report.kv = Some(sweep);
    }

    /// The node that leads bucket `b` in the eyes of most replicas, if it is up.
    fn kv_leader(&self, b: usize) -> Option<usize> {
        let mut votes: BTreeMap<u32, usize> = BTreeMap::new();
        for n in self.nodes.iter().filter(|n| n.up) {
            if let Some(l) = n.groups[b].leader {
                *votes.entry(l).or_default() += 1;
            }
        }
        let (&id, _) = votes
            .iter()
            .max_by_key(|(id, c)| (**c, std::cmp::Reverse(**id)))?;
        let i = id as usize - 1;
        (i < self.nodes.len() && self.nodes[i].up && self.nodes[i].groups[b].leader == Some(id))
            .then_some(i)
    }

    /// Bucket `b`'s state at its leader, or at the most advanced replica that is up.
    fn kv_bucket(&self, b: usize) -> Option<Bucket> {
        let i = self.kv_leader(b).or_else(|| {
            (0..self.nodes.len())
                .filter(|&i| self.nodes[i].up)
                .max_by_key(|&i| self.nodes[i].groups[b].applied_count())
        })?;
        let m = self.nodes[i].groups[b].kv.as_ref()?;
        let bucket = m.lock().expect("kv").bucket().clone();
        Some(bucket)
    }
}

/// The clients' window on the world.
struct KvEnv<'a, P: Hosted>(&'a mut World<P>);

impl<P: Hosted> ClientEnv for KvEnv<'_, P> {
    fn now(&self) -> u64 {
        self.0.now
    }

    fn rng_u64(&mut self) -> u64 {
        self.0.rng.next_u64()
    }

    fn wake(&mut self, client: u32, tag: u64, after: u64) {
        let at = self.0.now + after;
        self.0
            .at(at, Ev::Kv(Box::new(ClientEvent::Wake { client, tag })));
    }

    fn submit(&mut self, to: u32, payload: Bytes, reply_to: Option<ReplyTo>) {
        let w = &mut *self.0;
        let n = w.nodes.len();
        let node = w
            .kv_leader(to as usize)
            .unwrap_or_else(|| w.rng.next_u64() as usize % n);
        let d = w.rand_between(w.cfg.net.latency_min_us, w.cfg.net.latency_max_us);
        let at = w.now + d;
        w.at(
            at,
            Ev::KvArrive(Box::new(Arrival {
                node,
                bucket: to,
                payload,
                reply_to,
            })),
        );
    }

    fn client_net_us(&self) -> (u64, u64) {
        (self.0.cfg.net.latency_min_us, self.0.cfg.net.latency_max_us)
    }

    fn master_up(&self, bucket: u32) -> bool {
        self.0.kv_leader(bucket as usize).is_some()
    }

    fn read(&mut self, bucket: u32, key: &[u8], replica: bool) -> Option<(Option<Bytes>, u64)> {
        let w = &mut *self.0;
        let b = bucket as usize;
        let i = if replica {
            let up: Vec<usize> = (0..w.nodes.len()).filter(|&i| w.nodes[i].up).collect();
            if up.is_empty() {
                return Some((None, 0));
            }
            up[w.rng.next_u64() as usize % up.len()]
        } else {
            w.kv_leader(b)?
        };
        let m = w.nodes[i].groups[b].kv.as_ref()?;
        let r = m.lock().expect("kv").bucket().read(key);
        Some(r)
    }
}

/// The checks' window on the world.
struct KvView<'a, P: Hosted>(&'a World<P>);

impl<P: Hosted> StoreView for KvView<'_, P> {
    fn now(&self) -> u64 {
        self.0.now
    }

    fn buckets(&self) -> u32 {
        self.0.histories.len() as u32
    }

    fn decision(&self, id: &TxnId) -> Option<(Decided, u64)> {
        self.0.kv.as_ref()?.decisions.get(id).cloned()
    }

    fn bucket(&self, b: u32) -> Option<Bucket> {
        self.0.kv_bucket(b as usize)
    }

    fn retain_us(&self) -> u64 {
        self.0.kv.as_ref().map_or(0, |k| k.retain_us)
    }

    fn violations(&self) -> Vec<String> {
        self.0
            .kv
            .as_ref()
            .map_or(Vec::new(), |k| k.violations.clone())
    }

    fn stats(&self) -> WorldStats {
        WorldStats {
            failovers: self.0.kv.as_ref().map_or(0, |k| k.crashes),
            ..WorldStats::default()
        }
    }

    fn master_up(&self, b: u32) -> bool {
        self.0.kv_leader(b as usize).is_some()
    }
}

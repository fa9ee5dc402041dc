//! Closed-loop clients, and the submit queue of each replica.
//!
//! A client is a session: it submits up to `pipeline` commands to its replica without waiting
//! (one, by default) and waits for their delivery there; when the oldest times out, or one is
//! refused, it gives up everything on that connection and moves to another replica. Submitted commands
//! wait in the replica's queue until every event of the current instant has run, then go to
//! the core as one batch, as the server's driver hands over whatever is waiting: clients whose
//! commands were delivered together (one commit of a batch) come back together, so batches form
//! under load and a lone command is never delayed.

use super::{Ev, Token, World};
use crate::check::Checker;
use crate::registers::{Op, BARRIER};
use crate::App;
use hdrhistogram::Histogram;
use rand_core::RngCore;
use std::collections::VecDeque;
use synod_core::GroupId;
use synod_host::{Hosted, SubmitResult};

pub(super) struct Client {
    /// The group it works in.
    pub(super) group: usize,
    pub(super) node: usize,
    /// Commands submitted and not yet answered, oldest first: (id, submitted at, tracked).
    outstanding: VecDeque<(u64, u64, bool)>,
    attempt: u64,
    /// The session's connection: it changes whenever the client moves to another replica
    /// (its outstanding commands are then given up).
    conn: u64,
    /// Commands submitted on this connection (their order, for the client-order checker).
    sent_on_conn: u64,
    /// Commands submitted in all.
    sent: u64,
    /// The ZooKeeper app: a sync to submit before reading this key.
    zk_sync: Option<u32>,
}

impl Client {
    pub(super) fn new(group: usize, node: usize) -> Self {
        Client {
            group,
            node,
            outstanding: VecDeque::new(),
            attempt: 0,
            conn: 0,
            sent_on_conn: 0,
            sent: 0,
            zk_sync: None,
        }
    }

    /// Waiting for a command submitted after the cluster settled.
    pub(super) fn waiting_tracked(&self) -> bool {
        self.outstanding.iter().any(|&(_, _, t)| t)
    }
}

impl<P: Hosted> World<P> {
    /// A client's turn: give up what timed out, then submit until `pipeline` commands are
    /// outstanding, and arm the timeout of the oldest.
    pub(super) fn client_turn(&mut self, c: usize, attempt: u64) {
        if self.clients[c].attempt != attempt {
            return;
        }
        let timeout = self.cfg.workload.client_timeout_us;
        if self.clients[c]
            .outstanding
            .front()
            .is_some_and(|&(_, since, _)| self.now >= since + timeout)
        {
            // Timed out: the connection is given up with everything on it; try another
            // replica with new commands.
            let given_up: Vec<u64> = self.clients[c].outstanding.iter().map(|o| o.0).collect();
            self.tracef(|| format!("client {c} gives up on commands {given_up:?}"));
            self.drop_outstanding(c);
            self.retarget(c);
        }
        if self.now >= self.workload_end {
            return;
        }
        let w = &self.cfg.workload;
        let in_fault_phase = self.healed_at.is_none();
        if !in_fault_phase && self.stable_at.is_none() {
            // Wait for the cluster to settle after healing.
            let t = self.now + 10_000;
            self.at(t, Ev::Client { client: c, attempt });
            return;
        }
        let pipeline = w.pipeline.max(1);
        let (node, g) = (self.clients[c].node, self.clients[c].group);
        let wr = match &self.cfg.app {
            App::ZooKeeper(app) => 1.0 - app.read_ratio,
            // etcd's reads go through the log (a barrier, then the read where it applied).
            App::Etcd(_) => 1.0,
            _ => self.cfg.workload.write_ratio,
        };
        let tracked_phase = self.stable_at.is_some();
        if wr < 1.0
            && !tracked_phase
            && self.clients[c].outstanding.is_empty()
            && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 >= wr
        {
            // A read: served from this replica's state, no broadcast.
            if let App::ZooKeeper(app) = &self.cfg.app {
                let (keys, sync) = (app.keys.max(1), app.sync_ratio);
                let local_sync = app.plant == Some(crate::ZkPlant::LocalSync);
                let key = (self.rng.next_u64() % keys as u64) as u32;
                let draw = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                if draw < sync && local_sync {
                    // The planted bug: the sync answered here, unordered.
                    if !self.zk_local_sync(node, c, key) {
                        self.client_refused(c);
                        return;
                    }
                } else if draw >= sync {
                    if !self.zk_read(node, c, key, None) {
                        // The replica is behind what the session saw: ZooKeeper's server
                        // refuses the client, which tries another.
                        self.client_refused(c);
                        return;
                    }
                } else {
                    // A sync first (a replicated transaction), then the read where it was
                    // answered.
                    self.clients[c].zk_sync = Some(key);
                    if !self.submit(c, node, g, false) {
                        return;
                    }
                    self.arm_timeout(c);
                    return;
                }
            }
            self.report.reads += 1;
            self.clients[c].attempt += 1;
            let attempt = self.clients[c].attempt;
            // Under the cost model the read is a request received and a reply sent by the
            // replica's CPU, queued behind its other work.
            let mut served = self.now;
            if !self.cfg.cost.is_free() {
                let size = self.payload.len();
                let ns = self.cfg.cost.receive_ns(size) + self.cfg.cost.send_ns(size);
                let n = &mut self.nodes[node];
                n.busy_until = n.busy_until.max(self.now) + ns.div_ceil(1_000);
                served = n.busy_until;
            }
            let t = served + self.cfg.workload.read_service_us + self.think();
            self.round_robin(c);
            self.at(t, Ev::Client { client: c, attempt });
            return;
        }
        while self.clients[c].outstanding.len() < pipeline {
            let tracked = tracked_phase && self.tracked_sent < self.cfg.workload.liveness_commands;
            if tracked_phase && !tracked {
                break; // the liveness workload is done
            }
            if !self.submit(c, node, g, tracked) {
                return; // refused at once: the client backs off
            }
        }
        self.arm_timeout(c);
    }

    /// Submit one new command of client `c` at replica `node` of group `g`; false when the
    /// replica is down (the client was sent elsewhere).
    fn submit(&mut self, c: usize, node: usize, g: usize, tracked: bool) -> bool {
        if !self.nodes[node].up {
            self.client_refused(c);
            return false;
        }
        let op = self
            .cfg
            .workload
            .registers
            .map(|k| self.register_op(c as u64, k));
        let n = self.clients[c].sent;
        let registers = matches!(self.cfg.app, App::Registers);
        let mut zk = None;
        let mut etcd = None;
        let (payload, relay) = match op {
            Some(op) => (op.encode(self.cfg.workload.payload_bytes), None),
            None if registers => self.register_command(c, g, n),
            None => match &self.cfg.app {
                App::ZooKeeper(app) => {
                    let app = app.clone();
                    let now_ms = (self.local_now(node) / 1_000) as i64;
                    let (payload, cmd) = match self.clients[c].zk_sync.take() {
                        Some(key) => self.zk_sync(c, key, now_ms),
                        None => self.zk_command(c, &app, now_ms),
                    };
                    zk = Some(cmd);
                    (payload, None)
                }
                App::Etcd(_) => {
                    let (payload, cmd) = self.etcd_command(c);
                    etcd = Some(cmd);
                    (payload, None)
                }
                _ => (self.payload.clone(), None),
            },
        };
        let cl = &mut self.clients[c];
        cl.sent += 1;
        cl.sent_on_conn += 1;
        let session = (c as u64, cl.conn, cl.sent_on_conn);
        let token = Token::Client(c, cl.conn);
        let now = self.local_now(node);
        let size = payload.len();
        let mut submitted = None;
        self.with_host(node, |h| {
            submitted = Some(h.submit(now, g as GroupId, payload, token));
        });
        let Some(Ok(id)) = submitted else {
            // Refused at once (its token was answered, and the client moved on).
            return false;
        };
        match op {
            Some(op) => self.histories[g].submitted_op(id, session, op),
            None => self.histories[g].submitted_by(id, session),
        }
        if let Some((from, to, key, value)) = relay {
            self.relays.push((id, from, to, key, value));
        }
        if let Some(cmd) = zk {
            self.zk_submitted(id, c, cmd);
        }
        if let Some(cmd) = etcd {
            self.etcd_submitted(id, c, cmd);
        }
        self.clients[c]
            .outstanding
            .push_back((id, self.now, tracked));
        self.waiting.insert(id, c);
        if tracked {
            self.tracked_sent += 1;
        }
        self.report.submitted += 1;
        let n = &mut self.nodes[node];
        n.requests.push(size);
        if !n.flush_pending {
            n.flush_pending = true;
            let incarnation = n.incarnation;
            let now = self.now;
            self.at(now, Ev::Flush { node, incarnation });
        }
        true
    }

    /// The register workload's next command of client `c` over `registers` registers: a
    /// barrier with probability `barrier_ratio`, else a write to a register drawn uniformly.
    fn register_op(&mut self, client: u64, registers: u32) -> Op {
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if u < self.cfg.workload.barrier_ratio {
            Op::Barrier { client }
        } else {
            let register = (self.rng.next_u64() % registers.clamp(1, BARRIER) as u64) as u32;
            Op::Write { register, client }
        }
    }

    /// (Re)arm the client's timeout: when its oldest outstanding command has waited too long.
    fn arm_timeout(&mut self, c: usize) {
        let Some(&(_, since, _)) = self.clients[c].outstanding.front() else {
            return;
        };
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        let at = (since + self.cfg.workload.client_timeout_us).max(self.now);
        self.at(at, Ev::Client { client: c, attempt });
    }

    /// Forget every outstanding command of client `c` (its connection is gone): tracked ones
    /// are answered by another command later.
    fn drop_outstanding(&mut self, c: usize) {
        let dropped = std::mem::take(&mut self.clients[c].outstanding);
        for (id, _, tracked) in dropped {
            self.waiting.remove(&id);
            if tracked {
                self.tracked_sent -= 1;
            }
        }
        let cl = &mut self.clients[c];
        cl.conn += 1;
        cl.sent_on_conn = 0;
    }

    /// Hand every command waiting at node `i`'s host to its cores, in batches within the
    /// limits.
    pub(super) fn flush(&mut self, i: usize) {
        self.nodes[i].flush_pending = false;
        // Under the cost model, each client request is a message the replica received.
        let requests = std::mem::take(&mut self.nodes[i].requests);
        if !self.cfg.cost.is_free() {
            for size in requests {
                self.step_cost_ns += self.cfg.cost.receive_ns(size);
            }
        }
        let now = self.local_now(i);
        self.with_host(i, |h| h.flush(now));
    }

    fn retarget(&mut self, c: usize) {
        let n = self.nodes.len();
        let next = (self.clients[c].node + 1 + (self.rng.next_u64() as usize % (n - 1).max(1))) % n;
        self.clients[c].node = next;
    }

    /// The client waiting at replica `node` of group `g` for command `id`.
    fn client_waiting_for(&self, node: usize, g: usize, id: u64) -> Option<usize> {
        let &c = self.waiting.get(&id)?;
        let cl = &self.clients[c];
        (cl.node == node && cl.group == g).then_some(c)
    }

    /// Node `i`'s host answered a client: its command was delivered there, or refused. An
    /// answer on a connection the client gave up is ignored.
    pub(super) fn client_reply(&mut self, i: usize, (c, conn): (usize, u64), result: SubmitResult) {
        let g = self.clients[c].group;
        if let Ok(a) = &result {
            // Whoever waits for it, an answer must be true.
            let (now, node) = (self.now, self.nodes[i].id);
            self.histories[g].acknowledged(now, node, a.id, a.at.slot);
            self.acknowledged.push((g, a.id));
            if self.clients[c].conn == conn && self.clients[c].node == i {
                self.zk_delivered(i, c, a);
            }
            // Every etcd reply told must be true, whoever still waits for it.
            self.etcd_delivered(i, c, a);
        }
        let cl = &self.clients[c];
        if cl.conn != conn || cl.node != i {
            return;
        }
        match result {
            Ok(a) => self.client_delivered(i, g, a.id),
            Err(_) => self.client_refused(c),
        }
    }

    /// A refusal of one of the client's commands: the replica cannot take its commands (no
    /// leader, or too busy); it gives up everything on this connection and tries another
    /// replica after a back-off.
    fn client_refused(&mut self, c: usize) {
        self.drop_outstanding(c);
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        self.retarget(c);
        let backoff = self.now + self.cfg.workload.backoff_us;
        self.at(backoff, Ev::Client { client: c, attempt });
    }

    pub(super) fn client_delivered(&mut self, node: usize, g: usize, id: u64) {
        let Some(c) = self.client_waiting_for(node, g, id) else {
            return;
        };
        let cl = &mut self.clients[c];
        let k = cl
            .outstanding
            .iter()
            .position(|&(o, _, _)| o == id)
            .expect("outstanding");
        let (_, since, tracked) = cl.outstanding.remove(k).expect("outstanding");
        self.waiting.remove(&id);
        // ... and each reply one it sent.
        self.step_cost_ns += self.cfg.cost.send_ns(0);
        let lat = self.now - since;
        let _ = self.latency.record(lat.max(1));
        let role = super::role_index(self.role_of(node, g));
        let _ = self.counts.lock().expect("counts").latency[role]
            .get_or_insert_with(|| Histogram::new(3).expect("histogram"))
            .record(lat.max(1));
        self.report.completed += 1;
        let r = &mut self.report;
        super::grow(&mut r.completed_by_node, node + 1);
        r.completed_by_node[node] += 1;
        super::grow(&mut r.latency_by_node, node + 1);
        let _ = r.latency_by_node[node]
            .get_or_insert_with(|| Histogram::new(3).expect("histogram"))
            .record(lat.max(1));
        self.timeline(node, (1, 0));
        if tracked {
            self.tracked_left = self.tracked_left.saturating_sub(1);
            if lat > self.cfg.liveness_bound_us {
                let now = self.now;
                self.histories[g].violate(
                    Checker::Liveness,
                    now,
                    format!("command {id} took {lat}us after the cluster settled"),
                );
            }
        }
        // Think, then refill the pipeline (which re-arms the timeout of the oldest).
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        let t = self.now + self.think();
        if self.clients[c].outstanding.is_empty() {
            self.round_robin(c);
        }
        self.at(t, Ev::Client { client: c, attempt });
    }

    /// The pause before a client's next request.
    fn think(&mut self) -> u64 {
        let w = &self.cfg.workload;
        if w.think_max_us > w.think_us {
            w.think_us + self.rng.next_u64() % (w.think_max_us - w.think_us + 1)
        } else {
            w.think_us
        }
    }

    /// Round-robin clients send their next request to the next replica, on a new connection.
    fn round_robin(&mut self, c: usize) {
        if !self.cfg.workload.round_robin {
            return;
        }
        let n = self.nodes.len();
        let cl = &mut self.clients[c];
        cl.node = (cl.node + 1) % n;
        cl.conn += 1;
        cl.sent_on_conn = 0;
    }
}

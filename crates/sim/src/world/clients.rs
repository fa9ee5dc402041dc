//! Closed-loop clients, and the submit queue of each replica.
//!
//! A client submits one command at a time to its replica and waits for its delivery there; it
//! gives up after a timeout (or a refusal) and moves to another replica. Submitted commands
//! wait in the replica's queue until every event of the current instant has run, then go to
//! the core as one batch, as the server's driver hands over whatever is waiting: clients whose
//! commands were delivered together (one commit of a batch) come back together, so batches form
//! under load and a lone command is never delayed.

use super::{Ev, World};
use crate::check::Checker;
use hdrhistogram::Histogram;
use rand_core::RngCore;
use synod_core::{BatchLimits, Command, Input, Protocol};

pub(super) struct Client {
    /// The group it works in.
    group: usize,
    node: usize,
    outstanding: Option<(u64, u64)>,
    attempt: u64,
    tracked: bool,
}

impl Client {
    pub(super) fn new(group: usize, node: usize) -> Self {
        Client {
            group,
            node,
            outstanding: None,
            attempt: 0,
            tracked: false,
        }
    }

    /// Waiting for a command submitted after the cluster settled.
    pub(super) fn waiting_tracked(&self) -> bool {
        self.outstanding.is_some() && self.tracked
    }
}

impl<P: Protocol> World<P> {
    pub(super) fn client_turn(&mut self, c: usize, attempt: u64) {
        if self.clients[c].attempt != attempt {
            return;
        }
        if let Some((id, _)) = self.clients[c].outstanding.take() {
            // Timed out: try another replica with a new command.
            self.tracef(|| format!("client {c} gives up on command {id}"));
            self.retarget(c);
        }
        if self.now >= self.workload_end {
            return;
        }
        let w = &self.cfg.workload;
        let in_fault_phase = self.healed_at.is_none();
        let tracked = self.stable_at.is_some() && self.tracked_sent < w.liveness_commands;
        if !in_fault_phase && !tracked && self.stable_at.is_some() {
            return; // the liveness workload is done
        }
        if !in_fault_phase && self.stable_at.is_none() {
            // Wait for the cluster to settle after healing.
            let t = self.now + 10_000;
            self.at(t, Ev::Client { client: c, attempt });
            return;
        }
        let (node, g) = (self.clients[c].node, self.clients[c].group);
        let wr = self.cfg.workload.write_ratio;
        if wr < 1.0 && !tracked && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 >= wr {
            // A read: served from this replica's state, no broadcast.
            self.report.reads += 1;
            self.clients[c].attempt += 1;
            let attempt = self.clients[c].attempt;
            let t = self.now + self.cfg.workload.read_service_us + self.cfg.workload.think_us;
            self.at(t, Ev::Client { client: c, attempt });
            return;
        }
        let id = self.next_command;
        self.next_command += 1;
        self.histories[g].submitted(id);
        self.clients[c].outstanding = Some((id, self.now));
        self.clients[c].tracked = tracked;
        if tracked {
            self.tracked_sent += 1;
        }
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        let timeout = self.now + self.cfg.workload.client_timeout_us;
        self.at(timeout, Ev::Client { client: c, attempt });
        let command = Command {
            id,
            payload: self.payload.clone(),
        };
        self.report.submitted += 1;
        if !self.nodes[node].up {
            self.client_rejected(node, g, id);
            return;
        }
        let m = &mut self.nodes[node].groups[g];
        m.submits.push_back(command);
        if !m.flush_pending {
            m.flush_pending = true;
            let incarnation = self.nodes[node].incarnation;
            let now = self.now;
            self.at(
                now,
                Ev::Flush {
                    node,
                    group: g,
                    incarnation,
                },
            );
        }
    }

    /// Hand every command waiting at replica `i` to its core, in batches within the limits.
    pub(super) fn flush(&mut self, i: usize, g: usize) {
        self.nodes[i].groups[g].flush_pending = false;
        let limits = BatchLimits {
            max_commands: self.cfg.batch_commands.max(1),
            ..BatchLimits::default()
        };
        while !self.nodes[i].groups[g].submits.is_empty() && self.nodes[i].up {
            let batch = limits.take(&mut self.nodes[i].groups[g].submits);
            self.report.batches += 1;
            // Under the cost model, each client request is a message the replica received.
            for c in &batch {
                self.step_cost_ns += self.cfg.cost.receive_ns(c.payload.len());
            }
            self.step(i, g, Input::Submit(batch));
        }
    }

    fn retarget(&mut self, c: usize) {
        let n = self.nodes.len();
        let next = (self.clients[c].node + 1 + (self.rng.next_u64() as usize % (n - 1).max(1))) % n;
        self.clients[c].node = next;
    }

    /// The client waiting at replica `node` of group `g` for command `id`.
    fn client_waiting_for(&self, node: usize, g: usize, id: u64) -> Option<usize> {
        self.clients.iter().position(|c| {
            c.node == node && c.group == g && c.outstanding.is_some_and(|(o, _)| o == id)
        })
    }

    pub(super) fn client_rejected(&mut self, node: usize, g: usize, id: u64) {
        let Some(c) = self.client_waiting_for(node, g, id) else {
            return;
        };
        let cl = &mut self.clients[c];
        cl.outstanding = None;
        if cl.tracked {
            // A refusal is an answer; the client will submit another tracked command.
            self.tracked_sent -= 1;
        }
        cl.attempt += 1;
        let attempt = cl.attempt;
        self.retarget(c);
        let backoff = self.now + self.cfg.workload.backoff_us;
        self.at(backoff, Ev::Client { client: c, attempt });
    }

    pub(super) fn client_delivered(&mut self, node: usize, g: usize, id: u64) {
        let Some(c) = self.client_waiting_for(node, g, id) else {
            return;
        };
        let (_, since) = self.clients[c].outstanding.take().expect("outstanding");
        // ... and each reply one it sent.
        self.step_cost_ns += self.cfg.cost.send_ns(0);
        let lat = self.now - since;
        let _ = self.latency.record(lat.max(1));
        let role = self.nodes[node].groups[g].role.name();
        let _ = self
            .report
            .latency_by_role
            .entry(role)
            .or_insert_with(|| Histogram::new(3).expect("histogram"))
            .record(lat.max(1));
        self.report.completed += 1;
        if self.clients[c].tracked {
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
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        let think = self.cfg.workload.think_us;
        let t = self.now + think;
        self.at(t, Ev::Client { client: c, attempt });
    }
}

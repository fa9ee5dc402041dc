//! The errata of pft.md §6.1, each as a scripted run: a cluster driven by hand through the one
//! driver loop (`Replica`), messages dropped or held where the script says, storage made
//! durable where it says, and every delivery fed to the simulator's checkers (`History`). The
//! correct core passes each script; the core with the erratum's literal rule (`Bug`) is caught.
//! Random sweeps find these interleavings rarely (FIFO links and VIEWCHANGE amplification hide
//! most of them), so the scripts make them certain.

use bytes::Bytes;
use std::collections::VecDeque;
use synod_core::replica::{Env, Replica};
use synod_core::{
    Apply, Cluster, Command, Dest, DurableState, Envelope, Event, Input, NodeId, Persist, Protocol,
    TimeUs,
};
use synod_paxos::{Accepted, Bug, Hard, Msg, Options, Paxos};
use synod_sim::{Checker, History};

type Disk = DurableState<Accepted, Hard>;

struct Node {
    replica: Option<Replica<Paxos>>,
    disk: Disk,
    /// Ops issued and not yet durable.
    pending: Vec<Persist<Accepted, Hard>>,
    /// Storage completes at once unless held.
    hold_disk: bool,
    incarnation: u64,
}

struct World {
    nodes: Vec<Node>,
    queue: VecDeque<(NodeId, NodeId, Msg)>,
    now: TimeUs,
    history: History,
    opt: Options,
}

/// What one step produced, collected by the `Env`.
#[derive(Default)]
struct Out {
    persist: Vec<Persist<Accepted, Hard>>,
    applied: Vec<Apply>,
    sent: Vec<Envelope<Msg>>,
}

impl Env<Paxos> for Out {
    fn persist(&mut self, ops: &mut Vec<Persist<Accepted, Hard>>) {
        self.persist.append(ops);
    }
    fn apply(&mut self, a: Apply) {
        self.applied.push(a);
    }
    fn event(&mut self, _: Event) {}
    fn transmit(&mut self, e: Envelope<Msg>) {
        self.sent.push(e);
    }
}

fn cmd(id: u64) -> Command {
    Command {
        id,
        payload: Bytes::from_static(b"x"),
    }
}

impl World {
    fn new(bug: Option<Bug>) -> World {
        let opt = Options {
            bug,
            ..Options::default()
        };
        let mut w = World {
            nodes: (0..3)
                .map(|_| Node {
                    replica: None,
                    disk: Disk::default(),
                    pending: Vec::new(),
                    hold_disk: false,
                    incarnation: 0,
                })
                .collect(),
            queue: VecDeque::new(),
            now: 1,
            history: History::default(),
            opt,
        };
        for id in 0..100 {
            w.history.submitted(id);
        }
        for i in 1..=3 {
            w.start(i);
        }
        w
    }

    fn node(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize - 1]
    }

    fn start(&mut self, id: NodeId) {
        let opt = self.opt.clone();
        let n = self.node(id);
        n.incarnation += 1;
        let core = Paxos::restore(
            Cluster::new(id, vec![1, 2, 3]),
            opt,
            n.disk.clone(),
            id as u64 * 1000 + n.incarnation,
        );
        n.replica = Some(Replica::new(core, 1 << 16));
        n.pending.clear();
        let inc = n.incarnation;
        self.history.started(id, inc, 0);
        self.wake(id);
    }

    /// A crash: what was not durable is lost.
    fn crash(&mut self, id: NodeId) {
        let n = self.node(id);
        n.replica = None;
        n.pending.clear();
        self.queue.retain(|(f, t, _)| *f != id && *t != id);
    }

    fn with(&mut self, id: NodeId, f: impl FnOnce(&mut Replica<Paxos>, TimeUs, &mut Out)) {
        let now = self.now;
        let mut out = Out::default();
        let Some(r) = self.node(id).replica.as_mut() else {
            return;
        };
        f(r, now, &mut out);
        self.carry(id, out);
    }

    fn carry(&mut self, id: NodeId, out: Out) {
        let inc = self.node(id).incarnation;
        for a in out.applied {
            if let Apply::Command { at, command } = a {
                let quorum = self
                    .nodes
                    .iter()
                    .filter(|n| n.disk.holds(at, command.id))
                    .count()
                    >= 2;
                let now = self.now;
                self.history
                    .delivered(now, id, inc, at.slot, at.tag, command.id, quorum);
            }
        }
        for e in out.sent {
            let to: Vec<NodeId> = match e.to {
                Dest::One(p) => vec![p],
                Dest::All => (1..=3).filter(|&p| p != id).collect(),
            };
            for p in to {
                self.queue.push_back((id, p, e.msg.clone()));
            }
        }
        if !out.persist.is_empty() {
            self.node(id).pending.extend(out.persist);
            if !self.node(id).hold_disk {
                self.flush(id);
            }
        }
    }

    /// Make every pending op of `id` durable.
    fn flush(&mut self, id: NodeId) {
        let ops = std::mem::take(&mut self.node(id).pending);
        let Some(last) = ops.last().map(|p| p.seq) else {
            return;
        };
        for p in &ops {
            self.node(id).disk.apply(&p.op);
        }
        self.with(id, |r, now, out| r.durable(now, last, out));
    }

    fn wake(&mut self, id: NodeId) {
        self.with(id, |r, now, out| {
            r.wake(now, out);
        });
    }

    fn submit(&mut self, id: NodeId, c: u64) {
        self.with(id, |r, now, out| r.submit(now, vec![cmd(c)], out));
    }

    /// Deliver queued messages until none is left, dropping those `drop` names.
    fn run(&mut self, drop: impl Fn(NodeId, NodeId, &Msg) -> bool) {
        let mut steps = 0;
        while let Some((from, to, msg)) = self.queue.pop_front() {
            steps += 1;
            assert!(steps < 10_000, "the script does not quiesce");
            if drop(from, to, &msg) {
                continue;
            }
            self.with(to, |r, now, out| {
                r.step(now, Input::Message { from, msg }, out)
            });
        }
    }

    /// Deliver the queued messages that `pick` names (in order), keep the others queued.
    fn deliver(&mut self, pick: impl Fn(NodeId, NodeId, &Msg) -> bool) {
        let queued: Vec<_> = self.queue.drain(..).collect();
        for (from, to, msg) in queued {
            if pick(from, to, &msg) {
                self.with(to, |r, now, out| {
                    r.step(now, Input::Message { from, msg }, out)
                });
            } else {
                self.queue.push_back((from, to, msg));
            }
        }
    }

    /// Let `dt` pass, waking `who`.
    fn tick(&mut self, dt: TimeUs, who: &[NodeId]) {
        self.now += dt;
        for &id in who {
            self.wake(id);
        }
    }

    fn view(&self, id: NodeId) -> synod_core::View {
        self.nodes[id as usize - 1]
            .replica
            .as_ref()
            .expect("up")
            .view()
    }

    fn caught(&self) -> Vec<Checker> {
        self.history
            .violations
            .iter()
            .map(|v| v.checker.clone())
            .collect()
    }
}

fn none(_: NodeId, _: NodeId, _: &Msg) -> bool {
    false
}

/// Boot: every replica promises view 1; n2 (= 1 mod 3 among 1, 2, 3) installs it.
fn booted(bug: Option<Bug>) -> World {
    let mut w = World::new(bug);
    w.run(none);
    assert_eq!(w.view(2).leader, Some(2));
    assert_eq!(w.view(1).leader, Some(2));
    w
}

/// §6.1.4: after VIEWCHANGE for view 2, n1 must not accept the old primary's ACCEPT. With the
/// literal rule n1's acknowledgement lets n2 commit `a` at n = 1 while view 2, built from n1's
/// report (which predates that accept), gives n = 1 to `b`.
fn accept_after_viewchange(bug: Option<Bug>) -> Vec<Checker> {
    let mut w = booted(bug);
    // n1 and n3 stop hearing n2 and agree (the pre-vote) to change view; n2 hears none of it.
    w.tick(2_000_000, &[1, 3]);
    for _ in 0..3 {
        w.deliver(|f, t, m| {
            f != 2 && t != 2 && matches!(m, Msg::Suspect { .. } | Msg::SuspectAck { .. })
        });
    }
    assert_eq!(w.view(1).epoch, 2, "n1 promised view 2");
    w.queue
        .retain(|(f, t, _)| !(t == &2 && (f == &1 || f == &3)));
    // The old primary orders `a`; n1 (in its view change) gets the ACCEPT, n3 does not.
    w.submit(2, 1);
    w.deliver(|f, t, m| f == 2 && t == 1 && matches!(m, Msg::Accept { .. }));
    w.queue
        .retain(|(f, t, m)| !(f == &2 && t == &3 && matches!(m, Msg::Accept { .. })));
    w.deliver(|f, t, m| f == 1 && t == 2 && matches!(m, Msg::AcceptAck { .. }));
    // n3 installs view 2 with n1 and orders `b`.
    w.run(|f, t, _| f == 2 || t == 2);
    w.submit(3, 2);
    w.run(|f, t, _| f == 2 || t == 2);
    w.tick(60_000, &[3]);
    w.run(|f, t, _| f == 2 || t == 2);
    w.caught()
}

#[test]
fn a_replica_that_keeps_accepting_after_viewchange_is_caught() {
    assert!(accept_after_viewchange(None).is_empty());
    let caught = accept_after_viewchange(Some(Bug::AcceptAfterViewChange));
    assert!(caught.contains(&Checker::Agreement), "{caught:?}");
}

/// §6.1.6(b): n2 accepts `a` at n = 1 in view 1 alone and is cut off; view 2 (n3 with n1)
/// chooses `b` at n = 1 (n3 executes it, n1 never hears the COMMIT); view 3 (n1 with n2) must
/// take view 2's accept, not view 1's.
fn lower_view(bug: Option<Bug>) -> Vec<Checker> {
    let mut w = booted(bug);
    w.submit(2, 1);
    w.queue
        .retain(|(f, _, m)| !(f == &2 && matches!(m, Msg::Accept { .. })));
    // View 2 without n2.
    w.tick(2_000_000, &[1, 3]);
    w.run(|f, t, _| f == 2 || t == 2);
    assert_eq!(w.view(3).leader, Some(3));
    w.submit(3, 2);
    w.run(|f, t, m| f == 2 || t == 2 || (t == 1 && matches!(m, Msg::Commit { .. })));
    // View 3 (n1) with n2, without n3: n2 gives its view up (its order has no quorum) and
    // escalates; n1 joins.
    for _ in 0..20 {
        w.tick(200_000, &[1, 2]);
        w.run(|f, t, _| f == 3 || t == 3);
    }
    assert_eq!(w.view(1).leader, Some(1));
    w.tick(60_000, &[1]);
    w.run(|f, t, _| f == 3 || t == 3);
    w.caught()
}

#[test]
fn newview_taking_a_lower_views_accept_is_caught() {
    assert!(lower_view(None).is_empty());
    let caught = lower_view(Some(Bug::LowerViewWins));
    assert!(caught.contains(&Checker::Agreement), "{caught:?}");
}

/// §6.1.2: an ACCEPTACK must name its view. n1 acknowledges `a` at n = 1 in view 1, but the
/// acknowledgement is delayed; n2 crashes before its own write of `a` is durable. Views 2 and
/// 3 pass without n1; in view 4 n2 leads again and gives n = 1 to `b`: counting n1's stale
/// acknowledgement commits `b` with n2 alone holding it.
fn stale_ack(bug: Option<Bug>) -> Vec<Checker> {
    let mut w = booted(bug);
    w.node(2).hold_disk = true;
    w.submit(2, 1);
    w.deliver(|f, t, m| f == 2 && t == 1 && matches!(m, Msg::Accept { .. }));
    let stale: Vec<_> = w
        .queue
        .iter()
        .filter(|(f, t, m)| *f == 1 && *t == 2 && matches!(m, Msg::AcceptAck { .. }))
        .cloned()
        .collect();
    assert_eq!(stale.len(), 1);
    w.crash(2);
    w.queue.clear();
    w.node(2).hold_disk = false;
    w.start(2);
    // Views 2, 3 and 4 among n2 and n3 only (n1 is cut off): the restarted n2 never leads
    // view 1 again, n3 installs view 2 and restarts (nor does it lead view 2 again), view 3's
    // primary (n1) is unreachable, and view 4 is n2's.
    w.run(|f, t, _| f == 1 || t == 1);
    assert_eq!(w.view(3).leader, Some(3));
    w.crash(3);
    w.start(3);
    for _ in 0..6 {
        w.tick(3_000_000, &[2, 3]);
        w.run(|f, t, _| f == 1 || t == 1);
        if w.view(2).leader == Some(2) && w.view(2).role == synod_core::Role::Leading {
            break;
        }
    }
    assert_eq!(w.view(2).role, synod_core::Role::Leading, "n2 leads again");
    // n3 stalls; n2 orders `b` at n = 1 and the stale acknowledgement arrives.
    w.submit(2, 2);
    w.queue.retain(|(f, t, _)| !(*f == 2 && *t == 3));
    w.queue.extend(stale);
    w.run(|f, t, _| t == 3 || f == 3);
    w.caught()
}

#[test]
fn an_ack_counted_without_its_view_is_caught() {
    assert!(stale_ack(None).is_empty());
    let caught = stale_ack(Some(Bug::AckWithoutView));
    assert!(caught.contains(&Checker::CrashTolerance), "{caught:?}");
}

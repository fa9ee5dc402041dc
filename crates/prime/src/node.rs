//! PRIME's node (sconekv.md §2.4, [San18]): the membership manager, hole manager and failure
//! detector over EpTO and CYCLON.
//!
//! * **Found**: the first node of a cluster starts a view of itself ([`Node::found`]).
//! * **Join** ([`Node::join`]): the newcomer p sends ⟨DISCOVERY⟩ to any node it knows (the
//!   tracker's list, `--join ADDR`); that member q broadcasts ⟨JOIN | p⟩ through EpTO; every node
//!   applies it and **p's first guardian** (the lowest id among p's guardians) sends p a copy of
//!   the view; p starts its failure detector and acts as a member. A DISCOVERY for a node already
//!   in the view is answered with a view copy at once (the first copy may have been lost); the
//!   newcomer retries through another node every `join_retry`.
//! * **Leave**: a graceful leave broadcasts the node's own LEAVE; a removal is decided by its
//!   guardians ([`crate::detector`]).
//! * **Holes**: heartbeats carry the sender's view stamp; a guardian that has not agreed with a
//!   protegee for a whole window ([`crate::holes`]) exchanges view state with it, and the
//!   lattice merge ([`crate::view`]) repairs both sides.
//! * **Wrongly removed**: a node that delivers its own LEAVE, or heartbeats a guardian whose
//!   view removed it (⟨NOT-MEMBER⟩), waits `rejoin_delay` and rejoins with its next
//!   incarnation (the prototype exits instead).

use std::collections::BTreeSet;

use crate::cyclon::{Cyclon, Entry};
use crate::detector::{guardians, Detector, Signal};
use crate::epto::{Epto, Event, Params};
use crate::holes::HoleManager;
use crate::view::{Update, View};
use crate::{Core, Input, Member, NodeId, TimeUs, ViewStamp};
use synod_core::rng::CoreRng;

/// PRIME's, EpTO's and CYCLON's parameters. [`Options::THESIS`] are the prototype's
/// (`server/config.properties`, sconekv.md §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    pub cyclon_capacity: usize,
    pub cyclon_shuffle: usize,
    pub cyclon_interval_us: TimeUs,
    pub fanout: usize,
    /// A fixed EpTO TTL, or `None` to size it to the view ([`Params::for_size`] with `ttl_slack`).
    pub ttl: Option<u32>,
    pub ttl_slack: u32,
    /// EpTO's round, δ.
    pub round_us: TimeUs,
    /// K: guardians per node.
    pub guardians: usize,
    pub heartbeat_us: TimeUs,
    /// A protegee silent this long is suspected (ACCEPTABLE_HEARTBEAT_PAUSE).
    pub suspect_after_us: TimeUs,
    pub join_retry_us: TimeUs,
    pub rejoin_delay_us: TimeUs,
    /// A member sends a random neighbour an anti-entropy digest this often.
    pub digest_us: TimeUs,
    /// A bug planted on purpose, to show the simulator's checks catch it.
    pub plant: Option<Plant>,
}

/// Bugs the simulator must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// Never apply a LEAVE (delivered or merged): failed nodes stay in the view.
    IgnoreLeaves,
}

impl Options {
    pub const THESIS: Options = Options {
        cyclon_capacity: 10,
        cyclon_shuffle: 8,
        cyclon_interval_us: 5_000_000,
        fanout: 10,
        ttl: Some(5),
        ttl_slack: 2,
        round_us: 500_000,
        guardians: 7,
        heartbeat_us: 500_000,
        suspect_after_us: 6_000_000,
        join_retry_us: 2_000_000,
        rejoin_delay_us: 10_000_000,
        digest_us: 2_000_000,
        plant: None,
    };
}

/// PRIME's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Shuffle(Vec<Entry>),
    ShuffleReply(Vec<Entry>),
    Ball(Vec<Event<Update>>),
    /// A newcomer asks a member to broadcast its JOIN.
    Discovery(Member),
    /// A copy of the view (per-node ranks) and the sender's EpTO clock, for a newcomer.
    ViewCopy {
        entries: Vec<(NodeId, u64)>,
        clock: u64,
    },
    Heartbeat {
        from: Member,
        stamp: ViewStamp,
    },
    /// "Your incarnation was removed": this view's state, so the removed node learns at once
    /// what else it missed (and can tell the nodes that heartbeat it in turn).
    NotMember(Vec<(NodeId, u64)>),
    Suspicion(Member),
    Alive(Member),
    /// A guardian asks for a heartbeat (it suspects this node).
    Probe,
    /// Anti-entropy: the view the sender held a window ago.
    Digest(ViewStamp),
    /// Hole repair: a view's state; `reply` asks for the receiver's in return.
    Repair {
        entries: Vec<(NodeId, u64)>,
        reply: bool,
        /// The sender's EpTO clock.
        clock: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Joining {
        attempts: u32,
        next_try: TimeUs,
    },
    Member,
    /// Removed while alive: rejoins with the next incarnation at `rejoin_at`.
    Removed {
        rejoin_at: TimeUs,
    },
    /// Left gracefully: stays out.
    Left,
}

/// Counters for observers (metrics, the simulator's report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub view_changes: u64,
    pub repairs: u64,
    pub rejoins: u64,
    pub decided: u64,
}

#[derive(Clone, Debug)]
pub struct Node {
    me: Member,
    opts: Options,
    rng: CoreRng,
    phase: Phase,
    seeds: Vec<NodeId>,
    view: View,
    cyclon: Cyclon,
    epto: Epto<Update>,
    detector: Detector,
    next_round: TimeUs,
    next_shuffle: TimeUs,
    next_heartbeat: TimeUs,
    next_digest: TimeUs,
    holes: HoleManager,
    stats: Stats,
    /// A graceful leave was asked: this node's own LEAVE ends its membership for good.
    leaving: bool,
    /// Newcomers whose DISCOVERY this node turned into a JOIN: it sends them a view copy too.
    introduced: BTreeSet<Member>,
    /// Holes of earlier incarnations.
    holes_before: u64,
}

/// At most this many newcomers remembered by an introducer.
const MAX_INTRODUCED: usize = 1024;

impl Node {
    fn new(node: NodeId, opts: Options, seeds: Vec<NodeId>, seed: u64, phase: Phase) -> Self {
        let me = Member::new(node, 1);
        let params = Params {
            fanout: opts.fanout,
            ttl: opts.ttl.unwrap_or(opts.ttl_slack + 1),
            max_ball: 4096,
        };
        Node {
            me,
            opts,
            rng: CoreRng::new(seed ^ (node as u64).wrapping_mul(0x9e37_79b9)),
            phase,
            seeds,
            view: View::default(),
            cyclon: Cyclon::new(node, opts.cyclon_capacity, opts.cyclon_shuffle),
            epto: Epto::new(me, params),
            detector: Detector::new(node, opts.guardians, opts.suspect_after_us),
            next_round: 0,
            next_shuffle: 0,
            next_heartbeat: 0,
            next_digest: 0,
            holes: HoleManager::default(),
            stats: Stats::default(),
            leaving: false,
            introduced: BTreeSet::new(),
            holes_before: 0,
        }
    }

    /// The first node of a new cluster.
    pub fn found(node: NodeId, opts: Options, seed: u64) -> Self {
        Self::new(node, opts, Vec::new(), seed, Phase::Member)
    }

    /// A node joining through any of `seeds` (the tracker's list, `--join ADDR`).
    pub fn join(node: NodeId, seeds: Vec<NodeId>, opts: Options, seed: u64) -> Self {
        assert!(!seeds.is_empty(), "a joining node needs a node to ask");
        Self::new(
            node,
            opts,
            seeds,
            seed,
            Phase::Joining {
                attempts: 0,
                next_try: 0,
            },
        )
    }

    pub fn me(&self) -> Member {
        self.me
    }
    pub fn phase(&self) -> Phase {
        self.phase
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// EpTO holes over every incarnation of this node.
    pub fn holes(&self) -> u64 {
        self.holes_before + self.epto.holes()
    }

    fn view_copy(&self) -> Msg {
        Msg::ViewCopy {
            entries: self.view.entries(),
            clock: self.epto.clock(),
        }
    }
    pub fn suspicions_raised(&self) -> u64 {
        self.detector.raised()
    }
    pub fn the_view(&self) -> &View {
        &self.view
    }

    /// Queue a message; one addressed to this node itself (a peer's message may name it) is
    /// dropped.
    fn send(&self, out: &mut Vec<(NodeId, Msg)>, to: NodeId, msg: Msg) {
        if to != self.me.node {
            out.push((to, msg));
        }
    }

    fn become_member(&mut self, now: TimeUs) {
        self.phase = Phase::Member;
        let peers: Vec<NodeId> = self.view.members().iter().map(|m| m.node).collect();
        self.cyclon.seed(&peers, &mut self.rng);
        self.on_view_change(now);
        self.next_round = now + self.opts.round_us;
        self.next_shuffle = now + self.rng.below(self.opts.cyclon_interval_us.max(1));
        self.next_heartbeat = now;
        self.next_digest = now + self.rng.below(self.opts.digest_us.max(1));
    }

    /// Everything that follows a change of the view.
    fn on_view_change(&mut self, now: TimeUs) {
        self.stats.view_changes += 1;
        // Newcomers the view now holds (or removed) need no more copies from here.
        let view = &self.view;
        self.introduced
            .retain(|p| !view.contains(*p) && !view.removed(*p));
        let ring = self.view.members();
        self.detector.on_view(now, ring);
        self.holes.on_own_view(now, self.view.stamp());
        self.holes.retain(&self.detector.protegees());
        let gone: Vec<NodeId> = self
            .cyclon
            .neighbours()
            .filter(|&p| self.view.incarnation(p).is_none())
            .collect();
        for p in gone {
            self.cyclon.remove(p);
        }
        if self.opts.ttl.is_none() {
            let p = Params::for_size(ring.len(), self.opts.fanout, self.opts.ttl_slack);
            self.epto.set_params(p);
        }
    }

    /// This node's incarnation was removed: wait, then rejoin as the next one.
    fn removed(&mut self, now: TimeUs) {
        if matches!(self.phase, Phase::Left | Phase::Removed { .. }) {
            return;
        }
        self.phase = Phase::Removed {
            rejoin_at: now + self.opts.rejoin_delay_us,
        };
    }

    fn rejoin(&mut self, now: TimeUs) {
        self.stats.rejoins += 1;
        // The next incarnation after every one this node's view has seen of it.
        let seen = self.view.rank(self.me.node).map_or(0, |r| (r / 2) as u32);
        let inc = seen.max(self.me.incarnation) + 1;
        self.me = Member::new(self.me.node, inc);
        self.holes_before += self.epto.holes();
        self.epto = self.epto.reincarnate(self.me);
        let mut seeds: Vec<NodeId> = self
            .view
            .members()
            .iter()
            .map(|m| m.node)
            .filter(|&n| n != self.me.node)
            .collect();
        seeds.extend(self.seeds.iter().copied());
        seeds.sort_unstable();
        seeds.dedup();
        if !seeds.is_empty() {
            self.seeds = seeds;
        }
        self.phase = Phase::Joining {
            attempts: 0,
            next_try: now,
        };
    }

    fn deliver(
        &mut self,
        now: TimeUs,
        delivered: Vec<Event<Update>>,
        out: &mut Vec<(NodeId, Msg)>,
    ) {
        let mut changed = false;
        let mut joined = Vec::new();
        for e in delivered {
            if self.opts.plant == Some(Plant::IgnoreLeaves) && matches!(e.payload, Update::Leave(_))
            {
                continue;
            }
            if self.view.apply(e.payload) {
                changed = true;
                if let Update::Join(m) = e.payload {
                    joined.push(m);
                }
            }
        }
        if !changed {
            return;
        }
        self.after_merge(now);
        let ring = &self.view.members().to_vec();
        for p in joined {
            let introduced = self.introduced.remove(&p);
            if !self.view.contains(p) || p == self.me {
                continue;
            }
            let first = guardians(ring, p.node, self.opts.guardians)
                .into_iter()
                .min();
            if first == Some(self.me.node) || introduced {
                self.send(out, p.node, self.view_copy());
            }
        }
    }

    /// The view changed by delivery or by a merge: act on it.
    fn after_merge(&mut self, now: TimeUs) {
        if self.view.removed(self.me) {
            if matches!(self.phase, Phase::Member) && self.leaving {
                self.phase = Phase::Left;
            } else {
                self.removed(now);
            }
            return;
        }
        if matches!(self.phase, Phase::Joining { .. }) && self.view.contains(self.me) {
            self.become_member(now);
            return;
        }
        if matches!(self.phase, Phase::Member) {
            self.on_view_change(now);
        }
    }
}

impl Core for Node {
    type Msg = Msg;

    fn step(&mut self, now: TimeUs, input: Input<Msg>, out: &mut Vec<(NodeId, Msg)>) {
        match input {
            Input::Start => {
                if matches!(self.phase, Phase::Member) {
                    self.view = View::founded_by(self.me);
                    self.become_member(now);
                }
            }
            Input::Leave => match self.phase {
                Phase::Member if !self.leaving => {
                    self.leaving = true;
                    self.epto.broadcast(Update::Leave(self.me));
                }
                // Not (or no longer) a member: stop joining. A JOIN already delivered
                // elsewhere makes it a silent member, which its guardians remove.
                Phase::Joining { .. } | Phase::Removed { .. } => self.phase = Phase::Left,
                _ => {}
            },
            Input::Timeout => self.on_timers(now, out),
            Input::Message { from, msg } => self.on_message(now, from, msg, out),
        }
    }

    fn deadline(&self) -> Option<TimeUs> {
        match self.phase {
            Phase::Joining { next_try, .. } => Some(next_try),
            Phase::Removed { rejoin_at } => Some(rejoin_at),
            Phase::Left => None,
            Phase::Member => Some(
                self.next_round
                    .min(self.next_shuffle)
                    .min(self.next_heartbeat)
                    .min(self.next_digest),
            ),
        }
    }

    fn view(&self) -> Option<ViewStamp> {
        matches!(self.phase, Phase::Member).then(|| self.view.stamp())
    }

    fn members(&self) -> Vec<NodeId> {
        if matches!(self.phase, Phase::Member) {
            self.view.members().iter().map(|m| m.node).collect()
        } else {
            Vec::new()
        }
    }

    fn wire_size(msg: &Msg) -> usize {
        // A header (type, sender, length) of 16 bytes, then the payload's fields.
        16 + match msg {
            Msg::Shuffle(e) | Msg::ShuffleReply(e) => 8 * e.len(),
            Msg::Ball(events) => 32 * events.len(),
            Msg::Discovery(_) | Msg::Suspicion(_) | Msg::Alive(_) => 8,
            Msg::ViewCopy { entries: e, .. } | Msg::Repair { entries: e, .. } => 8 + 12 * e.len(),
            Msg::Heartbeat { .. } => 24,
            Msg::NotMember(e) => 12 * e.len(),
            Msg::Probe => 0,
            Msg::Digest(_) => 16,
        }
    }
}

impl Node {
    fn on_timers(&mut self, now: TimeUs, out: &mut Vec<(NodeId, Msg)>) {
        match self.phase {
            Phase::Joining { attempts, next_try } => {
                if now >= next_try {
                    if !self.seeds.is_empty() {
                        let i = self.rng.below(self.seeds.len() as u64) as usize;
                        let to = self.seeds[i];
                        self.send(out, to, Msg::Discovery(self.me));
                    }
                    self.phase = Phase::Joining {
                        attempts: attempts + 1,
                        next_try: now + self.opts.join_retry_us,
                    };
                }
            }
            Phase::Removed { rejoin_at } => {
                if now >= rejoin_at {
                    self.rejoin(now);
                    self.on_timers(now, out);
                }
            }
            Phase::Left => {}
            Phase::Member => {
                if now >= self.next_round {
                    self.next_round = now + self.opts.round_us;
                    let mut delivered = Vec::new();
                    let ball = self.epto.round(&mut delivered);
                    if !ball.is_empty() {
                        for to in self.gossip_targets() {
                            self.send(out, to, Msg::Ball(ball.clone()));
                        }
                    }
                    self.deliver(now, delivered, out);
                    if !matches!(self.phase, Phase::Member) {
                        return;
                    }
                }
                if now >= self.next_shuffle {
                    self.next_shuffle = now + self.opts.cyclon_interval_us;
                    if let Some((q, entries)) = self.cyclon.start_shuffle(&mut self.rng) {
                        self.send(out, q, Msg::Shuffle(entries));
                    }
                }
                if now >= self.next_digest {
                    self.next_digest = now + self.opts.digest_us;
                    let lagged = self
                        .holes
                        .stamp_at(now.saturating_sub(self.repair_window()));
                    if let (Some(stamp), Some(&to)) = (lagged, self.gossip_targets().first()) {
                        self.send(out, to, Msg::Digest(stamp));
                    }
                }
                if now >= self.next_heartbeat {
                    self.next_heartbeat = now + self.opts.heartbeat_us;
                    let stamp = self.view.stamp();
                    for g in self.detector.my_guardians() {
                        self.send(
                            out,
                            g,
                            Msg::Heartbeat {
                                from: self.me,
                                stamp,
                            },
                        );
                    }
                    let mut signals = Vec::new();
                    self.detector.check(now, &mut signals);
                    self.carry_out(signals, out);
                }
            }
        }
    }

    /// K gossip targets: CYCLON's sample, topped up from the view when the cache is short (a
    /// newcomer's first rounds, a small cluster).
    fn gossip_targets(&mut self) -> Vec<NodeId> {
        let k = self.epto.params().fanout;
        let mut targets = self.cyclon.sample(k, &mut self.rng);
        if targets.len() < k {
            let mut others: Vec<NodeId> = self
                .view
                .members()
                .iter()
                .map(|m| m.node)
                .filter(|&n| n != self.me.node && !targets.contains(&n))
                .collect();
            while targets.len() < k && !others.is_empty() {
                let i = self.rng.below(others.len() as u64) as usize;
                targets.push(others.swap_remove(i));
            }
        }
        targets
    }

    fn carry_out(&mut self, signals: Vec<Signal>, out: &mut Vec<(NodeId, Msg)>) {
        for s in signals {
            match s {
                Signal::Suspicion { to, suspect } => self.send(out, to, Msg::Suspicion(suspect)),
                Signal::Alive { to, suspect } => self.send(out, to, Msg::Alive(suspect)),
                Signal::Probe { to } => self.send(out, to, Msg::Probe),
                Signal::Decide(m) => {
                    self.stats.decided += 1;
                    self.epto.broadcast(Update::Leave(m));
                }
            }
        }
    }

    /// Longer than EpTO takes to deliver an event everywhere.
    fn repair_window(&self) -> TimeUs {
        (self.epto.params().ttl as TimeUs + 2) * self.opts.round_us
    }

    fn maybe_repair(
        &mut self,
        now: TimeUs,
        peer: NodeId,
        stamp: ViewStamp,
        out: &mut Vec<(NodeId, Msg)>,
    ) {
        let window = self.repair_window();
        let current = self.view.stamp();
        if !self.holes.on_heartbeat(now, peer, stamp, current, window) {
            return;
        }
        self.stats.repairs += 1;
        self.send(
            out,
            peer,
            Msg::Repair {
                entries: self.view.entries(),
                reply: true,
                clock: self.epto.clock(),
            },
        );
    }

    fn merge(&mut self, now: TimeUs, entries: &[(NodeId, u64)]) {
        let kept: Vec<(NodeId, u64)>;
        let entries = if self.opts.plant == Some(Plant::IgnoreLeaves) {
            kept = entries.iter().copied().filter(|e| e.1 & 1 == 0).collect();
            &kept[..]
        } else {
            entries
        };
        if self.view.merge(entries) {
            self.after_merge(now);
        }
    }

    fn on_message(&mut self, now: TimeUs, from: NodeId, msg: Msg, out: &mut Vec<(NodeId, Msg)>) {
        let member = matches!(self.phase, Phase::Member);
        match msg {
            Msg::ViewCopy { entries, clock } => {
                if matches!(self.phase, Phase::Member | Phase::Joining { .. }) {
                    self.epto.observe(clock);
                    self.merge(now, &entries);
                }
            }
            Msg::NotMember(entries) => {
                if !matches!(self.phase, Phase::Left) {
                    self.merge(now, &entries);
                }
            }
            Msg::Probe if matches!(self.phase, Phase::Joining { .. } | Phase::Member) => {
                // A guardian suspects this node. A joiner answers too: guardians that delivered
                // its JOIN watch it before its view copy arrives.
                let stamp = self.view.stamp();
                self.send(
                    out,
                    from,
                    Msg::Heartbeat {
                        from: self.me,
                        stamp,
                    },
                );
            }
            Msg::Heartbeat { from: p, .. } if !member && self.view.removed(p) => {
                // A removed node that knows it tells those that heartbeat it and do not.
                self.send(out, p.node, Msg::NotMember(self.view.entries()));
            }
            _ if !member => {} // the rest is for members only
            Msg::Shuffle(entries) => {
                let reply = self.cyclon.on_shuffle(&entries, &mut self.rng);
                self.send(out, from, Msg::ShuffleReply(reply));
            }
            Msg::ShuffleReply(entries) => self.cyclon.on_shuffle_reply(&entries),
            Msg::Ball(events) => self.epto.on_ball(&events),
            Msg::Discovery(p) => {
                if self.view.contains(p) {
                    self.send(out, p.node, self.view_copy());
                } else if self.view.removed(p) {
                    self.send(out, p.node, Msg::NotMember(self.view.entries()));
                } else {
                    self.epto.broadcast(Update::Join(p));
                    // The introducer sends a view copy too when it delivers the JOIN: the
                    // first guardian may be a joiner itself, not yet able to.
                    if self.introduced.len() < MAX_INTRODUCED {
                        self.introduced.insert(p);
                    }
                }
            }
            Msg::Heartbeat { from: p, stamp } => {
                if self.view.contains(p) {
                    let mut signals = Vec::new();
                    self.detector.on_heartbeat(now, p.node, &mut signals);
                    self.carry_out(signals, out);
                    self.maybe_repair(now, p.node, stamp, out);
                } else if self.view.removed(p) {
                    self.send(out, p.node, Msg::NotMember(self.view.entries()));
                }
            }
            Msg::Suspicion(suspect) => {
                let mut signals = Vec::new();
                self.detector.on_suspicion(now, from, suspect, &mut signals);
                self.carry_out(signals, out);
            }
            Msg::Alive(suspect) => self.detector.on_alive(now, suspect),
            Msg::Digest(stamp) => {
                if !self.holes.held(stamp) && stamp != self.view.stamp() {
                    self.stats.repairs += 1;
                    self.send(
                        out,
                        from,
                        Msg::Repair {
                            entries: self.view.entries(),
                            reply: true,
                            clock: self.epto.clock(),
                        },
                    );
                }
            }
            Msg::Probe => {}
            Msg::Repair {
                entries,
                reply,
                clock,
            } => {
                self.epto.observe(clock);
                self.merge(now, &entries);
                if reply {
                    self.send(
                        out,
                        from,
                        Msg::Repair {
                            entries: self.view.entries(),
                            reply: false,
                            clock: self.epto.clock(),
                        },
                    );
                }
            }
        }
    }
}

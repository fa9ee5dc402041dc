//! The simpler design, for comparison on the same runs: one small replicated group (5 servers)
//! holds the view, as ZooKeeper (ephemeral nodes and session pings) and etcd (leases and
//! member lists) do. Every member pings the group's leader every `heartbeat`; the leader expires
//! a member silent for `session_timeout` and commits its LEAVE; a newcomer asks the leader to
//! commit its JOIN; every committed change is pushed to every member with the whole member list
//! (a watch firing and the client re-reading the children).
//!
//! This is a cost and latency **model**, not a second consensus implementation: the group's
//! log is replicated to a majority before it commits, and a group server takes over as leader
//! when every lower-id server has been silent for `election` (its log then counts as
//! committed, which Zab, proven elsewhere in synod, guarantees for real). What it measures is
//! what differs from PRIME: the leader's load, and the time a change takes to reach everyone.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Core, Input, NodeId, TimeUs, ViewStamp};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Servers 1..=group hold the view.
    pub group: usize,
    pub heartbeat_us: TimeUs,
    pub session_timeout_us: TimeUs,
    pub election_us: TimeUs,
    pub join_retry_us: TimeUs,
}

impl Options {
    /// ZooKeeper-like settings beside PRIME's thesis settings: pings every 500 ms, sessions of
    /// 6 s (PRIME's acceptable heartbeat pause), a 2 s election.
    pub const ZOOKEEPER_LIKE: Options = Options {
        group: 5,
        heartbeat_us: 500_000,
        session_timeout_us: 6_000_000,
        election_us: 2_000_000,
        join_retry_us: 2_000_000,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Join(NodeId),
    Leave(NodeId),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Ping,
    Pong,
    /// "I do not lead; try this one."
    NotLeader(Option<NodeId>),
    /// "Your session expired": rejoin.
    Expired,
    Join,
    Leave,
    Append {
        index: u64,
        change: Change,
    },
    AppendAck {
        index: u64,
    },
    Commit {
        upto: u64,
    },
    /// Group servers' liveness among themselves.
    ServerBeat,
    /// The whole view (to a newcomer, or a member that missed a change).
    ViewPush {
        version: u64,
        members: Vec<NodeId>,
    },
    /// One committed change, the view's version after it.
    ViewDelta {
        version: u64,
        change: Change,
    },
    /// "I missed a change: send the whole view."
    Fetch,
}

fn hash_of(members: &BTreeSet<NodeId>) -> u64 {
    members.iter().fold(0u64, |h, &n| {
        let mut z = (n as u64) ^ 0x9e37_79b9_7f4a_7c15;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h.wrapping_add(z ^ (z >> 31))
    })
}

#[derive(Clone, Debug)]
pub struct Node {
    me: NodeId,
    opts: Options,
    servers: Vec<NodeId>,
    members: BTreeSet<NodeId>,
    version: u64,
    member: bool,
    // Member side.
    leader_guess: NodeId,
    last_pong: TimeUs,
    next_ping: TimeUs,
    joining: bool,
    left: bool,
    // Server side.
    log: Vec<Change>,
    committed: u64,
    acks: BTreeMap<u64, BTreeSet<NodeId>>,
    sessions: BTreeMap<NodeId, TimeUs>,
    server_heard: BTreeMap<NodeId, TimeUs>,
    leading: bool,
    next_beat: TimeUs,
    /// Times this node was dropped from the view while alive (session expired) and rejoined.
    rejoins: u64,
}

impl Node {
    fn blank(me: NodeId, opts: Options) -> Self {
        let servers: Vec<NodeId> = (1..=opts.group as NodeId).collect();
        Node {
            me,
            opts,
            servers,
            members: BTreeSet::new(),
            version: 0,
            member: false,
            leader_guess: 1,
            last_pong: 0,
            next_ping: 0,
            joining: false,
            left: false,
            log: Vec::new(),
            committed: 0,
            acks: BTreeMap::new(),
            sessions: BTreeMap::new(),
            server_heard: BTreeMap::new(),
            leading: false,
            next_beat: 0,
            rejoins: 0,
        }
    }

    /// One of the group's servers, present from the start (ids 1..=group).
    pub fn server(me: NodeId, opts: Options) -> Self {
        let mut n = Self::blank(me, opts);
        assert!(n.is_server(), "servers are 1..=group");
        n.members = n.servers.iter().copied().collect();
        n.member = true;
        n
    }

    /// A node joining the view.
    pub fn joiner(me: NodeId, opts: Options) -> Self {
        let mut n = Self::blank(me, opts);
        n.joining = true;
        n
    }

    /// Times this node was dropped from the view while alive and had to rejoin.
    pub fn rejoins(&self) -> u64 {
        self.rejoins
    }

    fn is_server(&self) -> bool {
        self.servers.contains(&self.me)
    }

    fn leader_now(&self, now: TimeUs) -> NodeId {
        // The lowest-id server heard within the election bound (this one, if none lower is).
        self.servers
            .iter()
            .copied()
            .find(|&s| {
                s == self.me
                    || self
                        .server_heard
                        .get(&s)
                        .is_some_and(|&t| now.saturating_sub(t) < self.opts.election_us)
            })
            .unwrap_or(self.me)
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Join(n) => {
                self.members.insert(n);
            }
            Change::Leave(n) => {
                self.members.remove(&n);
            }
        }
        self.version += 1;
    }

    fn propose(&mut self, change: Change, out: &mut Vec<(NodeId, Msg)>) {
        let already = self.log[self.committed as usize..].contains(&change);
        let moot = match change {
            Change::Join(n) => self.members.contains(&n),
            Change::Leave(n) => !self.members.contains(&n),
        };
        if already || moot {
            return;
        }
        self.log.push(change);
        let index = self.log.len() as u64;
        self.acks.insert(index, BTreeSet::from([self.me]));
        for &s in &self.servers {
            if s != self.me {
                out.push((s, Msg::Append { index, change }));
            }
        }
    }

    fn commit_upto(&mut self, upto: u64, out: &mut Vec<(NodeId, Msg)>) {
        if upto <= self.committed {
            return;
        }
        let mut changes = Vec::new();
        while self.committed < upto.min(self.log.len() as u64) {
            let c = self.log[self.committed as usize];
            self.committed += 1;
            self.apply(c);
            changes.push((self.version, c));
            if let Change::Leave(n) = c {
                self.sessions.remove(&n);
            }
        }
        if !self.leading {
            return;
        }
        for &s in &self.servers {
            if s != self.me {
                out.push((
                    s,
                    Msg::Commit {
                        upto: self.committed,
                    },
                ));
            }
        }
        // Watches fire with the change (etcd's watch events): members apply it in version
        // order; a newcomer gets the whole list once.
        for (version, change) in changes {
            for &m in &self.members {
                if m == self.me || self.servers.contains(&m) {
                    continue;
                }
                if change == Change::Join(m) {
                    self.push_view(m, out);
                } else {
                    out.push((m, Msg::ViewDelta { version, change }));
                }
            }
        }
    }

    fn push_view(&self, to: NodeId, out: &mut Vec<(NodeId, Msg)>) {
        let members: Vec<NodeId> = self.members.iter().copied().collect();
        out.push((
            to,
            Msg::ViewPush {
                version: self.version,
                members,
            },
        ));
    }
}

impl Core for Node {
    type Msg = Msg;

    fn step(&mut self, now: TimeUs, input: Input<Msg>, out: &mut Vec<(NodeId, Msg)>) {
        let server = self.is_server();
        match input {
            Input::Start => {
                // Servers start together: each counts the others heard, so the lowest leads.
                if server {
                    for &s in &self.servers {
                        self.server_heard.insert(s, now);
                    }
                }
                self.next_ping = now;
                self.next_beat = now;
                self.last_pong = now;
            }
            Input::Leave => {
                self.left = true;
                out.push((self.leader_guess, Msg::Leave));
            }
            Input::Timeout if server => {
                if now >= self.next_beat {
                    self.next_beat = now + self.opts.heartbeat_us;
                    for &s in &self.servers {
                        if s != self.me {
                            out.push((s, Msg::ServerBeat));
                        }
                    }
                    let lead = self.leader_now(now) == self.me;
                    if lead && !self.leading {
                        // Take over: the log counts as committed; every session starts afresh.
                        self.leading = true;
                        let upto = self.log.len() as u64;
                        self.commit_upto(upto, out);
                        let members: Vec<NodeId> = self.members.iter().copied().collect();
                        for m in members {
                            self.sessions.insert(m, now);
                        }
                    }
                    self.leading = lead;
                    if self.leading {
                        let expired: Vec<NodeId> = self
                            .sessions
                            .iter()
                            .filter(|(&m, &t)| {
                                m != self.me
                                    && now.saturating_sub(t) >= self.opts.session_timeout_us
                            })
                            .map(|(&m, _)| m)
                            .collect();
                        for m in expired {
                            if self.servers.contains(&m) {
                                continue; // a server's liveness is the group's business
                            }
                            self.sessions.remove(&m);
                            self.propose(Change::Leave(m), out);
                        }
                    }
                }
            }
            Input::Timeout => {
                if self.left || now < self.next_ping {
                    return;
                }
                self.next_ping = now + self.opts.heartbeat_us;
                let wait = if self.joining {
                    self.opts.join_retry_us
                } else {
                    self.opts.heartbeat_us
                };
                if now.saturating_sub(self.last_pong) > 2 * wait {
                    // No answer: try the next server.
                    let i = self
                        .servers
                        .iter()
                        .position(|&s| s == self.leader_guess)
                        .unwrap_or(0);
                    self.leader_guess = self.servers[(i + 1) % self.servers.len()];
                    self.last_pong = now;
                }
                if self.joining {
                    self.next_ping = now + self.opts.join_retry_us;
                    out.push((self.leader_guess, Msg::Join));
                } else {
                    out.push((self.leader_guess, Msg::Ping));
                }
            }
            Input::Message { from, msg } => self.on_message(now, from, msg, out),
        }
    }

    fn deadline(&self) -> Option<TimeUs> {
        if self.is_server() {
            Some(self.next_beat)
        } else if self.left {
            None
        } else {
            Some(self.next_ping)
        }
    }

    fn view(&self) -> Option<ViewStamp> {
        self.member.then(|| ViewStamp {
            version: self.version,
            hash: hash_of(&self.members),
        })
    }

    fn members(&self) -> Vec<NodeId> {
        if self.member {
            self.members.iter().copied().collect()
        } else {
            Vec::new()
        }
    }

    fn wire_size(msg: &Msg) -> usize {
        16 + match msg {
            Msg::ViewPush { members, .. } => 8 + 4 * members.len(),
            Msg::Append { .. } | Msg::ViewDelta { .. } => 16,
            Msg::AppendAck { .. } | Msg::Commit { .. } | Msg::NotLeader(_) => 8,
            _ => 0,
        }
    }
}

impl Node {
    fn on_message(&mut self, now: TimeUs, from: NodeId, msg: Msg, out: &mut Vec<(NodeId, Msg)>) {
        match msg {
            Msg::ServerBeat => {
                self.server_heard.insert(from, now);
            }
            Msg::Ping | Msg::Join | Msg::Leave | Msg::Fetch
                if self.is_server() && !self.leading =>
            {
                let leader = self.leader_now(now);
                out.push((from, Msg::NotLeader((leader != self.me).then_some(leader))));
            }
            Msg::Ping => {
                if self.members.contains(&from) {
                    self.sessions.insert(from, now);
                    out.push((from, Msg::Pong));
                } else if !self.log[self.committed as usize..].contains(&Change::Join(from)) {
                    out.push((from, Msg::Expired));
                }
            }
            Msg::Fetch => self.push_view(from, out),
            Msg::Join => {
                self.sessions.insert(from, now);
                if self.members.contains(&from) {
                    self.push_view(from, out);
                } else {
                    self.propose(Change::Join(from), out);
                }
            }
            Msg::Leave => self.propose(Change::Leave(from), out),
            Msg::Append { index, change } => {
                if index == 0 {
                    return;
                }
                if index <= self.committed {
                    // Committed here already: never truncate below it.
                    out.push((from, Msg::AppendAck { index }));
                    return;
                }
                let i = index as usize;
                if i <= self.log.len() + 1 {
                    self.log.truncate(i - 1);
                    self.log.push(change);
                    out.push((from, Msg::AppendAck { index }));
                }
            }
            Msg::AppendAck { index } => {
                if !self.leading {
                    return;
                }
                let Some(acks) = self.acks.get_mut(&index) else {
                    return;
                };
                acks.insert(from);
                if acks.len() * 2 > self.servers.len() {
                    self.acks.retain(|&i, _| i > index);
                    self.commit_upto(index, out);
                }
            }
            Msg::Commit { upto } => self.commit_upto(upto, out),
            Msg::Pong => self.last_pong = now,
            Msg::NotLeader(l) => {
                if let Some(l) = l {
                    self.leader_guess = l;
                }
                self.last_pong = now;
            }
            Msg::Expired => {
                self.last_pong = now;
                if self.member {
                    self.rejoins += 1;
                }
                self.member = false;
                self.joining = !self.left;
            }
            Msg::ViewDelta { version, change } => {
                self.last_pong = now;
                if !self.member || version <= self.version {
                    return;
                }
                if version > self.version + 1 {
                    out.push((from, Msg::Fetch));
                    return;
                }
                self.apply(change);
                if !self.members.contains(&self.me) {
                    self.rejoins += u64::from(!self.left);
                    self.member = false;
                    self.joining = !self.left;
                }
            }
            Msg::ViewPush { version, members } => {
                self.last_pong = now;
                if version >= self.version || !self.member {
                    self.version = version;
                    self.members = members.into_iter().collect();
                }
                if self.members.contains(&self.me) {
                    self.member = true;
                    self.joining = false;
                } else if self.member {
                    self.rejoins += u64::from(!self.left);
                    self.member = false;
                    self.joining = !self.left;
                }
            }
        }
    }
}

//! Configuration changes among the faults (`FaultKind::Reconfig`), and the ledger the checkers
//! read: which configuration each delivered position belongs to.
//!
//! A reconfig fault asks a group's leader, through its host, to add, remove, promote, demote or
//! replace one node (docs/membership.md). The ledger records each configuration at the slot of
//! its first delivery; from it the crash-tolerance checker knows, for any delivered slot, whose
//! majority must hold it (a majority of the voters of the configuration before it, and of its
//! own configuration when the slot is a change), and the settled check knows which nodes must
//! follow at the end (the members of the last configuration).

use super::{Token, World};
use crate::faults::Fault;
use crate::App;
use bytes::Bytes;
use rand_core::RngCore;
use std::collections::BTreeMap;
use synod_core::wire::Wire;
use synod_core::{Change, Config, GroupId, NodeId};
use synod_host::register::RegisterCmd;
use synod_host::Hosted;

/// What the checkers know of one group's configurations.
pub(crate) struct Ledger {
    /// Every configuration delivered, by the slot of its entry (the group's birth configuration
    /// at slot 0), in slot order.
    pub(crate) configs: Vec<(u64, Config)>,
    /// Changes submitted and not yet refused, by command id: the voters and learners asked.
    pub(crate) submitted: BTreeMap<u64, (Vec<NodeId>, Vec<NodeId>)>,
    /// The command id of each change asked, by the ask's number (its token).
    asks: BTreeMap<u64, u64>,
    /// Asks refused before their command id was known (the core refused at once).
    refused: Vec<u64>,
    next_ask: u64,
}

impl Ledger {
    pub(crate) fn new(members: &[NodeId]) -> Self {
        Ledger {
            configs: vec![(0, Config::initial(members))],
            submitted: BTreeMap::new(),
            asks: BTreeMap::new(),
            refused: Vec::new(),
            next_ask: 0,
        }
    }

    /// The configuration in force before `slot`: the last one delivered at a lower slot.
    pub(crate) fn before(&self, slot: u64) -> &Config {
        let i = self.configs.partition_point(|(s, _)| *s < slot);
        &self.configs[i.saturating_sub(1)].1
    }

    pub(crate) fn latest(&self) -> &Config {
        &self.configs.last().expect("the birth configuration").1
    }

    /// A command was delivered at `slot` with `tag`: if it is a change, record its
    /// configuration (once, at its first delivery).
    pub(crate) fn delivered(&mut self, slot: u64, tag: u64, id: u64) -> Option<&Config> {
        let (voters, learners) = self.submitted.get(&id)?;
        if self.configs.iter().any(|(s, _)| *s == slot) {
            return None;
        }
        let c = Config::new(tag, voters.clone(), learners.clone()).expect("checked when drawn");
        let i = self.configs.partition_point(|(s, _)| *s < slot);
        self.configs.insert(i, (slot, c));
        Some(&self.configs[i].1)
    }

    /// Every configuration a decision may have to satisfy now: the last delivered, and those
    /// submitted and not yet delivered or refused (the voters asked).
    pub(crate) fn in_doubt(&self) -> Vec<Vec<NodeId>> {
        let mut all = vec![self.latest().voters.clone()];
        all.extend(self.submitted.values().map(|(v, _)| v.clone()));
        all
    }
}

impl<P: Hosted> World<P> {
    /// The node ids a group's last delivered configuration names (voters and learners).
    pub(super) fn final_members(&self, g: usize) -> Vec<NodeId> {
        let c = self.ledgers[g].latest();
        let mut m: Vec<NodeId> = c.voters.iter().chain(&c.learners).copied().collect();
        m.sort_unstable();
        m
    }

    /// A reconfig fault: draw one change of one group's configuration and hand it to the
    /// group's leader, if it has one now.
    pub(super) fn reconfigure(&mut self, f: &Fault) {
        let groups = self.histories.len();
        let g = f.factor as usize % groups;
        if matches!(self.cfg.app, App::ZooKeeper(_)) {
            self.tracef(|| "reconfig skipped: this app has no reconfiguration command".into());
            return;
        }
        let Some(i) = (0..self.nodes.len()).find(|&i| {
            self.nodes[i].up && self.nodes[i].groups[g].role == synod_core::Role::Leading
        }) else {
            self.tracef(|| format!("reconfig of group {g} skipped: no leader"));
            return;
        };
        // Now and then a second change right behind the first, computed from it: the leader
        // must refuse it while the first is in flight.
        let asks = if self.rng.next_u64().is_multiple_of(4) {
            2
        } else {
            1
        };
        let mut from = self.ledgers[g].latest().clone();
        for k in 0..asks {
            let Some((voters, learners, what)) = self.draw_change(&from) else {
                return;
            };
            let latest = (k == 0).then_some(self.ledgers[g].latest().version);
            self.ask_change(i, g, latest, (voters.clone(), learners.clone()), what);
            from = Config::new(from.version + 1, voters, learners).expect("drawn valid");
        }
    }

    /// Hand one change to node `i`'s host for group `g`.
    fn ask_change(
        &mut self,
        i: usize,
        g: usize,
        latest: Option<u64>,
        (voters, learners): (Vec<NodeId>, Vec<NodeId>),
        what: String,
    ) {
        let expect_version = latest.filter(|_| self.rng.next_u64() & 1 == 0);
        let payload = match self.cfg.app {
            App::Registers => RegisterCmd::Put {
                key: format!("reconfig.{g}"),
                value: Bytes::from(what.clone()),
            }
            .to_bytes(),
            // A bucket's change carries a command its machine applies as nothing: an
            // acknowledgement of no message from no bucket.
            App::Kv(_) => synod_kv::Cmd::Ack {
                from: u32::MAX,
                upto: 0,
            }
            .to_bytes(),
            // An etcd store's change carries a barrier (applied as nothing).
            App::Etcd(_) => super::etcd::barrier(),
            _ => self.payload.clone(),
        };
        let change = Change {
            expect_version,
            voters: voters.clone(),
            learners: learners.clone(),
        };
        let now = self.local_now(i);
        let ask = self.ledgers[g].next_ask;
        self.ledgers[g].next_ask += 1;
        let id = self.nodes[i].id;
        self.tracef(|| format!("n{id} g{g} asked to {what}: {voters:?} learners {learners:?}"));
        *self.report.faults.entry("reconfig-asked").or_default() += 1;
        let mut submitted = None;
        self.with_host(i, |h| {
            submitted = h
                .reconfigure(now, g as GroupId, payload, change, Token::Reconfig(g, ask))
                .ok();
        });
        let ledger = &mut self.ledgers[g];
        if let Some(k) = ledger.refused.iter().position(|&a| a == ask) {
            ledger.refused.swap_remove(k);
        } else if let Some(cmd) = submitted {
            ledger.submitted.insert(cmd, (voters, learners));
            ledger.asks.insert(ask, cmd);
        }
    }

    /// One change of the last delivered configuration: add a node as learner or voter,
    /// promote, demote or remove one, or replace a voter with a new one (two voters at once,
    /// through the joint rule). A node that stays down for good is never made a voter.
    fn draw_change(&mut self, c: &Config) -> Option<(Vec<NodeId>, Vec<NodeId>, String)> {
        let n = self.nodes.len() as NodeId;
        let up_for_good = |w: &World<P>, id: NodeId| !w.nodes[id as usize - 1].stays_down;
        let outside: Vec<NodeId> = (1..=n).filter(|id| !c.is_member(*id)).collect();
        let eligible: Vec<NodeId> = outside
            .iter()
            .copied()
            .filter(|&id| up_for_good(self, id))
            .collect();
        let promotable: Vec<NodeId> = c
            .learners
            .iter()
            .copied()
            .filter(|&id| up_for_good(self, id))
            .collect();
        let (mut voters, mut learners) = (c.voters.clone(), c.learners.clone());
        let pick = |rng: &mut rand_xoshiro::Xoshiro256PlusPlus, from: &[NodeId]| {
            from[(rng.next_u64() % from.len() as u64) as usize]
        };
        for _ in 0..8 {
            let what = match self.rng.next_u64() % 7 {
                0 if !outside.is_empty() => {
                    let id = pick(&mut self.rng, &outside);
                    learners.push(id);
                    format!("add n{id} as a learner")
                }
                1 if !eligible.is_empty() => {
                    let id = pick(&mut self.rng, &eligible);
                    voters.push(id);
                    format!("add n{id} as a voter")
                }
                2 if !promotable.is_empty() => {
                    let id = pick(&mut self.rng, &promotable);
                    learners.retain(|&l| l != id);
                    voters.push(id);
                    format!("promote n{id}")
                }
                3 if voters.len() > 1 => {
                    let id = pick(&mut self.rng, &c.voters);
                    voters.retain(|&v| v != id);
                    learners.push(id);
                    format!("demote n{id}")
                }
                4 if voters.len() > 1 => {
                    let id = pick(&mut self.rng, &c.voters);
                    voters.retain(|&v| v != id);
                    format!("remove voter n{id}")
                }
                5 if !c.learners.is_empty() => {
                    let id = pick(&mut self.rng, &c.learners);
                    learners.retain(|&l| l != id);
                    format!("remove learner n{id}")
                }
                6 if !eligible.is_empty() => {
                    let out = pick(&mut self.rng, &c.voters);
                    let id = pick(&mut self.rng, &eligible);
                    voters.retain(|&v| v != out);
                    voters.push(id);
                    format!("replace voter n{out} with n{id}")
                }
                _ => continue,
            };
            voters.sort_unstable();
            learners.sort_unstable();
            return Some((voters, learners, what));
        }
        None
    }

    /// A change's answer came back. A refusal (the core's, or no leader) takes it off the
    /// ledger's doubts; a timeout does not (the change may still be delivered).
    pub(super) fn reconfig_reply(&mut self, g: usize, ask: u64, result: &synod_host::SubmitResult) {
        use synod_host::SubmitError;
        match result {
            Ok(a) => {
                let id = a.id;
                *self.report.faults.entry("reconfig-done").or_default() += 1;
                self.tracef(|| format!("g{g} reconfig command {id} delivered"));
                self.ledgers[g].asks.remove(&ask);
            }
            Err(e @ (SubmitError::Config(_) | SubmitError::NoLeader)) => {
                let e = format!("{e:?}");
                *self.report.faults.entry("reconfig-refused").or_default() += 1;
                self.tracef(|| format!("g{g} reconfig refused: {e}"));
                let ledger = &mut self.ledgers[g];
                match ledger.asks.remove(&ask) {
                    Some(cmd) => {
                        ledger.submitted.remove(&cmd);
                    }
                    None => ledger.refused.push(ask),
                }
            }
            Err(e) => {
                let e = format!("{e:?}");
                self.tracef(|| format!("g{g} reconfig unanswered: {e}"));
            }
        }
    }
}

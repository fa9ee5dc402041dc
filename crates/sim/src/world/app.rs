//! What the clients ask of the groups' state machines (the app), and the checks at the end of a
//! run that look inside them: every acknowledged command is in the history, replicas that
//! applied the same commands hold the same state, and (the register app) every message between
//! groups arrived and none is left unacknowledged.

use super::World;
use crate::check::Checker;
use crate::App;
use bytes::Bytes;
use rand_core::RngCore;
use synod_core::wire::Wire;
use synod_core::GroupId;
use synod_host::register::RegisterCmd;
use synod_host::Hosted;

impl<P: Hosted> World<P> {
    /// The payload of client `c`'s next command in group `g` under the register app: a put of
    /// a key of its own, or (a `relay_ratio` of them, with more than one group) a relay of one
    /// to another group, recorded for the end-of-run check once its id is known.
    pub(super) fn register_command(
        &mut self,
        c: usize,
        g: usize,
        n: u64,
    ) -> (Bytes, Option<Relay>) {
        let groups = self.histories.len();
        let value = Bytes::from(format!("{c}.{n}"));
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if groups > 1 && u < self.cfg.workload.relay_ratio {
            let to = (g + 1 + self.rng.next_u64() as usize % (groups - 1)) % groups;
            let key = format!("r{c}.{n}");
            let cmd = RegisterCmd::Relay {
                to: to as GroupId,
                key: key.clone(),
                value: value.clone(),
            };
            (cmd.to_bytes(), Some((g, to, key, value)))
        } else {
            let cmd = RegisterCmd::Put {
                key: format!("c{c}.{n}"),
                value,
            };
            (cmd.to_bytes(), None)
        }
    }

    /// The checks that look inside the machines, once the run is over and a quorum recovered.
    pub(super) fn app_checks(&mut self) {
        let now = self.now;
        for (g, id) in std::mem::take(&mut self.acknowledged) {
            if !self.histories[g].holds_command(id) {
                self.histories[g].violate(
                    Checker::Acknowledged,
                    now,
                    format!("a client was told command {id} was delivered, but no replica ever delivered it"),
                );
            }
        }
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].stays_down && self.nodes[i].up)
            .collect();
        for g in 0..self.histories.len() {
            let mut seen: Vec<(u64, u64, u32)> = Vec::new();
            for &i in &live {
                let (count, digest) = self.nodes[i].groups[g].digest();
                let id = self.nodes[i].id;
                match seen.iter().find(|(c, _, _)| *c == count) {
                    Some(&(_, d, other)) if d != digest => {
                        self.histories[g].violate(
                            Checker::Divergence,
                            now,
                            format!(
                                "n{id} and n{other} applied the same {count} commands but their \
                                 states differ (digests {digest:#x} and {d:#x})"
                            ),
                        );
                    }
                    Some(_) => {}
                    None => seen.push((count, digest, id)),
                }
            }
        }
        if !matches!(self.cfg.app, App::Registers) {
            return;
        }
        for &i in &live {
            let id = self.nodes[i].id;
            for g in 0..self.histories.len() {
                let left = self.nodes[i].groups[g].unacknowledged();
                if left > 0 {
                    self.histories[g].violate(
                        Checker::GroupMessages,
                        now,
                        format!("n{id}'s replica of group {g} still holds {left} unacknowledged messages to other groups at the end"),
                    );
                }
            }
        }
        let relays = std::mem::take(&mut self.relays);
        for (cmd, from, to, key, value) in &relays {
            if !self.histories[*from].holds_command(*cmd) {
                continue; // never ordered: nothing was promised
            }
            for &i in &live {
                let id = self.nodes[i].id;
                let got = self.nodes[i].groups[*to]
                    .register
                    .as_ref()
                    .and_then(|r| r.lock().expect("register").get(key));
                if got.as_ref() != Some(value) {
                    self.histories[*to].violate(
                        Checker::GroupMessages,
                        now,
                        format!(
                            "group {from} relayed {key} (command {cmd}) to group {to}, but n{id}'s \
                             replica of group {to} holds {got:?} for it at the end"
                        ),
                    );
                    return;
                }
            }
        }
    }
}

/// A relay submitted by a client: (from group, to group, key, value).
pub(super) type Relay = (usize, usize, String, Bytes);

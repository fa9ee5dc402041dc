//! FIFO streams (mencius.md §4.5, M8, §6.2.3). Optimizations 1 and 2 infer skips from the
//! order of a peer's messages: an ACCEPT or SUGGEST from `q` at instance `i` means every
//! instance of `q` below `i` whose SUGGEST did not come first is a skip. That is only true if
//! nothing `q` sent was lost. Each message carries its sender's incarnation and a per-receiver
//! sequence number; the receiver infers skips only from a stream it has followed without a
//! gap since a SYNC (or since the sender's first message ever). A gap, a broken connection or
//! a restarted sender stops inference until the sender answers a SYNCREQUEST with the list of
//! its instances it suggested (footnote 4's explicit alternative, used only to resynchronise).

use crate::msg::Body;
use crate::{Mencius, MenciusActions};
use synod_core::Command;

/// How long a SYNCREQUEST waits for its answer before it is sent again.
const SYNC_RETRY_US: u64 = 200_000;
/// Most suggestions one SYNC lists; a longer history is synchronised in several rounds.
pub(crate) const SYNC_MAX: usize = 4_096;

impl Mencius {
    /// Account for message `seq` of incarnation `epoch` from `q`. Returns whether skips may
    /// be inferred from it, or `None` to drop it (from an older incarnation of `q`).
    pub(crate) fn follow(
        &mut self,
        q: usize,
        epoch: u64,
        seq: u64,
        out: &mut MenciusActions,
    ) -> Option<bool> {
        let st = &mut self.streams_in[q];
        if epoch < st.epoch {
            return None;
        }
        // The first message of a replica's first incarnation: nothing was sent before it.
        let first_ever = st.epoch == 0 && epoch == 1 && seq == 1;
        let continuous = (st.epoch == epoch && seq == st.last + 1) || first_ever;
        if first_ever {
            st.synced = true;
        }
        if !continuous {
            st.synced = false;
        }
        st.epoch = epoch;
        st.last = seq;
        let synced = st.synced;
        if !synced && st.asked_at.is_none() {
            self.ask_sync(q, out);
        }
        Some(synced)
    }

    fn ask_sync(&mut self, q: usize, out: &mut MenciusActions) {
        self.streams_in[q].asked_at = Some(self.now);
        let from = self.est[q].max(self.own_at_or_after(q, self.expected));
        self.counters.syncs += 1;
        self.send(q, Body::SyncRequest { from }, 0, out);
    }

    /// Re-ask for SYNCs that did not come.
    pub(crate) fn stream_timers(&mut self, out: &mut MenciusActions) {
        for q in self.peers().collect::<Vec<_>>() {
            let st = self.streams_in[q];
            if st.synced || st.epoch == 0 {
                continue;
            }
            if st.asked_at.is_none_or(|t| self.now >= t + SYNC_RETRY_US) {
                self.ask_sync(q, out);
            }
        }
    }

    /// A peer asks which of this replica's instances from `from` on it suggested.
    pub(crate) fn on_sync_request(&mut self, q: usize, from: u64, out: &mut MenciusActions) {
        let from = self.own_at_or_after(self.me, from.max(self.base));
        let mut suggested: Vec<(u64, Option<Vec<Command>>)> = Vec::new();
        let mut upto = self.floor;
        let mut more = false;
        for (&i, x) in self.insts.range(from..self.floor.max(from)) {
            if self.owner(i) != self.me || !x.own {
                continue;
            }
            if suggested.len() >= SYNC_MAX {
                upto = i;
                more = true;
                break;
            }
            suggested.push((i, x.accepted.as_ref().map(|a| a.1.clone())));
        }
        let upto = upto.max(from);
        self.send(
            q,
            Body::Sync {
                from,
                upto,
                more,
                suggested,
            },
            self.floor_seq,
            out,
        );
        self.told[q] = self.told[q].max(upto);
    }

    /// The answer to a SYNCREQUEST: `q`'s own instances in `[from, upto)` that it suggested;
    /// the others are skips. From here on its stream is followed in sync, unless the list was
    /// cut short (`more`): then `q` suggested instances at or above `upto` that this replica
    /// may have missed (sent to its previous incarnation, or lost with a connection), and a
    /// later message of the stream says nothing about them, so it asks again from `upto`.
    pub(crate) fn on_sync(
        &mut self,
        q: usize,
        from: u64,
        upto: u64,
        more: bool,
        suggested: Vec<(u64, Option<Vec<Command>>)>,
        out: &mut MenciusActions,
    ) {
        let need = self.est[q].max(self.own_at_or_after(q, self.expected));
        if from > need {
            // `q` compacted instances this replica has not decided: catch-up first.
            self.streams_in[q].asked_at = Some(self.now);
            return;
        }
        for (i, v) in suggested {
            if i < from || i >= upto || self.owner(i) != q {
                continue;
            }
            match v {
                Some(cs) => self.on_suggest(q, i, Some(cs), false, out),
                None => {
                    if i >= self.base {
                        self.insts.entry(i).or_default().suggested = true;
                    }
                }
            }
        }
        // Below `from` everything of q is decided here already (from ≤ need).
        self.est[q] = self.est[q].max(from);
        self.infer_skips(q, upto);
        if more {
            self.ask_sync(q, out);
            return;
        }
        let st = &mut self.streams_in[q];
        st.synced = true;
        st.asked_at = None;
    }
}

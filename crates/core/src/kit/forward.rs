//! Forwarded batches: a replica that is not its group's leader forwards the commands submitted
//! to it, each batch numbered (`seq`) within the replica's incarnation (`nonce`, drawn from its
//! seed). The leader takes a forward only if it is numbered above the last one it took from
//! that incarnation: a reconnecting transport may deliver a broken connection's messages late,
//! or twice, and taking a replay would order its commands twice. Dropping it loses nothing a
//! client was told of: it retries after its timeout.

use crate::NodeId;
use std::collections::HashMap;

/// The sending side: the next number of this incarnation's forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numbering {
    pub nonce: u64,
    seq: u64,
}

impl Numbering {
    pub fn new(nonce: u64) -> Self {
        Numbering { nonce, seq: 0 }
    }

    /// The `(nonce, seq)` of the next forward.
    pub fn number(&mut self) -> (u64, u64) {
        self.seq += 1;
        (self.nonce, self.seq)
    }
}

/// The receiving side: the last forward taken from each replica.
#[derive(Clone, Debug, Default)]
pub struct Taken {
    last: HashMap<NodeId, (u64, u64)>,
}

impl Taken {
    /// Whether the forward `(nonce, seq)` from `from` is new (then it is recorded as taken);
    /// false for a replay of one taken before. A new nonce is a new incarnation of the sender.
    pub fn fresh(&mut self, from: NodeId, (nonce, seq): (u64, u64)) -> bool {
        match self.last.get(&from) {
            Some(&(n, last)) if n == nonce && seq <= last => false,
            _ => {
                self.last.insert(from, (nonce, seq));
                true
            }
        }
    }

    /// Forget every sender (a new leadership starts from scratch).
    pub fn clear(&mut self) {
        self.last.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_are_refused_and_a_new_incarnation_starts_over() {
        let mut n = Numbering::new(7);
        let (a, b) = (n.number(), n.number());
        assert_eq!((a, b), ((7, 1), (7, 2)));
        let mut t = Taken::default();
        assert!(t.fresh(2, a) && t.fresh(2, b));
        assert!(!t.fresh(2, a), "a late replay");
        assert!(!t.fresh(2, b), "a duplicate");
        assert!(t.fresh(2, (9, 1)), "the sender restarted");
        assert!(t.fresh(3, a), "another sender");
    }
}

//! Storage sequence numbers: every op a core asks to persist gets the next one, consecutively
//! from 1 in each incarnation (the driver asserts they are: docs/contract.md §2).

use crate::{Persist, StorageOp};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Issuer {
    last: u64,
}

impl Issuer {
    /// Queue `op` in `out` with the next sequence number, and return it.
    pub fn issue<R, H>(&mut self, op: StorageOp<R, H>, out: &mut Vec<Persist<R, H>>) -> u64 {
        self.last += 1;
        out.push(Persist { seq: self.last, op });
        self.last
    }

    /// The last sequence number issued (0: none yet).
    pub fn last(&self) -> u64 {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_from_one() {
        let mut i = Issuer::default();
        let mut out: Vec<Persist<u8, u8>> = Vec::new();
        assert_eq!(i.issue(StorageOp::SetHard(1), &mut out), 1);
        assert_eq!(i.issue(StorageOp::Truncate { after_key: 0 }, &mut out), 2);
        assert_eq!(i.last(), 2);
        assert_eq!(out.iter().map(|p| p.seq).collect::<Vec<_>>(), vec![1, 2]);
    }
}

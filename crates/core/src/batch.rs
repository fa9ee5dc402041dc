//! Forming submission batches: what a driver hands a core in one [`crate::Input::Submit`].
//!
//! The driver queues commands as clients submit them and, whenever it is ready to step the core,
//! takes every command waiting, bounded by a count and a byte size. A command alone is taken at
//! once (batches never wait for company), so a batch grows only with load: the more commands
//! arrive while the replica is busy, the more each batch carries.

use crate::Command;
use std::collections::VecDeque;

/// Bounds on one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// Commands per batch (at least 1).
    pub max_commands: usize,
    /// Payload bytes per batch. A single command larger than this still forms a batch of one.
    pub max_bytes: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_commands: 512,
            max_bytes: 1 << 20,
        }
    }
}

impl BatchLimits {
    /// Take the next batch from the front of `queue`: at least one command if any is waiting,
    /// then as many more as fit both limits. Order is kept.
    pub fn take(&self, queue: &mut VecDeque<Command>) -> Vec<Command> {
        let mut bytes = 0usize;
        let mut n = 0usize;
        for c in queue.iter() {
            let len = c.payload.len();
            if n > 0 && (n >= self.max_commands.max(1) || bytes + len > self.max_bytes) {
                break;
            }
            bytes += len;
            n += 1;
        }
        queue.drain(..n).collect()
    }

    /// Split `commands` into batches that fit the limits, in order.
    pub fn split(&self, commands: Vec<Command>) -> Vec<Vec<Command>> {
        let mut queue: VecDeque<Command> = commands.into();
        let mut out = Vec::new();
        while !queue.is_empty() {
            out.push(self.take(&mut queue));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn cmd(id: u64, len: usize) -> Command {
        Command {
            id,
            payload: Bytes::from(vec![0u8; len]),
        }
    }

    #[test]
    fn takes_everything_waiting_within_both_limits() {
        let limits = BatchLimits {
            max_commands: 3,
            max_bytes: 100,
        };
        let mut q: VecDeque<Command> = (1..=5).map(|i| cmd(i, 10)).collect();
        let b = limits.take(&mut q);
        assert_eq!(b.iter().map(|c| c.id).collect::<Vec<_>>(), vec![1, 2, 3]);
        let b = limits.take(&mut q);
        assert_eq!(b.iter().map(|c| c.id).collect::<Vec<_>>(), vec![4, 5]);
        assert!(limits.take(&mut q).is_empty());
        // Bytes bound the batch; an oversized command still goes alone.
        let mut q: VecDeque<Command> = vec![cmd(1, 60), cmd(2, 60), cmd(3, 500), cmd(4, 1)].into();
        let sizes: Vec<Vec<u64>> = limits
            .split(q.drain(..).collect())
            .into_iter()
            .map(|b| b.iter().map(|c| c.id).collect())
            .collect();
        assert_eq!(sizes, vec![vec![1], vec![2], vec![3], vec![4]]);
    }

    #[test]
    fn a_lone_command_is_a_batch() {
        let mut q: VecDeque<Command> = vec![cmd(7, 1)].into();
        assert_eq!(BatchLimits::default().take(&mut q).len(), 1);
    }
}

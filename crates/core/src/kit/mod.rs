//! Mechanisms every family of cores needs, written once so that a fix lands once:
//!
//! | module | mechanism | used by |
//! |---|---|---|
//! | [`tag`] | a position's tag for a command of a batch: `n << 16 \| left` | PFT Paxos, Mencius, the ZooKeeper zxids of their groups |
//! | [`issuer`] | storage sequence numbers, issued consecutively | Zab, PFT Paxos, Mencius |
//! | [`dedup`] | a bounded window of recently ordered command ids | PFT Paxos, Mencius |
//! | [`forward`] | numbering a replica's forwarded batches, and refusing replays of them | Zab, PFT Paxos |

pub mod dedup;
pub mod forward;
pub mod issuer;
pub mod tag;

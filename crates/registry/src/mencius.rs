//! Mencius (crates/mencius): `mencius`, the simulator's `mencius-ooo` (out-of-order commit of
//! commuting commands, M13, under the register workload) and `mencius-bug-*`, one per hazard
//! of mencius.md §6.3 that the report's literal pseudo-code would commit.

use crate::{Assumptions, Family, Name, Seed, Tunings, Zxids};
use synod_mencius::{Bug, Mencius, Options};

const NAMES: &[Name] = &[
    Name::served("mencius"),
    Name::simulated("mencius-ooo"),
    Name::simulated("mencius-bug-commit-non-commuting"),
    Name::simulated("mencius-bug-stale-skip"),
    Name::simulated("mencius-bug-overwrite-learned"),
    Name::simulated("mencius-bug-dueling-revokers"),
];

/// Mencius counts an instance's acceptors in a 64-bit mask.
pub const MEMBERS_MAX: usize = 64;

fn bug(name: &str) -> Option<Bug> {
    match name {
        "mencius-bug-commit-non-commuting" => Some(Bug::CommitNonCommuting),
        "mencius-bug-stale-skip" => Some(Bug::StaleSkip),
        "mencius-bug-overwrite-learned" => Some(Bug::OverwriteLearned),
        "mencius-bug-dueling-revokers" => Some(Bug::DuelingRevokers),
        _ => None,
    }
}

impl Family for Mencius {
    const FAMILY: &'static str = "mencius";
    const NAMES: &'static [Name] = NAMES;
    /// PFT's tag (`instance << 16 | left`): with out-of-order commit off it delivers in
    /// instance order, and the same map grows with every delivery. Skipped instances leave
    /// gaps, as ZooKeeper allows.
    const ZXIDS: Zxids = Zxids::PaxosBatch;
    const SINGLE_LEADER: bool = false;

    fn options(name: &str, tunings: &dyn Tunings) -> Options {
        tunings.mencius(
            name,
            Options {
                bug: bug(name),
                ..Options::default()
            },
        )
    }

    fn check_size(name: &str, members: usize) -> Result<(), String> {
        if members > MEMBERS_MAX {
            Err(format!(
                "'{name}' supports at most {MEMBERS_MAX} members, not {members}"
            ))
        } else {
            Ok(())
        }
    }

    /// A disk that comes back empty or cut is left out: a Mencius replica that lost what it
    /// suggested cannot tell which of its instances it used (docs/protocols/mencius.md §10).
    fn assumptions(name: &str, _members: usize) -> Assumptions {
        Assumptions {
            needs_its_disk: true,
            commuting: name == "mencius-ooo" || name == "mencius-bug-commit-non-commuting",
            ..Assumptions::default()
        }
    }

    /// Instances start at the cluster size: the seed closes one at least that high.
    fn seed(slot: u64, zxid: i64, members: usize) -> Seed<synod_mencius::Hard> {
        crate::paxos::seed_after(slot, zxid, members as u64)
    }
}

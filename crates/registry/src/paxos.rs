//! PFT Multi-Paxos (crates/paxos): `paxos` (PBQ catch-up), `paxos-mbq`, `paxos-none` (state
//! transfer only), and the simulator's `paxos-bug-*`, one per erratum of pft.md §6.1 that the
//! thesis's literal pseudo-code would commit.

use crate::{Assumptions, Family, Name, Seed, Tunings, Zxids};
use synod_core::Position;
use synod_paxos::{Bug, CatchUp, Options, Paxos};

const NAMES: &[Name] = &[
    Name::served("paxos"),
    Name::served("paxos-mbq"),
    Name::served("paxos-none"),
    Name::simulated("paxos-bug-ack-without-view"),
    Name::simulated("paxos-bug-newview-to-committed"),
    Name::simulated("paxos-bug-lower-view-wins"),
    Name::simulated("paxos-bug-accept-after-viewchange"),
    Name::simulated("paxos-bug-execute-catchup-accept"),
];

/// The catch-up scheme a name fixes (pft.md §3.3), and its bug.
pub(crate) fn parse(name: &str) -> (CatchUp, Option<Bug>) {
    match name {
        "paxos-mbq" => (CatchUp::Mbq, None),
        "paxos-none" => (CatchUp::None, None),
        "paxos-bug-ack-without-view" => (CatchUp::Pbq, Some(Bug::AckWithoutView)),
        "paxos-bug-newview-to-committed" => (CatchUp::Pbq, Some(Bug::NewViewToCommitted)),
        "paxos-bug-lower-view-wins" => (CatchUp::Pbq, Some(Bug::LowerViewWins)),
        "paxos-bug-accept-after-viewchange" => (CatchUp::Pbq, Some(Bug::AcceptAfterViewChange)),
        "paxos-bug-execute-catchup-accept" => (CatchUp::Pbq, Some(Bug::ExecuteCatchUpAccept)),
        _ => (CatchUp::Pbq, None),
    }
}

/// A batch (or a Mencius instance) `n` done: the zxid of `n << 16 | 0xFFFF`. The seed closes
/// the first `n` at least `floor` above the backup's zxid, and the core resumes after it.
pub(crate) fn seed_after<H>(slot: u64, zxid: i64, floor: u64) -> Seed<H> {
    let n = ((zxid.max(0) as u64 >> 16) + 1).max(floor);
    let tag = n << 16;
    Seed {
        at: Position { slot, tag },
        zxid: Zxids::PaxosBatch.zxid(tag),
        hard: None,
    }
}

impl Family for Paxos {
    const FAMILY: &'static str = "paxos";
    const NAMES: &'static [Name] = NAMES;
    /// `batch << 16 | command`, numbered up through each batch.
    const ZXIDS: Zxids = Zxids::PaxosBatch;
    const SINGLE_LEADER: bool = true;

    fn options(name: &str, tunings: &dyn Tunings) -> Options {
        let (catch_up, bug) = parse(name);
        tunings.paxos(
            name,
            Options {
                catch_up,
                bug,
                ..Options::default()
            },
        )
    }

    /// A view's primary is `v mod N` over any number of members.
    fn check_size(_name: &str, _members: usize) -> Result<(), String> {
        Ok(())
    }

    fn assumptions(_name: &str, _members: usize) -> Assumptions {
        Assumptions::default()
    }

    fn seed(slot: u64, zxid: i64, _members: usize) -> Seed<synod_paxos::Hard> {
        seed_after(slot, zxid, 0)
    }
}

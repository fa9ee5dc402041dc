//! PFT Multi-Paxos in the registry: `paxos` (PBQ catch-up), `paxos-mbq`, `paxos-none` (no
//! catch-up: state transfer only), and the deliberately broken `paxos-bug-*`, one per erratum
//! of pft.md §6.1 that the thesis's literal pseudo-code would commit.

use synod_paxos::{Batching, Bug, CatchUp, Options, Paxos};
use synod_sim::{run_one as sim_one, run_seeds, Report, SimConfig};

const NAMES: &[(&str, CatchUp, Option<Bug>)] = &[
    ("paxos", CatchUp::Pbq, None),
    ("paxos-mbq", CatchUp::Mbq, None),
    ("paxos-none", CatchUp::None, None),
    (
        "paxos-bug-ack-without-view",
        CatchUp::Pbq,
        Some(Bug::AckWithoutView),
    ),
    (
        "paxos-bug-newview-to-committed",
        CatchUp::Pbq,
        Some(Bug::NewViewToCommitted),
    ),
    (
        "paxos-bug-lower-view-wins",
        CatchUp::Pbq,
        Some(Bug::LowerViewWins),
    ),
    (
        "paxos-bug-accept-after-viewchange",
        CatchUp::Pbq,
        Some(Bug::AcceptAfterViewChange),
    ),
    (
        "paxos-bug-execute-catchup-accept",
        CatchUp::Pbq,
        Some(Bug::ExecuteCatchUpAccept),
    ),
];

pub(crate) fn names() -> Vec<&'static str> {
    NAMES.iter().map(|(n, _, _)| *n).collect()
}

pub fn known(name: &str) -> bool {
    NAMES.iter().any(|(n, _, _)| *n == name)
}

/// The options a named paxos runs with in the simulator.
pub fn options(name: &str, cfg: &SimConfig<()>) -> Options {
    let &(_, catch_up, bug) = NAMES
        .iter()
        .find(|(n, _, _)| *n == name)
        .expect("a known name");
    let mut o = Options {
        catch_up,
        bug,
        // The simulator's state machine snapshots its history: equal states, equal bytes.
        check_digests: true,
        ..Options::default()
    };
    // `batch_commands` bounds batching end to end. At 1 the primary orders one command per
    // sequence number, pipelined without a window.
    o.max_batch = o.max_batch.min(cfg.batch_commands.max(1));
    if o.max_batch == 1 {
        o.batching = Batching::Adaptive {
            window: o.max_inflight as usize,
        };
    }
    o
}

/// Run seeds of the named paxos, its options adjusted by `tweak` (an experiment fixing the
/// batch size or the catch-up scheme).
pub fn run_seeds_with(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tweak: &dyn Fn(&mut Options),
) -> Result<Report, String> {
    crate::check_name(name)?;
    let mut c = crate::zxids(
        cfg.with_options(options(name, cfg)),
        synod_zk::group::Zxids::PaxosBatch,
    );
    tweak(&mut c.options);
    Ok(run_seeds::<Paxos>(&c, seeds, threads))
}

pub(crate) fn run_one(name: &str, cfg: &SimConfig<()>) -> (Report, Option<String>) {
    sim_one::<Paxos>(crate::zxids(
        cfg.with_options(options(name, cfg)),
        synod_zk::group::Zxids::PaxosBatch,
    ))
}

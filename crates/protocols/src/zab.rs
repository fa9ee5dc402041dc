//! Zab and the thesis's variants in the registry, with the deliberately broken Zabs.

use synod_sim::{run_one, run_seeds, FaultKind, Report, SimConfig};
use synod_zab::{Bug, Options as ZabOptions, Variant, Zab};

/// Protocols that can be selected by name: Zab and the thesis's variants, then deliberately
/// broken protocols (`zab-bug-*`, and `*-unrestricted` runs of the restricted variants under
/// faults their assumptions exclude) that exist to prove the checkers catch unsafe protocols.
pub(crate) fn names() -> Vec<&'static str> {
    Variant::ALL
        .iter()
        .map(|(n, _)| *n)
        .chain(Variant::COINS.iter().map(|(n, _)| *n))
        .chain(BROKEN.iter().copied())
        .collect()
}

/// The deliberately broken protocols.
const BROKEN: &[&str] = &[
    "zab-bug-commit-own-ack",
    "zab-bug-ack-before-durable",
    "zab-bug-elect-anyone",
    "zab-bug-forward-twice",
    "zab-ac-unrestricted",
    "zab-aa-restricted-unrestricted",
];

/// How a named protocol is run.
struct Spec {
    options: ZabOptions,
    /// The restrictive assumptions A1.1/A1.2 hold: crashes only while more than a quorum is
    /// up, and no partitions or connection resets (A2 with A1.2).
    restricted: bool,
}

fn spec(name: &str) -> Option<Spec> {
    let (base, unrestricted) = match name.strip_suffix("-unrestricted") {
        Some(b) => (b, true),
        None => (name, false),
    };
    let bug = match base {
        "zab-bug-commit-own-ack" => Some(Bug::CommitOnOwnAck),
        "zab-bug-ack-before-durable" => Some(Bug::AckBeforeDurable),
        "zab-bug-elect-anyone" => Some(Bug::ElectAnyone),
        "zab-bug-forward-twice" => Some(Bug::ForwardTwice),
        _ => None,
    };
    let (variant, coin) = match bug {
        Some(_) => (Variant::Zab, Default::default()),
        None => Variant::protocol(base)?,
    };
    Some(Spec {
        options: ZabOptions {
            bug,
            variant,
            coin,
            enforce_a11: !unrestricted,
            ..ZabOptions::default()
        },
        restricted: variant.restricted() && !unrestricted,
    })
}

pub(crate) fn known(name: &str) -> bool {
    names().contains(&name) && spec(name).is_some()
}

/// Check that the protocol supports `nodes` replicas.
pub(crate) fn check_size(name: &str, nodes: usize) -> Result<(), String> {
    let s = spec(name).ok_or_else(|| format!("unknown protocol '{name}'"))?;
    if s.options.variant.supports(nodes) {
        Ok(())
    } else {
        Err(format!("{name} runs with N = 3 only"))
    }
}

/// The configuration a named protocol runs under: its options, the faults its assumptions
/// allow, and the crash-tolerance invariant it promises.
fn configure(name: &str, cfg: &SimConfig<()>) -> SimConfig<ZabOptions> {
    let s = spec(name).expect("checked");
    let variant = s.options.variant;
    let mut c = crate::zxids(cfg.with_options(s.options), synod_zk::group::Zxids::Tag);
    // `batch_commands` bounds batching end to end, in the leader too, not only the driver.
    // At 1 the leader proposes one command at a time, pipelined without a window of batches
    // (the thesis's protocols).
    c.options.max_batch = c.options.max_batch.min(cfg.batch_commands.max(1));
    if c.options.max_batch == 1 {
        c.options.window = usize::MAX;
    }
    if s.restricted {
        c.faults.0.retain(|k| {
            matches!(
                k,
                FaultKind::Crash | FaultKind::SlowNode | FaultKind::SlowDisk
            )
        });
        c.a12_crashes = true;
    }
    if variant.restricted() {
        // The follower invariant of zab.md §3.5: a follower delivers once `threshold` followers
        // have logged; the leader still needs a quorum.
        c.follower_invariant = variant.follower_threshold(cfg.nodes);
    }
    c
}

/// [`run_named_seeds`], with the named protocol's options adjusted by `tweak` (an experiment
/// fixing a parameter the name does not carry, such as App. D's θ).
pub fn run_named_seeds_with(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tweak: &dyn Fn(&mut ZabOptions),
) -> Result<Report, String> {
    crate::check_name(name)?;
    check_size(name, cfg.nodes)?;
    let mut c = configure(name, cfg);
    tweak(&mut c.options);
    Ok(run_seeds::<Zab>(&c, seeds, threads))
}

/// Run one seed of the named protocol, returning its trace when `cfg.trace` is set.
pub(crate) fn run_named_one(
    name: &str,
    cfg: &SimConfig<()>,
) -> Result<(Report, Option<String>), String> {
    check_size(name, cfg.nodes)?;
    Ok(run_one::<Zab>(configure(name, cfg)))
}

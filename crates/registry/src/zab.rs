//! Zab and the variants of EL-Sanosi's thesis (crates/zab), with the deliberately broken Zabs
//! the simulator runs: `zab-bug-*` (one per mistake the checkers must catch) and
//! `*-unrestricted` (a restricted variant under faults its assumptions exclude).

use crate::{Assumptions, Family, Name, Seed, Tunings, Zxids};
use synod_core::Position;
use synod_zab::{Bug, Options, Variant, Zab};

/// Served: every variant and every named coin of ZabCT (`Variant::ALL`, `Variant::COINS`).
const NAMES: &[Name] = &[
    Name::served("zab"),
    Name::served("zab-ac"),
    Name::served("zab-aa-restricted"),
    Name::served("zab-aa-leader-first"),
    Name::served("zab-ct-restricted"),
    Name::served("zab-ct"),
    Name::served("zab-aa"),
    Name::served("zab-ct-half"),
    Name::served("zab-ct-a"),
    Name::served("zab-ct-aa"),
    Name::served("zab-ct-optimal"),
    Name::simulated("zab-bug-commit-own-ack"),
    Name::simulated("zab-bug-ack-before-durable"),
    Name::simulated("zab-bug-elect-anyone"),
    Name::simulated("zab-bug-forward-twice"),
    Name::simulated("zab-bug-two-changes"),
    Name::simulated("zab-bug-learners-count"),
    Name::simulated("zab-bug-new-config-alone"),
    Name::simulated("zab-ac-unrestricted"),
    Name::simulated("zab-aa-restricted-unrestricted"),
];

/// A name as its bug, variant, coin, and whether it runs outside its assumptions.
fn parse(name: &str) -> (Option<Bug>, Variant, synod_zab::coin::Choice, bool) {
    let (base, unrestricted) = match name.strip_suffix("-unrestricted") {
        Some(b) => (b, true),
        None => (name, false),
    };
    let bug = match base {
        "zab-bug-commit-own-ack" => Some(Bug::CommitOnOwnAck),
        "zab-bug-ack-before-durable" => Some(Bug::AckBeforeDurable),
        "zab-bug-elect-anyone" => Some(Bug::ElectAnyone),
        "zab-bug-forward-twice" => Some(Bug::ForwardTwice),
        "zab-bug-two-changes" => Some(Bug::TwoChangesInFlight),
        "zab-bug-learners-count" => Some(Bug::LearnersCount),
        "zab-bug-new-config-alone" => Some(Bug::NewConfigAlone),
        _ => None,
    };
    let (variant, coin) = match bug {
        Some(_) => (Variant::Zab, Default::default()),
        None => Variant::protocol(base).expect("a registered Zab name"),
    };
    (bug, variant, coin, unrestricted)
}

impl Family for Zab {
    const FAMILY: &'static str = "zab";
    const NAMES: &'static [Name] = NAMES;
    /// A Zab position's tag is its zxid (epoch << 32 | counter).
    const ZXIDS: Zxids = Zxids::Tag;
    const SINGLE_LEADER: bool = true;

    fn options(name: &str, tunings: &dyn Tunings) -> Options {
        let (bug, variant, coin, unrestricted) = parse(name);
        let options = Options {
            bug,
            variant,
            coin,
            enforce_a11: !unrestricted,
            ..Options::default()
        };
        tunings.zab(name, options)
    }

    fn check_size(name: &str, members: usize) -> Result<(), String> {
        let (_, variant, _, _) = parse(name);
        if variant.supports(members) {
            Ok(())
        } else {
            Err(format!(
                "'{name}' does not support a cluster of {members} (it runs with N = 3 only)"
            ))
        }
    }

    fn assumptions(name: &str, members: usize) -> Assumptions {
        let (_, variant, _, unrestricted) = parse(name);
        Assumptions {
            restricted: variant.restricted() && !unrestricted,
            // The follower invariant of zab.md §3.5 (the leader still needs a quorum).
            follower_threshold: if variant.restricted() {
                variant.follower_threshold(members)
            } else {
                None
            },
            ..Assumptions::default()
        }
    }

    /// The snapshot's tag is the backup's zxid, and the hard state says its epoch was accepted
    /// and current: the first election starts the epoch after it.
    fn seed(slot: u64, zxid: i64, _members: usize) -> Seed<synod_zab::Hard> {
        let epoch = (zxid as u64 >> 32) as u32;
        Seed {
            at: Position {
                slot,
                tag: zxid as u64,
            },
            zxid,
            hard: Some(synod_zab::Hard {
                accepted_epoch: epoch,
                current_epoch: epoch,
                ..Default::default()
            }),
        }
    }
}

//! Fault schedules: drawn from the run's seed before the run starts, so a seed names the whole
//! schedule. Targets that depend on the run (the current leader) are resolved when a fault fires.

use crate::SimConfig;
use rand_core::RngCore;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Crash a replica (losing every write that was not durable); it restarts when healed.
    Crash,
    /// Split the cluster in two, both directions.
    Partition,
    /// Split the cluster one way only: one side hears the other but cannot reach it.
    OneWay,
    /// Multiply the network latency to and from a replica.
    SlowNode,
    /// Multiply a replica's fsync latency.
    SlowDisk,
    /// Break one connection: messages in flight are lost, both ends are told.
    LinkReset,
    /// Crash the leader and its most up-to-date follower together; the leader restarts first
    /// and the follower half a second later (a majority crash for N = 3: adversarial, selected
    /// by name only, not part of `all`).
    CrashPair,
    /// Stop a process for the fault's duration (a GC pause, a stopped VM): it runs nothing,
    /// its events wait; its peers see nothing but silence.
    Pause,
    /// Make a node's clock run fast or slow (2–10×) for the fault's duration: its timeouts
    /// fire early or late. Skew and steady drift are always on ([`crate::ClockModel`]).
    ClockDrift,
    /// The next fsync on a node fails with EIO: the process stops (it cannot know what
    /// landed: part of the write may have), and restarts when the fault heals.
    DiskError,
    /// Break one connection, but what was in flight is not lost: it arrives late, after
    /// messages of the new connection, some of it twice (a reconnect that replays).
    Replay,
    /// Silent corruption of one record on a node's disk, found by its checksum when the node
    /// restarts: the log is cut there. The node crashes now and restarts when the fault heals,
    /// knowing it lost state it may have acknowledged.
    Corrupt,
    /// A node's disk is wiped: it crashes and comes back empty when the fault heals, knowing
    /// it lost its state.
    Wipe,
    /// fsync returns before the data is on the medium on a majority of the nodes for the
    /// fault's duration, and they all crash at its end: acknowledged writes are lost. Beyond
    /// every protocol's assumptions: selected by name only, to show the checkers catch it.
    LyingDisk,
    /// Wipe the disks of a majority at once. Beyond every protocol's assumptions: selected by
    /// name only, to show the checkers catch it.
    WipeMajority,
    /// Change a group's configuration through its leader (add, remove, promote or demote one
    /// node: docs/membership.md). Selected by name (`--faults all,reconfig`) while only Zab
    /// changes its configuration online.
    Reconfig,
}

impl FaultKind {
    /// The faults within the assumptions of the crash-recovery protocols: `--faults all`.
    pub const ALL: [FaultKind; 12] = [
        FaultKind::Crash,
        FaultKind::Partition,
        FaultKind::OneWay,
        FaultKind::SlowNode,
        FaultKind::SlowDisk,
        FaultKind::LinkReset,
        FaultKind::Pause,
        FaultKind::ClockDrift,
        FaultKind::DiskError,
        FaultKind::Replay,
        FaultKind::Corrupt,
        FaultKind::Wipe,
    ];
    /// Faults beyond the assumptions (or adversarial), or that not every family supports,
    /// selected by name only.
    pub const BY_NAME_ONLY: [FaultKind; 4] = [
        FaultKind::CrashPair,
        FaultKind::LyingDisk,
        FaultKind::WipeMajority,
        FaultKind::Reconfig,
    ];
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::Partition => "partition",
            FaultKind::OneWay => "one-way",
            FaultKind::SlowNode => "slow-node",
            FaultKind::SlowDisk => "slow-disk",
            FaultKind::LinkReset => "link-reset",
            FaultKind::CrashPair => "crash-pair",
            FaultKind::Pause => "pause",
            FaultKind::ClockDrift => "clock-drift",
            FaultKind::DiskError => "disk-error",
            FaultKind::Replay => "replay",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Wipe => "wipe",
            FaultKind::LyingDisk => "lying-disk",
            FaultKind::WipeMajority => "wipe-majority",
            FaultKind::Reconfig => "reconfig",
        }
    }

    /// Faults that end by themselves or are healed by something other than their heal event.
    pub(crate) fn has_heal(self) -> bool {
        !matches!(
            self,
            FaultKind::LinkReset | FaultKind::Replay | FaultKind::Reconfig
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of fault kinds, as given on the command line: `all`, `none`, or a comma list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSet(pub Vec<FaultKind>);

impl FaultSet {
    pub fn all() -> Self {
        FaultSet(FaultKind::ALL.to_vec())
    }
    pub fn none() -> Self {
        FaultSet(Vec::new())
    }
}

impl FromStr for FaultSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all" => return Ok(Self::all()),
            "none" | "" => return Ok(Self::none()),
            _ => {}
        }
        let mut kinds = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let k = match part {
                "restart" => FaultKind::Crash,
                "heal" => continue,
                // `all,reconfig`: every fault within the assumptions, and more by name.
                "all" => {
                    for k in FaultKind::ALL {
                        if !kinds.contains(&k) {
                            kinds.push(k);
                        }
                    }
                    continue;
                }
                _ => *FaultKind::ALL
                    .iter()
                    .chain(FaultKind::BY_NAME_ONLY.iter())
                    .find(|k| k.name() == part)
                    .ok_or_else(|| {
                        format!(
                            "unknown fault kind '{part}' (expected all, none, or a list of: {})",
                            FaultKind::ALL
                                .iter()
                                .chain(FaultKind::BY_NAME_ONLY.iter())
                                .map(|k| k.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })?,
            };
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        Ok(FaultSet(kinds))
    }
}

#[derive(Clone, Debug)]
pub struct Fault {
    pub kind: FaultKind,
    pub start_us: u64,
    pub end_us: u64,
    /// Aim at the replica the protocol names (the leader, or a multi-leader protocol's duty
    /// holder), when there is one; otherwise at a random replica.
    pub at_named: bool,
    /// Slow-down factor for slow-node and slow-disk.
    pub factor: u32,
    /// Node indices, fixed when the fault fires.
    pub resolved: Vec<usize>,
    pub healed: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Schedule {
    pub faults: Vec<Fault>,
}

/// Uniform in [lo, hi] (lo when the range is empty).
pub(crate) fn between(rng: &mut impl RngCore, lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        return lo;
    }
    lo + rng.next_u64() % (hi - lo + 1)
}

/// A fault at a fixed time on fixed replicas (indices); an empty target list is resolved when
/// the fault fires, as for drawn faults.
#[derive(Clone, Debug)]
pub struct Scripted {
    pub kind: FaultKind,
    pub start_us: u64,
    pub end_us: u64,
    pub targets: Vec<usize>,
    pub factor: u32,
}

impl Schedule {
    pub fn generate<O>(rng: &mut impl RngCore, cfg: &SimConfig<O>) -> Self {
        if !cfg.script.is_empty() {
            let faults = cfg
                .script
                .iter()
                .map(|s| Fault {
                    kind: s.kind,
                    start_us: s.start_us,
                    end_us: s.end_us,
                    at_named: true,
                    factor: s.factor,
                    resolved: s.targets.clone(),
                    healed: false,
                })
                .collect();
            return Schedule { faults };
        }
        let kinds = &cfg.faults.0;
        if kinds.is_empty() || cfg.max_faults == 0 {
            return Schedule::default();
        }
        let window = cfg.fault_window_us;
        let count = between(rng, 1, cfg.max_faults as u64);
        let mut faults = Vec::new();
        for _ in 0..count {
            let kind = kinds[(rng.next_u64() % kinds.len() as u64) as usize];
            let start_us = between(rng, window / 10, window * 9 / 10);
            let len = between(rng, 50_000, cfg.max_fault_us.max(50_000));
            faults.push(Fault {
                kind,
                start_us,
                end_us: (start_us + len).min(window),
                at_named: rng.next_u64() & 1 == 0,
                factor: between(rng, 5, 50) as u32,
                resolved: Vec::new(),
                healed: false,
            });
        }
        faults.sort_by_key(|f| f.start_us);
        Schedule { faults }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_fault_sets() {
        assert_eq!("all".parse::<FaultSet>().unwrap(), FaultSet::all());
        assert_eq!("none".parse::<FaultSet>().unwrap(), FaultSet::none());
        let s: FaultSet = "crash,restart,one-way,heal".parse().unwrap();
        assert_eq!(s.0, vec![FaultKind::Crash, FaultKind::OneWay]);
        let e = "crash,meteor".parse::<FaultSet>().unwrap_err();
        assert!(e.contains("meteor"), "{e}");
    }
}

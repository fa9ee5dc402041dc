//! The one registry of protocol families. The server (which protocols a configuration may
//! name, the options of each group), the simulator (`synod sim --protocol`, the faults each
//! protocol's assumptions allow) and `synod restore` (the first records of a seeded log) all
//! find a protocol here, by name, and reach its core through [`visit`].
//!
//! A family is one core: one log format, one message codec, several names (Zab's variants,
//! PFT's catch-up schemes, the deliberately broken versions the simulator runs to prove its
//! checkers). Adding a protocol is its crate, an impl of [`Family`] in a file of this crate,
//! and its line in [`registry!`]; a family with settings of its own adds a method to
//! [`Tunings`] (with a default) and the server a section to its configuration.

mod mencius;
mod paxos;
mod zab;

use synod_core::Position;
use synod_host::Hosted;
pub use synod_zk::group::Zxids;

/// One protocol name of a family.
#[derive(Clone, Copy, Debug)]
pub struct Name {
    pub name: &'static str,
    /// Whether a server runs it. The deliberately broken protocols (`*-bug-*`, restricted
    /// variants run outside their assumptions) and simulator-only workloads are not served.
    pub served: bool,
}

impl Name {
    pub const fn served(name: &'static str) -> Name {
        Name { name, served: true }
    }
    pub const fn simulated(name: &'static str) -> Name {
        Name {
            name,
            served: false,
        }
    }
}

/// What a named protocol assumes of its environment: the simulator injects only the faults
/// these allow, and checks the invariant they promise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Assumptions {
    /// Only crashes, slow nodes and slow disks, a crash only while more than a quorum is up
    /// (zab.md §3.5, A1.1/A1.2): no partitions, lost connections or lost disks.
    pub restricted: bool,
    /// A replica whose disk comes back empty or cut cannot rejoin (it cannot tell what it
    /// promised): no wiped or corrupt disks.
    pub needs_its_disk: bool,
    /// Followers deliver once this many followers have logged (the deliverer included),
    /// without the leader's commit; `None`: on the leader's commit only.
    pub follower_threshold: Option<usize>,
    /// Commuting commands are delivered out of order (Mencius's M13): histories compare up
    /// to commutation, under the register workload.
    pub commuting: bool,
}

/// The seed of a restored log: where its snapshot stands, the zxid that gives, and the hard
/// state written before it (`synod restore`, crates/synod/src/restore.rs).
pub struct Seed<H> {
    pub at: Position,
    pub zxid: i64,
    pub hard: Option<H>,
}

/// The settings a caller lays over a name's options: the server's `[zab]`, `[paxos]` and
/// `[mencius]` sections, the simulator's batch bound. Each method gets the options the name
/// implies (variant, catch-up scheme, bug) and returns them tuned; the default keeps them.
pub trait Tunings {
    fn zab(&self, _name: &str, options: synod_zab::Options) -> synod_zab::Options {
        options
    }
    fn paxos(&self, _name: &str, options: synod_paxos::Options) -> synod_paxos::Options {
        options
    }
    fn mencius(&self, _name: &str, options: synod_mencius::Options) -> synod_mencius::Options {
        options
    }
}

/// The cores' own defaults.
pub struct Defaults;
impl Tunings for Defaults {}

/// A protocol family: a core the host runs, and what the server, the simulator and restore
/// need to know of its names.
pub trait Family: Hosted + synod_core::Protocol<Options: Send + Sync> {
    /// The family's name ("zab", "paxos", "mencius").
    const FAMILY: &'static str;
    /// Its protocols.
    const NAMES: &'static [Name];
    /// How a ZooKeeper group running it numbers zxids from its positions.
    const ZXIDS: Zxids;
    /// Whether one replica at a time orders every command (a leader, primary or master that
    /// SconeKV's buckets can follow). Mencius's replicas all order: it names no master.
    const SINGLE_LEADER: bool;

    /// The core's options for `name`, tuned.
    fn options(name: &str, tunings: &dyn Tunings) -> Self::Options;
    /// Whether `name` runs with `members` replicas.
    fn check_size(name: &str, members: usize) -> Result<(), String>;
    /// What `name` assumes, in a cluster of `members`.
    fn assumptions(name: &str, members: usize) -> Assumptions;
    /// Where a log seeded from a backup at `zxid` (its snapshot's slot `slot`) starts, such
    /// that the zxids the new cluster gives out are above every zxid in the backup.
    fn seed(slot: u64, zxid: i64, members: usize) -> Seed<Self::Hard>;
}

/// What is done with a family found by name: `visit::<F>` runs with the family's type.
pub trait Visit {
    type Out;
    fn visit<F: Family>(self, name: &'static str) -> Self::Out;
}

fn lookup<F: Family>(name: &str) -> Option<&'static Name> {
    F::NAMES.iter().find(|n| n.name == name)
}

/// The families, each registered once: [`visit`] finds a name's family, [`families`] lists
/// them.
macro_rules! registry {
    ($($family:ty),* $(,)?) => {
        /// Run `v` with the family of protocol `name`; `None` if no family has the name.
        pub fn visit<V: Visit>(name: &str, v: V) -> Option<V::Out> {
            $(
                if let Some(n) = lookup::<$family>(name) {
                    return Some(v.visit::<$family>(n.name));
                }
            )*
            None
        }

        /// Every family: its name and its protocols.
        pub fn families() -> Vec<(&'static str, &'static [Name])> {
            vec![$((<$family as Family>::FAMILY, <$family as Family>::NAMES)),*]
        }
    };
}

registry!(synod_zab::Zab, synod_paxos::Paxos, synod_mencius::Mencius);

/// Every protocol name, the simulator's broken ones included.
pub fn names() -> Vec<&'static str> {
    families()
        .into_iter()
        .flat_map(|(_, names)| names.iter().map(|n| n.name))
        .collect()
}

/// The protocol names a server runs.
pub fn served_names() -> Vec<&'static str> {
    families()
        .into_iter()
        .flat_map(|(_, names)| names.iter().filter(|n| n.served).map(|n| n.name))
        .collect()
}

/// The protocol `name` (any, or `served` only): its entry and its family's name.
pub fn find(name: &str, served: bool) -> Option<(Name, &'static str)> {
    families().into_iter().find_map(|(family, names)| {
        names
            .iter()
            .find(|n| n.name == name && (n.served || !served))
            .map(|&n| (n, family))
    })
}

/// What a caller needs of a family without its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    pub family: &'static str,
    pub zxids: Zxids,
    pub single_leader: bool,
}

struct GetFacts;
impl Visit for GetFacts {
    type Out = Facts;
    fn visit<F: Family>(self, _: &'static str) -> Facts {
        Facts {
            family: F::FAMILY,
            zxids: F::ZXIDS,
            single_leader: F::SINGLE_LEADER,
        }
    }
}

/// The facts of protocol `name`'s family.
pub fn facts(name: &str) -> Option<Facts> {
    visit(name, GetFacts)
}

struct CheckSize(usize);
impl Visit for CheckSize {
    type Out = Result<(), String>;
    fn visit<F: Family>(self, name: &'static str) -> Result<(), String> {
        F::check_size(name, self.0)
    }
}

/// Whether protocol `name` (one a server runs, when `served`) runs with `members` replicas;
/// the error names the known protocols or the size it needs.
pub fn check(name: &str, members: usize, served: bool) -> Result<(), String> {
    if find(name, served).is_none() {
        let known = if served { served_names() } else { names() };
        return Err(format!(
            "'{name}' is not a protocol{} (known: {})",
            if served { " of this server" } else { "" },
            known.join(", ")
        ));
    }
    visit(name, CheckSize(members)).expect("found above")
}

#[cfg(test)]
mod tests;

//! Elastic membership for SconeKV (sconekv.md §2.2–§2.8): a totally ordered **view** of hundreds
//! of nodes kept without a consensus group, in three layers, each a deterministic sans-IO core
//! in the style of the replication contract (`synod_core`): time arrives with every input,
//! randomness from a seed, and the driver carries out what a step returns.
//!
//! * [`cyclon`]: CYCLON's peer sampling (Voulgaris et al. 2005): a small cache of neighbours with
//!   ages, shuffled with the oldest neighbour every cycle, so a failed node's entries age out.
//! * [`epto`]: EpTO's epidemic total order (Matos et al. 2015): balls of events gossiped to K
//!   peers for TTL rounds, delivered in (timestamp, origin) order once no earlier event can
//!   still arrive (with high probability).
//! * [`view`]: the view itself, a join-semilattice of per-node ranks (incarnation, joined or
//!   left), so that delivering the same updates in any order, twice, or late gives the same view,
//!   its version and its hash. This closes the thesis's gaps on holes and on an out-of-order
//!   JOIN after a LEAVE (docs/membership.md, "Elastic membership").
//! * [`detector`]: PRIME's failure detector: a ring by node id, K guardians per node deciding a
//!   removal by majority, ALIVE refuting a suspicion.
//! * [`node`]: PRIME's node, composing the four: joins through any member and the first
//!   guardian, hole repair by state exchange with ring neighbours, a wrongly removed node told
//!   and rejoining with a new incarnation.
//! * [`sim`]: a membership-only simulator for 1,000 nodes, and [`central`], the simpler design
//!   (one replicated membership group, as ZooKeeper and etcd hold it) on the same runs.

pub mod central;
pub mod cyclon;
pub mod detector;
pub mod epto;
pub mod holes;
pub mod node;
pub mod sim;
pub mod view;

pub use synod_core::{NodeId, TimeUs};

/// One incarnation of a node: a node that was removed (wrongly or not) rejoins with a higher
/// incarnation, so its new JOIN is never confused with the old one's LEAVE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    pub node: NodeId,
    pub incarnation: u32,
}

impl Member {
    pub const fn new(node: NodeId, incarnation: u32) -> Self {
        Member { node, incarnation }
    }
}

/// What every membership core offers the simulator: the contract's shape (step with the time,
/// a deadline, messages out) over its own message type.
pub trait Core {
    type Msg: Clone + std::fmt::Debug;
    /// Process one input at `now_us`; messages to send go to `out`.
    fn step(&mut self, now_us: TimeUs, input: Input<Self::Msg>, out: &mut Vec<(NodeId, Self::Msg)>);
    /// When the core next needs [`Input::Timeout`].
    fn deadline(&self) -> Option<TimeUs>;
    /// The view this node holds: `None` while it is not a member.
    fn view(&self) -> Option<ViewStamp>;
    /// The members of the view this node holds (empty while it is not a member).
    fn members(&self) -> Vec<NodeId>;
    /// The estimated size of a message on the wire, in bytes.
    fn wire_size(msg: &Self::Msg) -> usize;
}

/// A view's identity: its version (totally ordered, grows with every effective update) and a
/// hash of its contents (two views of one version with one hash are the same view, with
/// probability 1 - 2^-64 per pair).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ViewStamp {
    pub version: u64,
    pub hash: u64,
}

/// Inputs every membership core takes.
#[derive(Clone, Debug)]
pub enum Input<M> {
    /// The first input, at the driver's start time.
    Start,
    /// A message from a peer (channels may lose messages; cores time out).
    Message { from: NodeId, msg: M },
    /// The deadline the core named has come (drivers may wake a core early).
    Timeout,
    /// Leave the view gracefully (`synod member remove` on oneself).
    Leave,
}

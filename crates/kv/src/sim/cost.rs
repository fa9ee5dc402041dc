//! An optional CPU cost model (off by default: [`KvSimConfig::cost`](super::KvSimConfig::cost)
//! is `None` and nothing here runs), so that throughput is bounded by the nodes' CPU rather
//! than by the number of clients.
//!
//! The cluster has [`CostCfg::nodes`] nodes; bucket `b`'s [`CostCfg::replicas`] replicas are
//! the nodes `r·b, r·b + 1, …, r·b + r − 1` (mod `nodes`), the first being its master. With 24
//! nodes, 3 replicas and at most 8 buckets every bucket has its own 3 nodes; with more, nodes
//! are shared. Each node is one server with a FIFO queue (`free_at`: when it is next idle):
//!
//! * a command reaching a bucket's master costs the master `replicate_us` per follower (it
//!   sends the command to each), then `apply_us + per_op_us × ops` (it applies it); the
//!   followers receive it `hop_us` after the master sent it and each spends `apply_us +
//!   per_op_us × ops` on it, then acknowledges (`hop_us` back). The command commits when the
//!   master and enough followers for a majority have processed it (2 of 3), and commits in
//!   order after the bucket's previous command (the log); the bucket's state applies it then.
//!   `ops` counts the operations the command carries (a commit's, all parts; a prepare's).
//! * a read served by a bucket's master costs `read_us` of the master's CPU, queued with the
//!   rest (reads served by the lagging replica cost nothing here).
//!
//! The network delays between buckets and to the clients are [`NetCfg`](super::world::NetCfg)'s;
//! its `replicate_us` is unused (replication is `hop_us` and the queues above).
//!
//! A node's queue is reserved when work reaches it: exact for masters (a command or read is
//! queued at its arrival event). A follower's work is reserved when its master sends it,
//! `hop_us` ahead; with at most `nodes / replicas` buckets a follower serves a single master
//! whose sends are in order, so that is exact too; with shared nodes it is an approximation.

use super::world::World;
use crate::txn::{Cmd, Msg};
use synod_core::wire::Wire;

/// CPU costs, in microseconds of virtual time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostCfg {
    /// Nodes in the cluster.
    pub nodes: u32,
    /// Replicas per bucket (the master and its followers); a majority commits.
    pub replicas: u32,
    /// Applying a command, at any replica.
    pub apply_us: u64,
    /// And per operation the command carries.
    pub per_op_us: u64,
    /// The master's CPU per follower it sends a command to.
    pub replicate_us: u64,
    /// A read served by a master.
    pub read_us: u64,
    /// One way between two nodes of a bucket.
    pub hop_us: u64,
    /// Each bucket's nodes, its master first, when they follow a changing view
    /// ([`super::elastic`]); `None`: the fixed layout above.
    pub placement: Option<Vec<Vec<u32>>>,
    /// Nodes catching up a bucket as learners (they apply its commands but do not count
    /// towards its majority): `(bucket, node)`.
    pub learners: Vec<(u32, u32)>,
}

impl Default for CostCfg {
    fn default() -> Self {
        CostCfg {
            nodes: 24,
            replicas: 3,
            apply_us: 20,
            per_op_us: 5,
            replicate_us: 10,
            read_us: 10,
            hop_us: 100,
            placement: None,
            learners: Vec::new(),
        }
    }
}

impl CostCfg {
    /// The nodes of `bucket`, its master first.
    pub fn replicas_of(&self, bucket: u32) -> Vec<u32> {
        if let Some(p) = &self.placement {
            return p[bucket as usize].clone();
        }
        (0..self.replicas)
            .map(|i| (self.replicas * bucket + i) % self.nodes)
            .collect()
    }

    /// The node of `bucket`'s master.
    pub fn master_of(&self, bucket: u32) -> u32 {
        if let Some(p) = &self.placement {
            return p[bucket as usize][0];
        }
        (self.replicas * bucket) % self.nodes
    }
}

/// The nodes' CPU queues and what they spent.
#[derive(Clone, Debug, Default)]
pub struct Cpu {
    /// When each node is next idle.
    pub free_at: Vec<u64>,
    /// CPU time each node spent.
    pub busy_us: Vec<u64>,
    /// CPU time spent by masters (of commands and reads reaching them).
    pub master_us: u64,
    /// Reads served by masters.
    pub reads: u64,
}

impl Cpu {
    pub fn new(nodes: u32) -> Self {
        Cpu {
            free_at: vec![0; nodes as usize],
            busy_us: vec![0; nodes as usize],
            master_us: 0,
            reads: 0,
        }
    }

    /// Queue `cost` on `node` from `at`: when it is done.
    pub(super) fn run(&mut self, node: u32, at: u64, cost: u64) -> u64 {
        let n = node as usize;
        let done = self.free_at[n].max(at) + cost;
        self.free_at[n] = done;
        self.busy_us[n] += cost;
        done
    }
}

/// The operations a command carries.
pub fn ops_of(payload: &[u8]) -> u64 {
    match Cmd::from_bytes(bytes::Bytes::copy_from_slice(payload)) {
        Ok(Cmd::Commit { parts, .. }) => parts.iter().map(|(_, ops)| ops.len() as u64).sum(),
        Ok(Cmd::Channel {
            msg: Msg::Prepare { ops, .. },
            ..
        }) => ops.len() as u64,
        _ => 0,
    }
}

impl World {
    /// With the cost model: a command reaching `bucket`'s master now is queued on its nodes;
    /// how long until it commits (at the earliest: the log keeps the order).
    pub(super) fn commit_delay(&mut self, bucket: u32, payload: &[u8]) -> Option<u64> {
        let c = self.cost.clone()?;
        let cpu = self
            .cpu
            .as_mut()
            .expect("a CPU per node with the cost model");
        let apply = c.apply_us + c.per_op_us * ops_of(payload);
        let nodes = c.replicas_of(bucket);
        let followers = &nodes[1..];
        let now = self.now;
        let learners: Vec<u32> = c
            .learners
            .iter()
            .filter(|(b, _)| *b == bucket)
            .map(|(_, l)| *l)
            .collect();
        let start = cpu.free_at[nodes[0] as usize].max(now);
        let fanout = (followers.len() + learners.len()) as u64;
        let sent = cpu.run(nodes[0], now, c.replicate_us * fanout);
        let master_done = cpu.run(nodes[0], now, apply);
        cpu.master_us += master_done - start;
        let mut acks: Vec<u64> = followers
            .iter()
            .map(|&f| cpu.run(f, sent + c.hop_us, apply) + c.hop_us)
            .collect();
        acks.sort_unstable();
        // Learners catching up apply the command too, and count for nothing.
        for l in learners {
            cpu.run(l, sent + c.hop_us, apply);
        }
        // A majority of the replicas, the master among them.
        let need = (nodes.len() / 2 + 1).saturating_sub(1);
        let commit = match need {
            0 => master_done,
            k => master_done.max(acks[k.min(acks.len()) - 1]),
        };
        Some(commit - now)
    }

    /// With the cost model: a read reaching `bucket`'s master now is queued on its CPU; how
    /// long until it is served. `None` without the cost model.
    pub fn serve_read(&mut self, bucket: u32) -> Option<u64> {
        let c = self.cost.as_ref()?;
        let (node, read_us) = (c.master_of(bucket), c.read_us);
        let now = self.now;
        let cpu = self
            .cpu
            .as_mut()
            .expect("a CPU per node with the cost model");
        let done = cpu.run(node, now, read_us);
        cpu.master_us += read_us;
        cpu.reads += 1;
        Some(done - now)
    }
}

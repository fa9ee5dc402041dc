//! The groups a node runs, built from its configuration and its log: for each, the protocol
//! core restored from its durable state, its state machine restored from its snapshot, and the
//! decoder of its peer messages. This is the server's registry of protocols and machines.

use crate::config::Config;
use crate::host::group::{Group, GroupParts, GroupRunner};
use crate::machine::StateMachine;
use crate::metrics::Metrics;
use crate::register::Register;
use crate::transport::{Decoder, PeerMsg};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::wire::Wire;
use synod_core::{Cluster, GroupId, NodeId, Protocol, View};
use synod_log::{Recovery, Replayed};
use synod_zab::{Entry, Hard, Zab};
use synod_zk::machine::ZkMachine;
use tokio::sync::watch;
use tracing::info;

/// A group's state machine and the view its front ends watch.
pub struct Served<S> {
    pub machine: Arc<Mutex<S>>,
    pub view: watch::Receiver<View>,
}

pub(crate) struct Built {
    pub runners: Vec<Box<dyn GroupRunner>>,
    pub decoders: HashMap<GroupId, Decoder>,
    /// The protocol of every group this node runs (its peers must agree).
    pub protocols: Vec<(GroupId, String)>,
    /// The members of every group of the cluster.
    pub routes: BTreeMap<GroupId, Vec<NodeId>>,
    pub zookeeper: Served<ZkMachine>,
    pub registers: BTreeMap<GroupId, Served<Register>>,
}

/// Build every group this node runs. Refuses a log that holds a group the configuration does
/// not run here (its data would be silently orphaned).
pub(crate) fn build(
    cfg: &Config,
    wal_dir: &Path,
    mut recovery: Recovery,
    metrics: &Arc<Metrics>,
) -> Result<Built> {
    let me = cfg.node_id;
    let all: Vec<NodeId> = cfg.members()?.keys().copied().collect();
    let mut built = Built {
        runners: Vec::new(),
        decoders: HashMap::new(),
        protocols: Vec::new(),
        routes: BTreeMap::new(),
        zookeeper: Served {
            machine: Arc::new(Mutex::new(ZkMachine::default())),
            view: watch::channel(View::default()).1,
        },
        registers: BTreeMap::new(),
    };
    built.routes.insert(0, all.clone());
    let zk_ops = recovery.groups.remove(&0).unwrap_or_default();
    let (runner, served) = zab_group(
        cfg,
        0,
        &cfg.protocol,
        all,
        "zookeeper",
        ZkMachine::default(),
        wal_dir,
        zk_ops,
        metrics,
    )?;
    built.runners.push(runner);
    built.zookeeper = served;
    built.protocols.push((0, cfg.protocol.clone()));
    for g in &cfg.groups {
        let members = cfg.group_members(g);
        built.routes.insert(g.id, members.clone());
        if !members.contains(&me) {
            continue;
        }
        let protocol = g.protocol.clone().unwrap_or_else(|| cfg.protocol.clone());
        let ops = recovery.groups.remove(&g.id).unwrap_or_default();
        let (runner, served) = zab_group(
            cfg,
            g.id,
            &protocol,
            members,
            "register",
            Register::new(g.id),
            wal_dir,
            ops,
            metrics,
        )?;
        built.runners.push(runner);
        built.registers.insert(g.id, served);
        built.protocols.push((g.id, protocol));
    }
    if let Some((&g, _)) = recovery.groups.iter().next() {
        bail!(
            "the write-ahead log in {} holds group {g}, which this node's configuration does \
             not run; add it back to [[groups]] (with this node among its members) or move the \
             data directory away",
            wal_dir.display()
        );
    }
    let zab: Decoder = Arc::new(|b| synod_zab::Msg::from_bytes(b).map(|m| Box::new(m) as PeerMsg));
    for (id, _) in &built.protocols {
        built.decoders.insert(*id, zab.clone());
    }
    Ok(built)
}

/// A group running Zab (or a variant) over state machine `S`.
#[allow(clippy::too_many_arguments)]
fn zab_group<S: StateMachine>(
    cfg: &Config,
    id: GroupId,
    protocol: &str,
    members: Vec<NodeId>,
    machine_kind: &str,
    mut machine: S,
    wal_dir: &Path,
    ops: Vec<Replayed>,
    metrics: &Arc<Metrics>,
) -> Result<(Box<dyn GroupRunner>, Served<S>)> {
    let durable = synod_log::typed::rebuild::<Entry, Hard>(wal_dir, id, ops)
        .with_context(|| format!("cannot recover group {id} from its log"))?;
    if let Some(s) = &durable.snapshot {
        machine.restore(s).map_err(|e| {
            anyhow!(
                "group {id}: the snapshot at slot {} cannot be read: {e}",
                s.at.slot
            )
        })?;
    }
    info!(
        group = id,
        protocol,
        snapshot_slot = machine.applied().slot,
        log_records = durable.records.len(),
        "recovered from the data directory"
    );
    let cluster = Cluster::new(cfg.node_id, members.clone());
    let core = Zab::restore(cluster, cfg.zab_options(protocol), durable, rand::random());
    let (view_tx, view_rx) = watch::channel(core.view());
    let machine = Arc::new(Mutex::new(machine));
    let group = Group::new(GroupParts {
        id,
        protocol: protocol.to_string(),
        machine_kind: machine_kind.to_string(),
        members,
        core,
        machine: machine.clone(),
        view: view_tx,
        limits: cfg.batch.limits(),
        max_pending: cfg.limits.max_pending_requests,
        request_timeout: Duration::from_millis(cfg.limits.request_timeout_ms),
        snapshot_every: cfg.snapshot_every,
        metrics: metrics.group(id),
        me: cfg.node_id,
    });
    Ok((
        Box::new(group),
        Served {
            machine,
            view: view_rx,
        },
    ))
}

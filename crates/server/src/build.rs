//! The groups a node runs, built from its configuration and its log: for each, the protocol
//! core (Zab, PFT Multi-Paxos or Mencius, by the group's protocol name; crate::protocol) restored from
//! its durable state, its state machine restored from its snapshot, and the decoder of its
//! peer messages. This is the server's registry of protocols and machines.

use crate::config::Config;
use crate::kv::KvMachine;
use crate::machine::{StateMachine, ZooKeeper};
use crate::protocol::GroupTunings;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use synod_core::{Cluster, GroupId, NodeId, View};
use synod_host::register::Register;
use synod_host::{Group, GroupParts, GroupRunner, SharedMachine};
use synod_log::{Recovery, Replayed};
use synod_registry::{Family, Visit};
use tokio::sync::watch;
use tracing::info;

/// A group's state machine and the view its front ends watch.
pub struct Served<S> {
    pub machine: Arc<Mutex<S>>,
    pub view: watch::Receiver<View>,
}

pub(crate) struct Built {
    pub runners: Vec<Box<dyn GroupRunner>>,
    /// Where each group's view is published to its front ends.
    pub views: HashMap<GroupId, watch::Sender<View>>,
    /// The protocol of every group this node runs (its peers must agree).
    pub protocols: Vec<(GroupId, String)>,
    /// The members of every group of the cluster.
    pub routes: BTreeMap<GroupId, Vec<NodeId>>,
    pub zookeeper: Served<ZooKeeper>,
    pub registers: BTreeMap<GroupId, Served<Register>>,
    /// This node's replicas of SconeKV buckets, by bucket index.
    pub kv: BTreeMap<u32, Served<KvMachine>>,
    /// This node's replica of the etcd store, when `[etcd]` is enabled.
    pub etcd: Option<Served<synod_etcd::EtcdMachine>>,
}

/// What one group is, before it is built.
struct Spec<'a> {
    id: GroupId,
    protocol: &'a str,
    members: Vec<NodeId>,
    /// Members that never vote (observers), at the group's birth.
    learners: Vec<NodeId>,
    machine_kind: &'static str,
    /// Zab's tie-break among equal histories: a bucket group prefers a different replica
    /// for each bucket so that masters spread over the nodes.
    preferred: Option<NodeId>,
}

/// Build every group this node runs. Refuses a log that holds a group the configuration does
/// not run here (its data would be silently orphaned).
pub(crate) fn build(cfg: &Config, wal_dir: &Path, mut recovery: Recovery) -> Result<Built> {
    let me = cfg.node_id;
    let all: Vec<NodeId> = cfg.members()?.keys().copied().collect();
    let zxids = |p: &str| {
        crate::protocol::zxids(p).ok_or_else(|| anyhow!("'{p}' is not a protocol of this server"))
    };
    let mut observers = cfg.observers.clone();
    observers.sort_unstable();
    observers.dedup();
    let zk = Spec {
        id: 0,
        protocol: &cfg.protocol,
        members: cfg.zookeeper_voters()?,
        learners: observers,
        machine_kind: "zookeeper",
        preferred: None,
    };
    let mut built = Built {
        runners: Vec::new(),
        views: HashMap::new(),
        protocols: Vec::new(),
        routes: BTreeMap::new(),
        zookeeper: Served {
            machine: Arc::new(Mutex::new(ZooKeeper::new(crate::protocol::Zxids::Tag))),
            view: watch::channel(View::default()).1,
        },
        registers: BTreeMap::new(),
        kv: BTreeMap::new(),
        etcd: None,
    };
    built.routes.insert(0, all.clone());
    let zk_ops = recovery.groups.remove(&0).unwrap_or_default();
    let machine = ZooKeeper::new(zxids(&cfg.protocol)?);
    let served = group(cfg, &zk, machine, wal_dir, zk_ops, &mut built)?;
    built.zookeeper = served;
    for g in &cfg.groups {
        let members = cfg.group_members(g);
        built.routes.insert(g.id, members.clone());
        if !members.contains(&me) {
            continue;
        }
        let protocol = g.protocol.as_deref().unwrap_or(&cfg.protocol);
        let spec = Spec {
            id: g.id,
            protocol,
            members,
            learners: Vec::new(),
            machine_kind: "register",
            preferred: None,
        };
        let ops = recovery.groups.remove(&g.id).unwrap_or_default();
        let machine = Register::new(g.id);
        let served = group(cfg, &spec, machine, wal_dir, ops, &mut built)?;
        built.registers.insert(g.id, served);
    }
    if cfg.kv.enabled() {
        let nodes: BTreeSet<NodeId> = all.iter().copied().collect();
        let protocol = cfg.kv.protocol.as_deref().unwrap_or(&cfg.protocol);
        for (b, members) in cfg.kv.placement(&nodes).iter().enumerate() {
            let b = b as u32;
            let id = cfg.kv.group_base + b;
            let members: Vec<NodeId> = members.iter().copied().collect();
            built.routes.insert(id, members.clone());
            if !members.contains(&me) {
                continue;
            }
            let spec = Spec {
                id,
                protocol,
                preferred: Some(members[b as usize % members.len()]),
                members,
                learners: Vec::new(),
                machine_kind: "kv",
            };
            let ops = recovery.groups.remove(&id).unwrap_or_default();
            let retain_us = cfg.kv.retain_ms * 1_000;
            let mut machine = KvMachine::new(b, cfg.kv.buckets, cfg.kv.group_base, retain_us);
            match cfg.debug_bug.as_str() {
                "kv-skip-read-validation" => machine.bucket_mut().plant_skip_read_validation(),
                "kv-reset-on-delete" => machine.bucket_mut().plant_reset_on_delete(),
                _ => {}
            }
            let served = group(cfg, &spec, machine, wal_dir, ops, &mut built)?;
            built.kv.insert(b, served);
        }
    }
    if cfg.etcd.enabled {
        let id = cfg.etcd.group;
        built.routes.insert(id, all.clone());
        let spec = Spec {
            id,
            protocol: cfg.etcd.protocol.as_deref().unwrap_or(&cfg.protocol),
            members: all.clone(),
            learners: Vec::new(),
            machine_kind: "etcd",
            preferred: None,
        };
        let ops = recovery.groups.remove(&id).unwrap_or_default();
        let machine = synod_etcd::EtcdMachine::new();
        built.etcd = Some(group(cfg, &spec, machine, wal_dir, ops, &mut built)?);
    }
    if let Some((&g, _)) = recovery.groups.iter().next() {
        bail!(
            "the write-ahead log in {} holds group {g}, which this node's configuration does \
             not run; add it back to [[groups]] (with this node among its members) or move the \
             data directory away",
            wal_dir.display()
        );
    }
    Ok(built)
}

/// Build one group with its protocol's core and decoder (found in the registry by the
/// group's protocol name), and record it in `built`.
fn group<S: StateMachine>(
    cfg: &Config,
    spec: &Spec,
    machine: S,
    wal_dir: &Path,
    ops: Vec<Replayed>,
    built: &mut Built,
) -> Result<Served<S>> {
    let p = spec.protocol;
    if crate::protocol::family(p).is_none() {
        bail!("'{p}' is not a protocol of this server");
    }
    let build = Build {
        cfg,
        spec,
        machine,
        wal_dir,
        ops,
    };
    let (runner, served, view) = synod_registry::visit(p, build).expect("checked")?;
    built.runners.push(runner);
    built.views.insert(spec.id, view);
    built.protocols.push((spec.id, p.to_string()));
    Ok(served)
}

/// A group to restore, given its family by the registry.
struct Build<'a, S> {
    cfg: &'a Config,
    spec: &'a Spec<'a>,
    machine: S,
    wal_dir: &'a Path,
    ops: Vec<Replayed>,
}

impl<S: StateMachine> Visit for Build<'_, S> {
    type Out = Result<Restored<S>>;
    fn visit<F: Family>(self, name: &'static str) -> Self::Out {
        let tunings = GroupTunings {
            cfg: self.cfg,
            preferred: self.spec.preferred,
        };
        let options = F::options(name, &tunings);
        restore::<F, S>(
            self.cfg,
            self.spec,
            options,
            self.machine,
            self.wal_dir,
            self.ops,
        )
    }
}

/// A group restored from the log: its runner for the host, its machine and view for the front
/// ends, and where its view is published.
type Restored<S> = (Box<dyn GroupRunner>, Served<S>, watch::Sender<View>);

/// Envelopes one replica may hold behind durability barriers (a core that needs more is
/// broken: the replica stops).
const OUTBOX_LIMIT: usize = 1 << 20;

/// A group running core `P` over state machine `S`, restored from its records in the log.
fn restore<P, S>(
    cfg: &Config,
    spec: &Spec,
    options: P::Options,
    mut machine: S,
    wal_dir: &Path,
    ops: Vec<Replayed>,
) -> Result<Restored<S>>
where
    P: Family,
    S: StateMachine,
{
    let (id, protocol) = (spec.id, spec.protocol);
    let durable =
        synod_log::typed::rebuild::<P::Record, P::Hard>(wal_dir, id, ops).with_context(|| {
            format!(
                "cannot recover group {id} from its log as protocol {protocol} (a log written \
                 by another protocol family cannot be read: the data directory's identity.toml \
                 names the protocol it was written by)"
            )
        })?;
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
    let cluster = Cluster::with_learners(cfg.node_id, spec.members.clone(), spec.learners.clone());
    let core = P::restore(cluster, options, durable, rand::random());
    let (view_tx, view_rx) = watch::channel(core.view());
    let machine = Arc::new(Mutex::new(machine));
    let shared: SharedMachine = machine.clone();
    let group = Group::new(GroupParts {
        id,
        me: cfg.node_id,
        protocol: protocol.to_string(),
        machine_kind: spec.machine_kind.to_string(),
        members: spec.members.iter().chain(&spec.learners).copied().collect(),
        core,
        machine: shared,
        snapshot_every: cfg.snapshot_every,
        outbox_limit: OUTBOX_LIMIT,
    });
    Ok((
        Box::new(group),
        Served {
            machine,
            view: view_rx,
        },
        view_tx,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use synod_core::wire::Wire;
    use synod_core::{Command, LogRecord, StorageOp};
    use synod_log::{FsyncPolicy, Wal, WalOptions};

    fn config(dir: &Path, protocol: &str) -> Config {
        let o: Vec<String> = [
            "cluster_id=test",
            "node_id=1",
            "peers.1=\"127.0.0.1:2881\"",
            "admin_addr=\"127.0.0.1:9181\"",
            "insecure=true",
            &format!("data_dir={:?}", dir.display().to_string()),
            &format!("protocol={protocol}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Config::load(None, &o).unwrap()
    }

    /// Write `ops` of group 0 to a log in `dir`, and replay it as a start would.
    fn log<R: LogRecord + Wire, H: Wire>(dir: &Path, ops: &[StorageOp<R, H>]) -> Recovery {
        let opts = WalOptions {
            dir: dir.to_path_buf(),
            segment_bytes: 1 << 20,
            fsync: FsyncPolicy::Never,
            preallocate_bytes: 0,
        };
        let (mut wal, _) = Wal::open(opts.clone()).unwrap();
        let ops: Vec<_> = ops.iter().map(|o| synod_log::typed::encode(0, o)).collect();
        wal.write_batch(&ops).unwrap();
        drop(wal);
        Wal::open(opts).unwrap().1
    }

    fn build_error(dir: &Path, protocol: &str, recovery: Recovery) -> String {
        match build(&config(dir, protocol), dir, recovery) {
            Ok(_) => panic!("{protocol} read a log of another protocol"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn a_log_of_one_family_is_refused_by_the_other_with_the_reason() {
        let cmd = Command {
            id: 7,
            payload: Bytes::from_static(b"create /a"),
        };
        let dir = tempfile::tempdir().unwrap();
        let zab: Vec<StorageOp<synod_zab::Entry, synod_zab::Hard>> = vec![
            StorageOp::SetHard(synod_zab::Hard {
                accepted_epoch: 2,
                accepted_leader: 1,
                current_epoch: 2,
                ..Default::default()
            }),
            StorageOp::Append(vec![synod_zab::Entry {
                zxid: synod_zab::Zxid {
                    epoch: 2,
                    counter: 1,
                },
                slot: 1,
                command: cmd.clone(),
                config: None,
            }]),
        ];
        let recovery = log(dir.path(), &zab);
        let e = build_error(dir.path(), "paxos", recovery);
        assert!(
            e.contains("cannot recover group 0 from its log as protocol paxos")
                && e.contains("another protocol"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let paxos: Vec<StorageOp<synod_paxos::Accepted, synod_paxos::Hard>> = vec![
            StorageOp::SetHard(synod_paxos::Hard {
                promised: 1,
                installed: 1,
                recovering: false,
            }),
            StorageOp::Append(vec![synod_paxos::Accepted {
                n: 1,
                view: 1,
                commands: vec![cmd.clone()],
            }]),
        ];
        let recovery = log(dir.path(), &paxos);
        let e = build_error(dir.path(), "zab", recovery);
        assert!(
            e.contains("cannot recover group 0 from its log as protocol zab"),
            "{e}"
        );
        let recovery = log(dir.path(), &paxos);
        let e = build_error(dir.path(), "mencius", recovery);
        assert!(
            e.contains("cannot recover group 0 from its log as protocol mencius"),
            "{e}"
        );
        let recovery = log(dir.path(), &zab);
        let e = build_error(dir.path(), "mencius", recovery);
        assert!(
            e.contains("cannot recover group 0 from its log as protocol mencius"),
            "{e}"
        );
        // And a Mencius log is refused by the others.
        let dir = tempfile::tempdir().unwrap();
        let mencius: Vec<StorageOp<synod_mencius::Rec, synod_mencius::Hard>> = vec![
            StorageOp::SetHard(synod_mencius::Hard {
                incarnation: 1,
                index: 4,
                ..Default::default()
            }),
            StorageOp::Append(vec![synod_mencius::Rec {
                instance: 4,
                ballot: 0,
                own: true,
                commands: vec![cmd.clone()],
            }]),
        ];
        for other in ["zab", "paxos"] {
            let recovery = log(dir.path(), &mencius);
            let e = build_error(dir.path(), other, recovery);
            assert!(
                e.contains(&format!(
                    "cannot recover group 0 from its log as protocol {other}"
                )),
                "{other}: {e}"
            );
        }
        // Read as itself, it builds.
        let recovery = log(dir.path(), &mencius);
        build(&config(dir.path(), "mencius"), dir.path(), recovery).unwrap();
    }
}

//! The replication protocols this server runs, by name: the Zab family (crates/zab: `zab` and
//! the variants of EL-Sanosi's thesis), PFT Multi-Paxos (crates/paxos: `paxos`, `paxos-mbq`,
//! `paxos-none`) and Mencius (crates/mencius: `mencius`). For each: whether a configuration may
//! name it, its core's options built from the configuration (`[zab]`, `[paxos]`, `[mencius]`,
//! `[batch]`), and how its delivered positions become the zxids ZooKeeper clients see.

use crate::config::Config;
use anyhow::{bail, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use synod_core::NodeId;
use synod_paxos::{Batching, CatchUp, Paxos};
use synod_registry::{Defaults, Family, Tunings};
pub use synod_zk::group::Zxids;

/// Every protocol name a configuration may use (the registry's served names: the
/// simulator's deliberately broken protocols are not served).
pub fn names() -> Vec<&'static str> {
    synod_registry::served_names()
}

/// The family of a protocol this server runs ("zab", "paxos", "mencius"), None if it runs
/// no such protocol.
pub fn family(protocol: &str) -> Option<&'static str> {
    synod_registry::find(protocol, true).map(|(_, family)| family)
}

/// How the zxids of a ZooKeeper group running `protocol` follow its positions.
pub fn zxids(protocol: &str) -> Option<Zxids> {
    family(protocol)?;
    synod_registry::facts(protocol).map(|f| f.zxids)
}

/// A protocol this server runs, for a cluster of `members`.
pub(crate) fn check_protocol(key: &str, protocol: &str, members: usize) -> Result<()> {
    synod_registry::check(protocol, members, true)
        .map_err(|e| anyhow::anyhow!("config key {key}: {e}"))
}

/// The catch-up scheme a PFT protocol's name fixes (None for other families).
fn named_catch_up(protocol: &str) -> Option<CatchUp> {
    (family(protocol) == Some("paxos")).then(|| Paxos::options(protocol, &Defaults).catch_up)
}

/// A group's settings over its protocol's options: the `[zab]`, `[paxos]`, `[mencius]` and
/// `[batch]` sections, and the group's preferred leader.
pub struct GroupTunings<'a> {
    pub cfg: &'a Config,
    /// Zab's tie-break among equal histories (bucket groups spread their masters).
    pub preferred: Option<NodeId>,
}

impl Tunings for GroupTunings<'_> {
    fn zab(&self, _name: &str, o: synod_zab::Options) -> synod_zab::Options {
        let z = &self.cfg.zab;
        synod_zab::Options {
            heartbeat_us: z.heartbeat_ms * 1_000,
            follower_timeout_us: z.follower_timeout_ms * 1_000,
            leader_timeout_us: z.leader_timeout_ms * 1_000,
            discovery_timeout_us: z.discovery_timeout_ms * 1_000,
            election_resend_us: z.heartbeat_ms * 1_000,
            election_resend_max_us: z.follower_timeout_ms * 1_000,
            finalize_wait_us: z.tick_ms * 1_000,
            log_retain: z.log_retain,
            max_inflight: z.max_inflight,
            max_batch: self.cfg.batch.max_commands,
            window: z.window,
            preferred_leader: self.preferred,
            ..o
        }
    }

    fn paxos(&self, name: &str, o: synod_paxos::Options) -> synod_paxos::Options {
        let p = &self.cfg.paxos;
        // `paxos.catch_up` sets plain `paxos`'s scheme; the other names fix their own.
        let catch_up = match (name, p.catch_up.as_deref().and_then(catch_up_named)) {
            ("paxos", Some(c)) => c,
            _ => o.catch_up,
        };
        synod_paxos::Options {
            heartbeat_us: p.heartbeat_ms * 1_000,
            view_change_timeout_us: p.view_change_timeout_ms * 1_000,
            view_change_timeout_max_us: p.view_change_timeout_max_ms * 1_000,
            adaptive_timeout: p.adaptive_timeout,
            batching: match p.batch {
                PaxosBatch::Adaptive => Batching::Adaptive { window: p.window },
                PaxosBatch::Fixed(size) => Batching::Fixed {
                    size,
                    timer_us: p.batch_timer_ms * 1_000,
                },
            },
            max_batch: self.cfg.batch.max_commands,
            catch_up,
            mbq_period_us: p.mbq_period_ms * 1_000,
            ..o
        }
    }

    fn mencius(&self, _name: &str, o: synod_mencius::Options) -> synod_mencius::Options {
        let m = &self.cfg.mencius;
        synod_mencius::Options {
            heartbeat_us: m.heartbeat_ms * 1_000,
            suspect_timeout_us: m.suspect_timeout_ms * 1_000,
            alpha: m.alpha,
            tau_us: m.tau_ms * 1_000,
            beta: m.beta,
            revoke_timeout_us: m.revoke_timeout_ms * 1_000,
            max_batch: m.max_batch,
            max_inflight: m.max_inflight,
            max_queued: m.max_queued,
            // Deliveries in instance order only: zxids must grow with every delivery.
            commute: None,
            ..o
        }
    }
}

/// `[paxos]`: the timers and batching of every PFT group (defaults: `synod_paxos::Options`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PaxosTuning {
    /// Primary → backups heartbeat (a repeated COMMIT).
    pub heartbeat_ms: u64,
    /// The view-change timer's first value: a backup that hears nothing from its primary, or
    /// sees an accepted order stay unchosen, this long starts a view change.
    pub view_change_timeout_ms: u64,
    /// The timer doubles for each view that fails to install, up to this.
    pub view_change_timeout_max_ms: u64,
    /// Adapt the timer to the measured ordering latency (never below three heartbeats).
    pub adaptive_timeout: bool,
    /// `adaptive` (at most `window` batches in flight; what waits when one commits leaves as
    /// the next batch, up to `batch.max_commands`), or a fixed batch size: a batch leaves
    /// when it holds that many commands or `batch_timer_ms` after its first arrived.
    pub batch: PaxosBatch,
    pub batch_timer_ms: u64,
    pub window: usize,
    /// Catch-up of the groups running plain `paxos`: `pbq` (ask the primary), `mbq` (every
    /// replica reports its state every `mbq_period_ms`) or `none` (wait for a checkpoint and a
    /// state transfer). `paxos-mbq` and `paxos-none` name theirs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<String>,
    pub mbq_period_ms: u64,
}

/// `paxos.batch`: the string `adaptive` or a batch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaxosBatch {
    Adaptive,
    Fixed(usize),
}

impl Serialize for PaxosBatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PaxosBatch::Adaptive => s.serialize_str("adaptive"),
            PaxosBatch::Fixed(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for PaxosBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = PaxosBatch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"adaptive\" or a batch size (a positive integer)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PaxosBatch, E> {
                match v {
                    "adaptive" => Ok(PaxosBatch::Adaptive),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PaxosBatch, E> {
                Ok(PaxosBatch::Fixed(usize::try_from(v).map_err(|_| {
                    E::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                })?))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PaxosBatch, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl Default for PaxosTuning {
    fn default() -> Self {
        let d = synod_paxos::Options::default();
        let window = match d.batching {
            Batching::Adaptive { window } => window,
            Batching::Fixed { .. } => 8,
        };
        Self {
            heartbeat_ms: d.heartbeat_us / 1_000,
            view_change_timeout_ms: d.view_change_timeout_us / 1_000,
            view_change_timeout_max_ms: d.view_change_timeout_max_us / 1_000,
            adaptive_timeout: d.adaptive_timeout,
            batch: PaxosBatch::Adaptive,
            batch_timer_ms: 5,
            window,
            catch_up: None,
            mbq_period_ms: d.mbq_period_us / 1_000,
        }
    }
}

fn catch_up_named(name: &str) -> Option<CatchUp> {
    [CatchUp::Pbq, CatchUp::Mbq, CatchUp::None]
        .into_iter()
        .find(|c| c.name() == name)
}

impl PaxosTuning {
    /// Checks the section on its own; `protocols` are the protocols of every group.
    pub(crate) fn validate<'a>(
        &self,
        max_commands: usize,
        protocols: impl Iterator<Item = &'a str>,
    ) -> Result<()> {
        let protocols: Vec<&str> = protocols.collect();
        if self.heartbeat_ms == 0 {
            bail!("config key paxos.heartbeat_ms: must be at least 1");
        }
        if self.view_change_timeout_ms < 2 * self.heartbeat_ms {
            bail!("config key paxos.view_change_timeout_ms: must be at least twice paxos.heartbeat_ms");
        }
        if self.view_change_timeout_max_ms < self.view_change_timeout_ms {
            bail!("config key paxos.view_change_timeout_max_ms: must be at least paxos.view_change_timeout_ms");
        }
        if self.window == 0 {
            bail!("config key paxos.window: must be at least 1");
        }
        if self.mbq_period_ms == 0 {
            bail!("config key paxos.mbq_period_ms: must be at least 1");
        }
        let max = synod_paxos::msg::MAX_BATCH;
        if let PaxosBatch::Fixed(size) = self.batch {
            if !(1..=max).contains(&size) {
                bail!("config key paxos.batch: {size} is outside 1..={max}");
            }
            if self.batch_timer_ms == 0 {
                bail!(
                    "config key paxos.batch_timer_ms: must be at least 1 with a fixed batch size"
                );
            }
        }
        if let Some(c) = &self.catch_up {
            let Some(scheme) = catch_up_named(c) else {
                bail!("config key paxos.catch_up: '{c}' (expected pbq, mbq or none)");
            };
            if let Some(p) = protocols
                .iter()
                .find(|p| **p != "paxos" && named_catch_up(p).is_some_and(|s| s != scheme))
            {
                bail!(
                    "config key paxos.catch_up: '{c}' contradicts protocol '{p}', which names \
                     its own (catch_up applies to groups running plain paxos)"
                );
            }
        }
        let paxos = protocols.iter().any(|p| family(p) == Some("paxos"));
        if paxos && max_commands > max {
            bail!("config key batch.max_commands: must not exceed {max} with a paxos group (a position names a command of a batch in 16 bits)");
        }
        Ok(())
    }
}

/// `[mencius]`: the failure detector, skips, revocation and batching of every Mencius group
/// (defaults: `synod_mencius::Options`). Out-of-order commit (M13) is never on in the server:
/// ZooKeeper's zxids must grow with every delivery.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MenciusTuning {
    /// Every peer hears from a replica at least this often (a SKIP doubles as the heartbeat).
    pub heartbeat_ms: u64,
    /// A peer silent this long is suspected: its instances are revoked, and a lower-id
    /// replica takes over the session duties. Clients of a failed replica wait about this long.
    pub suspect_timeout_ms: u64,
    /// Accelerator 1: skips owed to a peer go out once more than `alpha` are outstanding or
    /// the oldest has waited `tau_ms`.
    pub alpha: u64,
    pub tau_ms: u64,
    /// Optimization 3: a suspect's instances are revoked in blocks of `beta` instances.
    pub beta: u64,
    /// A revocation not finished in this long starts again with a higher ballot.
    pub revoke_timeout_ms: u64,
    /// Commands per instance.
    pub max_batch: usize,
    /// Own instances suggested and not yet decided; beyond it commands wait and batch.
    pub max_inflight: usize,
    /// Commands waiting in the core; beyond it submissions are refused (busy).
    pub max_queued: usize,
}

impl Default for MenciusTuning {
    fn default() -> Self {
        let d = synod_mencius::Options::default();
        Self {
            heartbeat_ms: d.heartbeat_us / 1_000,
            suspect_timeout_ms: d.suspect_timeout_us / 1_000,
            alpha: d.alpha,
            tau_ms: d.tau_us / 1_000,
            beta: d.beta,
            revoke_timeout_ms: d.revoke_timeout_us / 1_000,
            max_batch: d.max_batch,
            max_inflight: d.max_inflight,
            max_queued: d.max_queued,
        }
    }
}

/// Bounds of the `[mencius]` counts: beyond them a replica's memory or a revocation's messages
/// grow without use.
const MENCIUS_ALPHA_MAX: u64 = 1 << 20;
const MENCIUS_BETA_MAX: u64 = 1 << 30;
const MENCIUS_INFLIGHT_MAX: usize = 1 << 16;
const MENCIUS_QUEUED_MAX: usize = 1 << 24;
/// Longest timer of the section (an hour).
const MENCIUS_TIMER_MS_MAX: u64 = 3_600_000;

impl MenciusTuning {
    /// Checks the section on its own.
    pub(crate) fn validate(&self) -> Result<()> {
        for (key, v) in [
            ("heartbeat_ms", self.heartbeat_ms),
            ("suspect_timeout_ms", self.suspect_timeout_ms),
            ("tau_ms", self.tau_ms),
            ("revoke_timeout_ms", self.revoke_timeout_ms),
        ] {
            if !(1..=MENCIUS_TIMER_MS_MAX).contains(&v) {
                bail!("config key mencius.{key}: {v} is outside 1..={MENCIUS_TIMER_MS_MAX}");
            }
        }
        if self.suspect_timeout_ms < 2 * self.heartbeat_ms {
            bail!("config key mencius.suspect_timeout_ms: must be at least twice mencius.heartbeat_ms");
        }
        if self.revoke_timeout_ms < self.heartbeat_ms {
            bail!("config key mencius.revoke_timeout_ms: must be at least mencius.heartbeat_ms");
        }
        if self.alpha > MENCIUS_ALPHA_MAX {
            bail!(
                "config key mencius.alpha: {} is outside 0..={MENCIUS_ALPHA_MAX}",
                self.alpha
            );
        }
        if !(1..=MENCIUS_BETA_MAX).contains(&self.beta) {
            bail!(
                "config key mencius.beta: {} is outside 1..={MENCIUS_BETA_MAX}",
                self.beta
            );
        }
        let max = synod_mencius::msg::MAX_BATCH;
        if !(1..=max).contains(&self.max_batch) {
            bail!(
                "config key mencius.max_batch: {} is outside 1..={max} (a position names a \
                 command of an instance in 16 bits)",
                self.max_batch
            );
        }
        if !(1..=MENCIUS_INFLIGHT_MAX).contains(&self.max_inflight) {
            bail!(
                "config key mencius.max_inflight: {} is outside 1..={MENCIUS_INFLIGHT_MAX}",
                self.max_inflight
            );
        }
        if !(1..=MENCIUS_QUEUED_MAX).contains(&self.max_queued) {
            bail!(
                "config key mencius.max_queued: {} is outside 1..={MENCIUS_QUEUED_MAX}",
                self.max_queued
            );
        }
        Ok(())
    }
}

impl Config {
    /// The protocol of every group this cluster runs (group 0's first).
    pub fn protocols(&self) -> impl Iterator<Item = &str> {
        let kv = self
            .kv
            .enabled()
            .then(|| self.kv.protocol.as_deref().unwrap_or(&self.protocol));
        std::iter::once(self.protocol.as_str())
            .chain(
                self.groups
                    .iter()
                    .map(|g| g.protocol.as_deref().unwrap_or(&self.protocol)),
            )
            .chain(kv)
    }

    /// Whether any group runs a protocol of `family` ("zab", "paxos", "mencius").
    pub fn runs(&self, family: &str) -> bool {
        self.protocols().any(|p| self::family(p) == Some(family))
    }

    /// The options of a group running `protocol` (a name this server runs) of family `F`.
    pub fn options<F: Family>(&self, protocol: &str) -> F::Options {
        F::options(
            protocol,
            &GroupTunings {
                cfg: self,
                preferred: None,
            },
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use synod_mencius::Mencius;

    /// A three-peer configuration with these keys added (shared by the config tests).
    pub(crate) fn load(extra: &[&str]) -> Result<Config> {
        let base = [
            "cluster_id=test",
            "node_id=1",
            "peers.1=\"127.0.0.1:2881\"",
            "peers.2=\"127.0.0.1:2882\"",
            "peers.3=\"127.0.0.1:2883\"",
            "admin_addr=\"127.0.0.1:9181\"",
            "data_dir=/tmp/x",
            "insecure=true",
        ];
        let o: Vec<String> = base.iter().chain(extra).map(|s| s.to_string()).collect();
        Config::load(None, &o)
    }

    #[test]
    fn paxos_is_a_protocol_with_defaults_from_the_core() {
        let c = load(&["protocol=paxos"]).unwrap();
        assert!(c.runs("paxos") && !c.runs("zab"));
        let o = c.options::<Paxos>("paxos");
        let d = synod_paxos::Options::default();
        assert_eq!(o.heartbeat_us, d.heartbeat_us);
        assert_eq!(o.view_change_timeout_us, d.view_change_timeout_us);
        assert_eq!(o.view_change_timeout_max_us, d.view_change_timeout_max_us);
        assert_eq!(o.adaptive_timeout, d.adaptive_timeout);
        assert_eq!(o.batching, d.batching);
        assert_eq!(o.mbq_period_us, d.mbq_period_us);
        assert_eq!(o.catch_up, CatchUp::Pbq);
        assert_eq!(o.max_batch, c.batch.max_commands);
        assert_eq!(c.options::<Paxos>("paxos-mbq").catch_up, CatchUp::Mbq);
        assert_eq!(c.options::<Paxos>("paxos-none").catch_up, CatchUp::None);
        // Any cluster size.
        for n in 1..=5 {
            check_protocol("protocol", "paxos", n).unwrap();
        }
        // The simulator's broken variants are not served.
        let e = load(&["protocol=paxos-bug-lower-view-wins"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("protocol") && e.contains("paxos-mbq"), "{e}");
    }

    #[test]
    fn the_paxos_section_maps_to_the_options() {
        let c = load(&[
            "protocol=paxos",
            "paxos.heartbeat_ms=20",
            "paxos.view_change_timeout_ms=300",
            "paxos.view_change_timeout_max_ms=2000",
            "paxos.adaptive_timeout=false",
            "paxos.batch=64",
            "paxos.batch_timer_ms=3",
            "paxos.catch_up=mbq",
            "paxos.mbq_period_ms=50",
            "batch.max_commands=100",
        ])
        .unwrap();
        let o = c.options::<Paxos>("paxos");
        assert_eq!(o.heartbeat_us, 20_000);
        assert_eq!(o.view_change_timeout_us, 300_000);
        assert_eq!(o.view_change_timeout_max_us, 2_000_000);
        assert!(!o.adaptive_timeout);
        assert_eq!(
            o.batching,
            Batching::Fixed {
                size: 64,
                timer_us: 3_000
            }
        );
        assert_eq!(o.catch_up, CatchUp::Mbq);
        assert_eq!(o.mbq_period_us, 50_000);
        assert_eq!(o.max_batch, 100);
        let c = load(&["protocol=paxos", "paxos.batch=adaptive", "paxos.window=3"]).unwrap();
        assert_eq!(
            c.options::<Paxos>("paxos").batching,
            Batching::Adaptive { window: 3 }
        );
    }

    #[test]
    fn groups_may_run_paxos_beside_zab() {
        let text =
            "cluster_id = 'c'\nnode_id = 1\ninsecure = true\nadmin_addr = '127.0.0.1:9181'\n\
                    data_dir = '/tmp/x'\n[peers]\n1 = '127.0.0.1:2881'\n2 = '127.0.0.1:2882'\n\
                    3 = '127.0.0.1:2883'\n[[groups]]\nid = 1\nprotocol = 'paxos-none'\n\
                    [[groups]]\nid = 2\nmembers = [1, 3]\n[paxos]\nbatch = 'adaptive'\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let c = Config::load(Some(&path), &[]).unwrap();
        assert_eq!(
            c.protocols().collect::<Vec<_>>(),
            vec!["zab", "paxos-none", "zab"]
        );
        assert!(c.runs("paxos") && c.runs("zab"));
        // catch_up may not contradict a name that fixes the scheme.
        std::fs::write(&path, format!("{text}catch_up = 'mbq'\n")).unwrap();
        let e = Config::load(Some(&path), &[]).unwrap_err().to_string();
        assert!(
            e.contains("paxos.catch_up") && e.contains("paxos-none"),
            "{e}"
        );
        std::fs::write(&path, format!("{text}catch_up = 'none'\n")).unwrap();
        Config::load(Some(&path), &[]).unwrap();
    }

    #[test]
    fn bad_paxos_values_name_the_key() {
        for (bad, key) in [
            ("paxos.batch=sometimes", "paxos.batch"),
            ("paxos.batch=0", "paxos.batch"),
            ("paxos.batch=-3", "paxos.batch"),
            ("paxos.batch=100000", "paxos.batch"),
            ("paxos.heartbeat_ms=0", "paxos.heartbeat_ms"),
            (
                "paxos.view_change_timeout_ms=60",
                "paxos.view_change_timeout_ms",
            ),
            (
                "paxos.view_change_timeout_max_ms=100",
                "paxos.view_change_timeout_max_ms",
            ),
            ("paxos.window=0", "paxos.window"),
            ("paxos.catch_up=gossip", "paxos.catch_up"),
            ("paxos.mbq_period_ms=0", "paxos.mbq_period_ms"),
            ("paxos.leader_timeout_ms=5", "leader_timeout_ms"),
        ] {
            let e = load(&["protocol=paxos", bad]).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        let e = load(&["protocol=paxos", "paxos.batch=10", "paxos.batch_timer_ms=0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("paxos.batch_timer_ms"), "{e}");
        // The position encoding bounds a paxos batch; a Zab-only cluster is not bound by it.
        let big = ["batch.max_commands=70000", "zab.max_inflight=100000"];
        let e = load(&[&["protocol=paxos"][..], &big].concat())
            .unwrap_err()
            .to_string();
        assert!(e.contains("batch.max_commands"), "{e}");
        load(&big).unwrap();
        // A round trip of 2 × 150 ms against a 400 ms view-change timer.
        let e = load(&["protocol=paxos", "link_emulation.delay_ms=150"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("paxos.view_change_timeout_ms"), "{e}");
    }

    #[test]
    fn mencius_is_a_protocol_with_defaults_from_the_core() {
        let c = load(&["protocol=mencius"]).unwrap();
        assert!(c.runs("mencius") && !c.runs("paxos") && !c.runs("zab"));
        assert_eq!(zxids("mencius").unwrap(), Zxids::PaxosBatch);
        let o = c.options::<Mencius>("mencius");
        let d = synod_mencius::Options::default();
        assert_eq!(o.heartbeat_us, d.heartbeat_us);
        assert_eq!(o.suspect_timeout_us, d.suspect_timeout_us);
        assert_eq!((o.alpha, o.tau_us, o.beta), (d.alpha, d.tau_us, d.beta));
        assert_eq!(o.revoke_timeout_us, d.revoke_timeout_us);
        assert_eq!(
            (o.max_batch, o.max_inflight, o.max_queued),
            (d.max_batch, d.max_inflight, d.max_queued)
        );
        assert!(o.commute.is_none() && o.bug.is_none());
        // The simulator's broken variants are not served; nor are clusters the core cannot run.
        let e = load(&["protocol=mencius-bug-stale-skip"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("protocol") && e.contains("mencius"), "{e}");
        check_protocol("protocol", "mencius", 64).unwrap();
        let e = check_protocol("groups[0].protocol", "mencius", 65)
            .unwrap_err()
            .to_string();
        assert!(e.contains("groups[0].protocol") && e.contains("64"), "{e}");
        assert!(names().contains(&"mencius"));
    }

    #[test]
    fn the_mencius_section_maps_to_the_options() {
        let c = load(&[
            "protocol=mencius",
            "mencius.heartbeat_ms=20",
            "mencius.suspect_timeout_ms=300",
            "mencius.alpha=5",
            "mencius.tau_ms=10",
            "mencius.beta=1000",
            "mencius.revoke_timeout_ms=400",
            "mencius.max_batch=64",
            "mencius.max_inflight=8",
            "mencius.max_queued=500",
        ])
        .unwrap();
        let o = c.options::<Mencius>("mencius");
        assert_eq!((o.heartbeat_us, o.suspect_timeout_us), (20_000, 300_000));
        assert_eq!((o.alpha, o.tau_us, o.beta), (5, 10_000, 1_000));
        assert_eq!(o.revoke_timeout_us, 400_000);
        assert_eq!((o.max_batch, o.max_inflight, o.max_queued), (64, 8, 500));
        // A [[groups]] entry may run it beside zab.
        let text =
            "cluster_id = 'c'\nnode_id = 1\ninsecure = true\nadmin_addr = '127.0.0.1:9181'\n\
                    data_dir = '/tmp/x'\n[peers]\n1 = '127.0.0.1:2881'\n2 = '127.0.0.1:2882'\n\
                    3 = '127.0.0.1:2883'\n[[groups]]\nid = 1\nprotocol = 'mencius'\n\
                    [mencius]\nbeta = 50\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let c = Config::load(Some(&path), &[]).unwrap();
        assert_eq!(c.protocols().collect::<Vec<_>>(), vec!["zab", "mencius"]);
        assert!(c.runs("mencius") && c.runs("zab"));
        assert_eq!(c.options::<Mencius>("mencius").beta, 50);
    }

    #[test]
    fn bad_mencius_values_name_the_key() {
        for (bad, key) in [
            ("mencius.heartbeat_ms=0", "mencius.heartbeat_ms"),
            ("mencius.heartbeat_ms=-1", "mencius.heartbeat_ms"),
            (
                "mencius.suspect_timeout_ms=60",
                "mencius.suspect_timeout_ms",
            ),
            (
                "mencius.suspect_timeout_ms=99999999999",
                "mencius.suspect_timeout_ms",
            ),
            ("mencius.tau_ms=0", "mencius.tau_ms"),
            ("mencius.revoke_timeout_ms=10", "mencius.revoke_timeout_ms"),
            ("mencius.alpha=99999999999", "mencius.alpha"),
            ("mencius.beta=0", "mencius.beta"),
            ("mencius.beta=99999999999999", "mencius.beta"),
            ("mencius.max_batch=0", "mencius.max_batch"),
            ("mencius.max_batch=65537", "mencius.max_batch"),
            ("mencius.max_inflight=0", "mencius.max_inflight"),
            ("mencius.max_inflight=1000000", "mencius.max_inflight"),
            ("mencius.max_queued=0", "mencius.max_queued"),
            ("mencius.commute=true", "commute"),
            ("mencius.tau=5", "tau"),
        ] {
            let e = load(&["protocol=mencius", bad]).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        // A round trip of 2 × 150 ms against the 500 ms suspect timeout; fine once raised.
        let e = load(&["protocol=mencius", "link_emulation.delay_ms=150"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("mencius.suspect_timeout_ms"), "{e}");
        load(&[
            "protocol=mencius",
            "link_emulation.delay_ms=150",
            "mencius.suspect_timeout_ms=1000",
        ])
        .unwrap();
        // A Zab-only cluster is not bound by the Mencius timers.
        load(&["link_emulation.delay_ms=150"]).unwrap();
    }

    #[test]
    fn mencius_zxids_grow_in_instance_order_across_owners() {
        // Replica 0 owns instances 3, 6, …; replica 1 owns 4, 7, …: deliveries in instance
        // order, a batch of two at 4, a skip (no-op) at 5.
        let z = Zxids::PaxosBatch;
        let tags = [
            synod_mencius::msg::tag(3, 0, 1),
            synod_mencius::msg::tag(4, 0, 2),
            synod_mencius::msg::tag(4, 1, 2),
            synod_mencius::msg::tag(6, 0, 1),
        ];
        let zxids: Vec<i64> = tags.iter().map(|&t| z.zxid(t)).collect();
        assert!(zxids.windows(2).all(|w| w[0] < w[1]), "{zxids:?}");
        for (&t, &x) in tags.iter().zip(&zxids) {
            assert_eq!(z.tag(x), t);
        }
    }

    #[test]
    fn paxos_zxids_grow_within_a_batch_and_map_back() {
        let z = Zxids::PaxosBatch;
        // Batch 7 of three commands, then batch 8 of one.
        let tags = [
            synod_paxos::msg::tag(7, 0, 3),
            synod_paxos::msg::tag(7, 1, 3),
            synod_paxos::msg::tag(7, 2, 3),
            synod_paxos::msg::tag(8, 0, 1),
        ];
        let zxids: Vec<i64> = tags.iter().map(|&t| z.zxid(t)).collect();
        assert!(zxids.windows(2).all(|w| w[0] < w[1]), "{zxids:?}");
        for (&t, &x) in tags.iter().zip(&zxids) {
            assert_eq!(z.tag(x), t);
        }
        assert_eq!((z.zxid(0), z.tag(0)), (0, 0));
        assert_eq!((Zxids::Tag.zxid(42), Zxids::Tag.tag(42)), (42, 42));
    }
}

//! ZooKeeper 3.8's quotas, kept in the tree exactly where ZooKeeper keeps them.
//!
//! A quota on path P is the node `/zookeeper/quota` + P + `/zookeeper_limits`, whose data is a
//! [`StatsTrack`] string (`count=5,bytes=-1=;byteHardLimit=-1;countHardLimit=-1` as zkCli's
//! `setquota` writes it: soft limits `count`/`bytes`, hard limits `countHardLimit`/
//! `byteHardLimit`, -1 for none). Its usage is the data of the sibling `zookeeper_stats`
//! (`count=N,bytes=M`): N counts P itself and every node below it, M their data lengths.
//!
//! What the server does, as ZooKeeper's DataTree does it:
//! * Creating a `zookeeper_stats` node under `/zookeeper/quota` replaces its data with the
//!   usage of its subtree, computed by the server (the client's data only shows in the
//!   create's own reply). zkCli writes `count=0,bytes=0` and relies on that.
//! * Every create, delete (ephemerals and reaped containers/TTL nodes included) and setData
//!   adds its difference to the stats of the *deepest* quota at or above the node
//!   (getMaxPrefixWithQuota), found through the limits node; only one quota is charged. The
//!   stats node's data changes in place: its version, mzxid and mtime stay as they were and no
//!   watch fires (only its dataLength moves). Its data is re-encoded on every update.
//! * With `enforce_quota` (ZooKeeper's `-Dzookeeper.enforceQuota=true`), a create or setData
//!   that would take the count or bytes past a limit is logged (a rate-limited warning); past a
//!   hard limit it fails with QUOTAEXCEEDED (-125). ZooKeeper checks and logs nothing when the
//!   setting is off, which is the default.
//!
//! The set of quotas is not kept beside the tree: it is read from the limits nodes (ZooKeeper
//! keeps a trie of them, rebuilt from the same nodes when it loads a snapshot), so snapshots
//! need nothing more, and a tree without any quota pays one lookup per write.

use crate::path;
use crate::ratelimit::{now_ms, RateLimitedWarn};
use crate::tree::Tree;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::ops::Bound;

/// KeeperException.Code.QUOTAEXCEEDED.
pub const QUOTA_EXCEEDED: i32 = -125;
/// The node under which quotas live (Quotas.quotaZookeeper).
pub const QUOTA_ROOT: &str = "/zookeeper/quota";
/// The name of a quota's limits node (Quotas.limitNode).
pub const LIMIT_NODE: &str = "zookeeper_limits";
/// The name of a quota's usage node (Quotas.statNode).
pub const STAT_NODE: &str = "zookeeper_stats";

/// The limits node of a quota on `p`.
pub fn limit_path(p: &str) -> String {
    format!("{QUOTA_ROOT}{p}/{LIMIT_NODE}")
}

/// The stats node of a quota on `p`.
pub fn stat_path(p: &str) -> String {
    format!("{QUOTA_ROOT}{p}/{STAT_NODE}")
}

/// ZooKeeper's StatsTrack: `key=value` pairs separated by `,` or `;`, a missing key reading
/// as -1.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsTrack {
    values: BTreeMap<String, i64>,
}

impl StatsTrack {
    pub const COUNT: &'static str = "count";
    pub const BYTES: &'static str = "bytes";
    pub const COUNT_HARD_LIMIT: &'static str = "countHardLimit";
    pub const BYTE_HARD_LIMIT: &'static str = "byteHardLimit";

    /// Usage as the server writes it: `count=N,bytes=M`.
    pub fn usage(count: i64, bytes: i64) -> Self {
        let mut s = StatsTrack::default();
        s.set(Self::COUNT, count);
        s.set(Self::BYTES, bytes);
        s
    }

    /// Parse as ZooKeeper does; None where ZooKeeper's parser throws (a pair without `=` or a
    /// value that is not a long). Pairs are split at runs of `,`/`;`, a pair at each `=`
    /// (trailing empty pieces dropped, so `bytes=5=` reads 5), an empty value reads -1, and a
    /// later duplicate key wins.
    pub fn parse(data: &[u8]) -> Option<Self> {
        let s = String::from_utf8_lossy(data);
        let mut values = BTreeMap::new();
        if s.is_empty() {
            return Some(StatsTrack { values });
        }
        // Pattern "[,;]+".split: a leading empty piece stays, empty pieces inside are one
        // separator run, trailing empty pieces go.
        let mut pairs: Vec<&str> = Vec::new();
        for (i, piece) in s.split([',', ';']).enumerate() {
            if i == 0 || !piece.is_empty() {
                pairs.push(piece);
            }
        }
        while pairs.last() == Some(&"") {
            pairs.pop();
        }
        for pair in pairs {
            let mut kv: Vec<&str> = pair.split('=').collect();
            while kv.len() > 1 && kv.last() == Some(&"") {
                kv.pop();
            }
            let (key, value) = (kv.first()?, kv.get(1)?);
            let v = if value.is_empty() {
                -1
            } else {
                value.parse::<i64>().ok()?
            };
            values.insert(key.to_string(), v);
        }
        Some(StatsTrack { values })
    }

    pub fn get(&self, key: &str) -> i64 {
        self.values.get(key).copied().unwrap_or(-1)
    }
    pub fn set(&mut self, key: &str, v: i64) {
        self.values.insert(key.to_string(), v);
    }
    pub fn count(&self) -> i64 {
        self.get(Self::COUNT)
    }
    pub fn bytes(&self) -> i64 {
        self.get(Self::BYTES)
    }
    pub fn count_hard_limit(&self) -> i64 {
        self.get(Self::COUNT_HARD_LIMIT)
    }
    pub fn byte_hard_limit(&self) -> i64 {
        self.get(Self::BYTE_HARD_LIMIT)
    }
    /// The limit that applies: the hard one if set, else the soft one (-1: none).
    fn limit(hard: i64, soft: i64) -> (i64, bool) {
        if hard > -1 {
            (hard, true)
        } else {
            (soft, false)
        }
    }
}

impl std::fmt::Display for StatsTrack {
    /// `count=C,bytes=B`, then, if there are other keys, `=` and `;key=value` for each in key
    /// order (ZooKeeper's format, readable by 3.4's parser). Keys sort by bytes here and by
    /// UTF-16 units in Java: the same for every key but exotic non-ASCII ones.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "count={},bytes={}", self.count(), self.bytes())?;
        let mut others = self
            .values
            .iter()
            .filter(|(k, _)| *k != Self::COUNT && *k != Self::BYTES)
            .peekable();
        if others.peek().is_some() {
            f.write_str("=")?;
            for (k, v) in others {
                write!(f, ";{k}={v}")?;
            }
        }
        Ok(())
    }
}

static BROKEN: RateLimitedWarn = RateLimitedWarn::new();

/// ZooKeeper's RateLogger for "Quota exceeded" warnings: a message is logged at once unless it
/// repeats the previous one; repeats are counted and logged as `[N times]` at most every
/// 100 ms, or when another message comes.
struct RateLogger {
    last: std::sync::Mutex<Option<(String, i64, u64)>>,
}

impl RateLogger {
    const INTERVAL_MS: i64 = 100;

    fn log(&self, msg: String) {
        let now = now_ms();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match last.as_mut() {
            Some((m, at, n)) if *m == msg => {
                *n += 1;
                if now.saturating_sub(*at) >= Self::INTERVAL_MS {
                    tracing::warn!("[{n} times] Message: {msg}");
                    *at = now;
                    *n = 0;
                }
            }
            _ => {
                if let Some((m, _, n)) = last.take() {
                    if n > 0 {
                        tracing::warn!("[{n} times] Message: {m}");
                    }
                }
                tracing::warn!("{msg}");
                *last = Some((msg, now, 0));
            }
        }
    }
}

static EXCEEDED: RateLogger = RateLogger {
    last: std::sync::Mutex::new(None),
};

fn warn_broken(what: &str, node: &str) {
    if let Some(n) = BROKEN.check() {
        tracing::warn!(node, suppressed = n, "quota: {what}");
    }
}

impl Tree {
    /// The deepest path at or above `p` with a quota (ZooKeeper's getMaxPrefixWithQuota):
    /// the longest prefix P of `p` for which `/zookeeper/quota` + P + `/zookeeper_limits`
    /// exists. Never `/` (ZooKeeper keeps no quota on the root).
    pub fn quota_root<'p>(&self, p: &'p str) -> Option<&'p str> {
        if p == "/" || self.nodes.get(QUOTA_ROOT)?.children.is_empty() {
            return None;
        }
        let mut key = String::with_capacity(QUOTA_ROOT.len() + p.len() + LIMIT_NODE.len() + 1);
        let mut end = p.len();
        while end > 0 {
            let prefix = &p[..end];
            key.clear();
            key.push_str(QUOTA_ROOT);
            key.push_str(prefix);
            key.push('/');
            key.push_str(LIMIT_NODE);
            if self.nodes.contains_key(key.as_str()) {
                return Some(prefix);
            }
            end = prefix.rfind('/').unwrap_or(0);
        }
        None
    }

    /// The number of nodes at and below `p` and the sum of their data lengths: a quota's usage
    /// (DataTree.getCounts). (0, 0) if `p` does not exist.
    pub fn subtree_usage(&self, p: &str) -> (i64, i64) {
        let len = |n: &crate::tree::Node| n.data.as_ref().map_or(0, |d| d.len() as i64);
        let Some(top) = self.nodes.get(p) else {
            return (0, 0);
        };
        if p == "/" {
            return (self.nodes.len() as i64, self.nodes.values().map(len).sum());
        }
        // Descendants are the keys in ["p/", "p0"): '0' follows '/'.
        let lo = format!("{p}/");
        let hi = format!("{p}0");
        let (mut count, mut bytes) = (1, len(top));
        for (_, n) in self
            .nodes
            .range::<_, str>((Bound::Included(lo.as_str()), Bound::Excluded(hi.as_str())))
        {
            count += 1;
            bytes += len(n);
        }
        (count, bytes)
    }

    /// Add to the usage of the quota on `root` (DataTree.updateQuotaStat): its stats node's
    /// data is rewritten in place, its Stat untouched, no watch fired.
    fn quota_add(&mut self, root: &str, bytes: i64, count: i64) {
        let sp = stat_path(root);
        let Some(node) = self.nodes.get_mut(sp.as_str()) else {
            warn_broken("missing stats node", &sp);
            return;
        };
        let Some(mut st) = node.data.as_deref().and_then(StatsTrack::parse) else {
            warn_broken("unreadable stats node", &sp);
            return;
        };
        st.set(StatsTrack::COUNT, st.count().wrapping_add(count));
        st.set(StatsTrack::BYTES, st.bytes().wrapping_add(bytes));
        node.data = Some(Bytes::from(st.to_string()));
    }

    /// After the create of `p` with `len` bytes (the tail of DataTree.createNode).
    pub(crate) fn quota_created(&mut self, p: &str, len: i64) {
        // A stats node (its parent under /zookeeper/quota, as a string prefix) gets the usage
        // of its path, computed here.
        if path::name(p) == STAT_NODE {
            if let Some(quoted) = parent_of(p).strip_prefix(QUOTA_ROOT) {
                self.quota_recount(quoted);
            }
        }
        if let Some(root) = self.quota_root(p) {
            self.quota_add(root, len, 1);
        }
    }

    /// After the removal of `p`, which had `len` bytes (the tail of DataTree.deleteNode).
    pub(crate) fn quota_removed(&mut self, p: &str, len: i64) {
        if let Some(root) = self.quota_root(p) {
            self.quota_add(root, -len, -1);
        }
    }

    /// After the data of `p` went from `old` to `new` bytes (the tail of DataTree.setData).
    pub(crate) fn quota_changed(&mut self, p: &str, old: i64, new: i64) {
        if let Some(root) = self.quota_root(p) {
            self.quota_add(root, new - old, 0);
        }
    }

    /// Set the stats node of the quota on `quoted` (a path, or "" for the root as in
    /// ZooKeeper, whose root node is "") to the usage of its subtree.
    fn quota_recount(&mut self, quoted: &str) {
        let (count, bytes) = self.subtree_usage(if quoted.is_empty() { "/" } else { quoted });
        if let Some(n) = self.nodes.get_mut(stat_path(quoted).as_str()) {
            n.data = Some(Bytes::from(StatsTrack::usage(count, bytes).to_string()));
        }
    }

    /// ZooKeeperServer.checkQuota, for a write at `p` that changes the count by `count` and
    /// the bytes by `bytes`, when quotas are enforced: a limit passed is logged, a hard limit
    /// passed fails with QUOTAEXCEEDED. A shrinking setData on a subtree already past its hard
    /// byte limit fails too, as in ZooKeeper.
    pub(crate) fn quota_check(&self, p: &str, bytes: i64, count: i64) -> Result<(), i32> {
        let Some(root) = self.quota_root(p) else {
            return Ok(());
        };
        let lp = limit_path(root);
        let Some(limits) = self.nodes.get(lp.as_str()).and_then(|n| n.data.as_deref()) else {
            return Ok(());
        };
        let Some(limits) = StatsTrack::parse(limits) else {
            warn_broken("unreadable limits node", &lp);
            return Ok(());
        };
        let check_count = count != 0 && (limits.count() > -1 || limits.count_hard_limit() > -1);
        let check_bytes = bytes != 0 && (limits.bytes() > -1 || limits.byte_hard_limit() > -1);
        if !check_count && !check_bytes {
            return Ok(());
        }
        let sp = stat_path(root);
        let Some(stats) = self.nodes.get(sp.as_str()) else {
            warn_broken("missing stats node", &sp);
            return Ok(());
        };
        let Some(stats) = stats.data.as_deref().and_then(StatsTrack::parse) else {
            warn_broken("unreadable stats node", &sp);
            return Ok(());
        };
        let checks = [
            (
                check_count,
                "count",
                "Count",
                stats.count().wrapping_add(count),
                StatsTrack::limit(limits.count_hard_limit(), limits.count()),
            ),
            (
                check_bytes,
                "bytes",
                "Byte",
                stats.bytes().wrapping_add(bytes),
                StatsTrack::limit(limits.byte_hard_limit(), limits.bytes()),
            ),
        ];
        for (check, what, limit_name, now, (limit, hard)) in checks {
            if check && now > limit {
                let kind = if hard { "hard" } else { "soft" };
                EXCEEDED.log(format!(
                    "Quota exceeded: {root} [current {what}={now}, {kind}{limit_name}Limit={limit}]"
                ));
                if hard {
                    return Err(QUOTA_EXCEEDED);
                }
            }
        }
        Ok(())
    }
}

/// ZooKeeper's parent of a path: everything before the last '/' ("" for a child of the root).
fn parent_of(p: &str) -> &str {
    p.rfind('/').map_or("", |i| &p[..i])
}

/// ZooKeeper 3.8's quota gauges (QuotaMetricsUtils), summed per top-level namespace (the
/// first segment of the quota's path): `(namespace_metric, value)` for
/// quota_count_limit_per_namespace and quota_bytes_limit_per_namespace (the hard limit if
/// set, else the soft one) and quota_count_usage_per_namespace and
/// quota_bytes_usage_per_namespace, as ZooKeeper names them in `mntr` after `zk_`
/// (`zk_app_quota_count_limit_per_namespace`). Only limits and stats nodes without children
/// count, as in ZooKeeper.
pub fn metrics(tree: &Tree) -> Vec<(String, i64)> {
    let mut sums: BTreeMap<(String, &'static str), i64> = BTreeMap::new();
    let lo = format!("{QUOTA_ROOT}/");
    let hi = format!("{QUOTA_ROOT}0");
    for (p, n) in tree
        .nodes
        .range::<_, str>((Bound::Included(lo.as_str()), Bound::Excluded(hi.as_str())))
    {
        if !n.children.is_empty() {
            continue;
        }
        let limits = p.ends_with(&format!("/{LIMIT_NODE}")[..]);
        if !limits && !p.ends_with(&format!("/{STAT_NODE}")[..]) {
            continue;
        }
        // PathUtils.getTopNamespace of the path below /zookeeper/quota.
        let Some(ns) = p[QUOTA_ROOT.len()..].split('/').nth(1) else {
            continue;
        };
        let Some(st) = n.data.as_deref().and_then(StatsTrack::parse) else {
            continue;
        };
        let entries = if limits {
            [
                (
                    "quota_count_limit_per_namespace",
                    StatsTrack::limit(st.count_hard_limit(), st.count()).0,
                ),
                (
                    "quota_bytes_limit_per_namespace",
                    StatsTrack::limit(st.byte_hard_limit(), st.bytes()).0,
                ),
            ]
        } else {
            [
                ("quota_count_usage_per_namespace", st.count()),
                ("quota_bytes_usage_per_namespace", st.bytes()),
            ]
        };
        for (metric, v) in entries {
            *sums.entry((ns.to_string(), metric)).or_insert(0) += v;
        }
    }
    sums.into_iter()
        .map(|((ns, metric), v)| (format!("{ns}_{metric}"), v))
        .collect()
}

/// The [`metrics`] as lines of the `mntr` four-letter word (`zk_<name>\t<value>\n`).
pub fn mntr_lines(tree: &Tree) -> String {
    metrics(tree)
        .into_iter()
        .map(|(k, v)| format!("zk_{k}\t{v}\n"))
        .collect()
}

#[cfg(test)]
mod tests;

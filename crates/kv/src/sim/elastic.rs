//! The elastic experiment (issue 29): nodes join a running store one at a time, then leave,
//! under the scaling experiment's closed-loop transactions ([`super::scaling`]), with the CPU
//! cost model: does throughput grow as nodes join, and what does each join cost?
//!
//! The buckets follow the view as synod moves them:
//!
//! * each view (the node set) gives a **desired placement**, derived from the previous desired
//!   one by [`crate::route::place`], so a join or a leave moves as few replicas as possible;
//! * a bucket whose replicas differ from the desired ones changes them through its group's
//!   configuration change, **one change in flight per bucket**: the new replicas are added as
//!   **learners** (they apply the bucket's commands and count for nothing) and receive the
//!   bucket's state (a transfer costing `transfer_us_per_key` of CPU per key at the master and
//!   at the learner), then one joint change makes them voters and drops the replicas that left;
//! * **masters spread**: each bucket's master is its member with the fewest masterships, the
//!   current master kept while it is not above the even share (a master change is a leader
//!   transfer: modelled as free here).
//!
//! A node that leaves is drained the same way (its replicas replaced before it goes).

use std::collections::{BTreeMap, BTreeSet};

use super::clients::Clients;
use super::scaling::{config, ScalingCfg};
use super::world_for;
use crate::route::{place, Placement};
use crate::txn::Outcome;

#[derive(Clone, Debug)]
pub struct ElasticCfg {
    pub base: ScalingCfg,
    pub buckets: u32,
    /// Nodes at the start, and at the largest.
    pub start_nodes: u32,
    pub max_nodes: u32,
    /// One join (then one leave) this often.
    pub change_every_us: u64,
    /// Shrink back to `start_nodes` after growing.
    pub shrink: bool,
    /// Throughput is reported per window.
    pub window_us: u64,
    /// A state transfer's CPU per key, at the source and at the learner.
    pub transfer_us_per_key: u64,
}

impl Default for ElasticCfg {
    fn default() -> Self {
        let mut base = ScalingCfg::default();
        base.cost.nodes = 24;
        ElasticCfg {
            base,
            buckets: 8,
            start_nodes: 3,
            max_nodes: 24,
            change_every_us: 250_000,
            shrink: true,
            window_us: 250_000,
            transfer_us_per_key: 1,
        }
    }
}

/// One window of the run.
#[derive(Clone, Debug, Default)]
pub struct Window {
    pub end_us: u64,
    /// Nodes in the view at the window's end, and nodes holding a voting replica.
    pub view_nodes: u32,
    pub serving_nodes: u32,
    pub txns_per_s: f64,
    pub abort_pct: f64,
    /// Replicas added (state transfers begun) and master changes, cumulative.
    pub moves: u64,
    pub master_changes: u64,
    /// Buckets with a change in flight at the window's end.
    pub changing: u32,
}

#[derive(Clone, Debug, Default)]
pub struct ElasticRun {
    pub windows: Vec<Window>,
    /// View changes (joins and leaves), and replicas added in all.
    pub view_changes: u64,
    pub moves: u64,
    pub master_changes: u64,
}

/// Masters spread over the nodes: bucket by bucket, the current master while it holds no more
/// than the even share, else the member with the fewest masterships (lowest id on a tie).
/// Each bucket's list comes back master first, then the others in id order.
pub fn assign_masters(sets: &Placement, current: &[u32]) -> Vec<Vec<u32>> {
    let nodes: BTreeSet<u32> = sets.iter().flatten().copied().collect();
    let share = sets.len().div_ceil(nodes.len().max(1));
    let mut load: BTreeMap<u32, usize> = BTreeMap::new();
    sets.iter()
        .enumerate()
        .map(|(b, members)| {
            let keep = current
                .get(b)
                .copied()
                .filter(|m| members.contains(m) && load.get(m).copied().unwrap_or(0) < share);
            let master = keep.unwrap_or_else(|| {
                *members
                    .iter()
                    .min_by_key(|n| (load.get(n).copied().unwrap_or(0), **n))
                    .expect("a bucket has members")
            });
            *load.entry(master).or_default() += 1;
            std::iter::once(master)
                .chain(members.iter().copied().filter(|&n| n != master))
                .collect()
        })
        .collect()
}

struct Change {
    bucket: u32,
    target: BTreeSet<u32>,
    learners: Vec<u32>,
    done_at: u64,
}

/// Run the experiment.
pub fn run(cfg: &ElasticCfg) -> ElasticRun {
    let b = cfg.buckets;
    let r = cfg.base.cost.replicas as usize;
    let mut kv = config(b, &cfg.base);
    let mut view: BTreeSet<u32> = (0..cfg.start_nodes).collect();
    let mut desired = place(&Vec::new(), b as usize, r, &view);
    let mut actual = desired.clone();
    let mut lists = assign_masters(&actual, &[]);
    if let Some(c) = kv.cost.as_mut() {
        c.nodes = cfg.max_nodes;
        c.placement = Some(lists.clone());
    }
    let mut w = world_for(&kv);
    let mut clients = Clients::new(&kv.workload, b);
    clients.start(&mut w);

    // The view's changes: joins up to max_nodes, then (optionally) leaves back down.
    let mut events: Vec<(u64, bool, u32)> = Vec::new();
    let mut t = cfg.base.warm_us + cfg.change_every_us;
    for n in cfg.start_nodes..cfg.max_nodes {
        events.push((t, true, n));
        t += cfg.change_every_us;
    }
    let grown = t + 4 * cfg.change_every_us;
    t = grown;
    if cfg.shrink {
        for n in (cfg.start_nodes..cfg.max_nodes).rev() {
            events.push((t, false, n));
            t += cfg.change_every_us;
        }
    }
    let end = t + 4 * cfg.change_every_us;
    let keys_per_bucket = cfg.base.keys as u64 / b.max(1) as u64;

    let mut out = ElasticRun::default();
    let mut pending: Vec<Change> = Vec::new();
    let mut next_event = 0;
    let mut window_end = cfg.window_us;
    let mut records_at = 0;
    let slice = 1_000; // how often changes are driven, µs of virtual time
    let mut now = 0;
    while now < end {
        now += slice;
        while w.now < now {
            if let Some(ev) = w.step(now) {
                clients.handle(ev, &mut w);
            }
        }
        // View changes due.
        while next_event < events.len() && events[next_event].0 <= now {
            let (_, join, node) = events[next_event];
            next_event += 1;
            if join {
                view.insert(node);
            } else {
                view.remove(&node);
            }
            out.view_changes += 1;
            desired = place(&desired, b as usize, r, &view);
        }
        // Changes that finished catching up: one joint change each.
        let mut changed = false;
        pending.retain(|c| {
            if c.done_at > now {
                return true;
            }
            actual[c.bucket as usize] = c.target.clone();
            changed = true;
            false
        });
        // Start a change for every bucket off its desired replicas with none in flight.
        for bucket in 0..b {
            let (want, have) = (&desired[bucket as usize], &actual[bucket as usize]);
            if want == have || pending.iter().any(|c| c.bucket == bucket) {
                continue;
            }
            let learners: Vec<u32> = want.difference(have).copied().collect();
            let master = lists[bucket as usize][0];
            let cpu = w.cpu.as_mut().expect("the cost model is on");
            let transfer = keys_per_bucket * cfg.transfer_us_per_key;
            let mut done_at = now;
            for &l in &learners {
                let sent = cpu.run(master, now, transfer);
                done_at = done_at.max(cpu.run(l, sent + cfg.base.cost.hop_us, transfer));
            }
            out.moves += learners.len() as u64;
            pending.push(Change {
                bucket,
                target: want.clone(),
                learners,
                done_at,
            });
        }
        if changed || !pending.is_empty() {
            let current: Vec<u32> = lists.iter().map(|l| l[0]).collect();
            let next = assign_masters(&actual, &current);
            out.master_changes += next
                .iter()
                .zip(&lists)
                .filter(|(a, b)| a[0] != b[0])
                .count() as u64;
            lists = next;
            let c = w.cost.as_mut().expect("the cost model is on");
            c.placement = Some(lists.clone());
            c.learners = pending
                .iter()
                .flat_map(|p| p.learners.iter().map(move |&l| (p.bucket, l)))
                .collect();
        }
        if now >= window_end {
            let recs = &clients.records[records_at..];
            records_at = clients.records.len();
            let committed = recs
                .iter()
                .filter(|r| r.status == Some(Outcome::Committed))
                .count();
            let serving: BTreeSet<u32> = actual.iter().flatten().copied().collect();
            out.windows.push(Window {
                end_us: window_end,
                view_nodes: view.len() as u32,
                serving_nodes: serving.len() as u32,
                txns_per_s: committed as f64 / (cfg.window_us as f64 / 1e6),
                abort_pct: 100.0 * (recs.len() - committed) as f64 / recs.len().max(1) as f64,
                moves: out.moves,
                master_changes: out.master_changes,
                changing: pending.len() as u32,
            });
            window_end += cfg.window_us;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_spread_and_stay_put_when_they_can() {
        let nodes: BTreeSet<u32> = (0..4).collect();
        let p = place(&Vec::new(), 8, 3, &nodes);
        let lists = assign_masters(&p, &[]);
        let mut count: BTreeMap<u32, usize> = BTreeMap::new();
        for l in &lists {
            *count.entry(l[0]).or_default() += 1;
            assert!(p[lists.iter().position(|x| x == l).unwrap()].contains(&l[0]));
        }
        assert!(
            count.values().all(|&c| c == 2),
            "8 masters on 4 nodes: {count:?}"
        );
        // Unchanged placement: no master moves.
        let current: Vec<u32> = lists.iter().map(|l| l[0]).collect();
        assert_eq!(assign_masters(&p, &current), lists);
    }

    /// A small run: throughput with the nodes grown is well above the start, and every
    /// bucket's replicas end where the view says.
    #[test]
    fn throughput_grows_as_nodes_join() {
        let mut cfg = ElasticCfg {
            start_nodes: 3,
            max_nodes: 9,
            buckets: 3,
            change_every_us: 100_000,
            window_us: 100_000,
            shrink: false,
            ..ElasticCfg::default()
        };
        cfg.base.clients_per_bucket = 32;
        cfg.base.keys = 10_000;
        cfg.base.warm_us = 50_000;
        let run = run(&cfg);
        let first = run.windows[1].txns_per_s;
        let last = run.windows.last().unwrap().txns_per_s;
        assert!(
            last > 1.5 * first,
            "3 → 9 nodes: {first:.0} → {last:.0} txn/s"
        );
        assert_eq!(run.windows.last().unwrap().serving_nodes, 9);
        assert_eq!(run.windows.last().unwrap().changing, 0);
    }
}

/// Mean throughput of the windows ending in `(from, to]`.
fn mean_between(run: &ElasticRun, from: u64, to: u64) -> f64 {
    let w: Vec<f64> = run
        .windows
        .iter()
        .filter(|w| w.end_us > from && w.end_us <= to)
        .map(|w| w.txns_per_s)
        .collect();
    w.iter().sum::<f64>() / w.len().max(1) as f64
}

/// The markdown document: parameters, the throughput per window, and the comparison with the
/// fixed placement's figure (`fixed`: the scaling experiment's point at the same bucket count
/// on `max_nodes` nodes, run by the same command).
pub fn markdown(run: &ElasticRun, cfg: &ElasticCfg, fixed: f64, command: &str) -> String {
    let c = &cfg.base.cost;
    let grow_end =
        cfg.base.warm_us + cfg.change_every_us * (cfg.max_nodes - cfg.start_nodes) as u64;
    let start = mean_between(
        run,
        cfg.base.warm_us,
        cfg.base.warm_us + cfg.change_every_us,
    );
    let grown = mean_between(
        run,
        grow_end + cfg.change_every_us,
        grow_end + 4 * cfg.change_every_us,
    );
    let last = run.windows.last().map_or(0.0, |w| w.txns_per_s);
    let mut s = String::from("# SconeKV grows and shrinks online (simulator, cost model)\n\n");
    s += &format!("```\n{command}\n```\n\n");
    s += &format!(
        "The scaling experiment's store and workload (docs/results/sconekv-scaling.md: the same \
         CPU cost model, {} clients per bucket, {} keys, {} keys per transaction, {} cross-bucket), \
         {} buckets of {} replicas, starting on {} nodes; a node joins every {} ms up to {}, then \
         {}. The buckets follow the view (`synod_kv::sim::elastic`): each view's desired placement \
         comes from `route::place` (as few replicas moved as possible); a bucket off its desired \
         replicas adds the new ones as learners, which apply its commands and receive its state \
         ({} µs of CPU per key at the master and at the learner, {} keys per bucket), then one joint \
         change makes them voters and drops the ones that left, one change in flight per bucket; \
         each bucket's master is its member with the fewest masterships. Throughput is committed \
         transactions per {} ms window of virtual time.\n\n",
        cfg.base.clients_per_bucket,
        cfg.base.keys,
        cfg.base.ops,
        cfg.base.cross,
        cfg.buckets,
        c.replicas,
        cfg.start_nodes,
        cfg.change_every_us / 1000,
        cfg.max_nodes,
        if cfg.shrink {
            format!("one leaves every {} ms back down to {}", cfg.change_every_us / 1000, cfg.start_nodes)
        } else {
            "stays".into()
        },
        cfg.transfer_us_per_key,
        cfg.base.keys / cfg.buckets,
        cfg.window_us / 1000,
    );
    s += &format!(
        "| | txn/s |\n|---|---:|\n| {} nodes, before the first join | {start:.0} |\n\
         | {} nodes, after the last join settled | {grown:.0} ({:.2}×) |\n\
         | fixed placement, {} buckets on {} nodes (the scaling experiment, same run) | {fixed:.0} |\n\
         | back on {} nodes, at the end | {last:.0} |\n\n\
         {} view changes moved {} replicas ({:.2} per change) and {} masters.\n\n",
        cfg.start_nodes,
        cfg.max_nodes,
        grown / start.max(1e-9),
        cfg.buckets,
        cfg.max_nodes,
        if cfg.shrink { cfg.start_nodes } else { cfg.max_nodes },
        run.view_changes,
        run.moves,
        run.moves as f64 / run.view_changes.max(1) as f64,
        run.master_changes,
    );
    s += "| time (s) | nodes in view | nodes serving | txn/s | abort % | replicas moved | master changes | buckets changing |\n\
          |---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for w in &run.windows {
        s += &format!(
            "| {:.2} | {} | {} | {:.0} | {:.2} | {} | {} | {} |\n",
            w.end_us as f64 / 1e6,
            w.view_nodes,
            w.serving_nodes,
            w.txns_per_s,
            w.abort_pct,
            w.moves,
            w.master_changes,
            w.changing
        );
    }
    s
}

#[cfg(test)]
mod stability {
    use super::*;

    /// Assigning masters again from its own answer changes nothing (else masters would move
    /// at every step of a run for no reason).
    #[test]
    fn master_assignment_is_a_fixed_point() {
        for n in 3..12u32 {
            let nodes: BTreeSet<u32> = (0..n).collect();
            let p = place(&Vec::new(), 8, 3, &nodes);
            for seed in 0..20u32 {
                let current: Vec<u32> = p
                    .iter()
                    .enumerate()
                    .map(|(b, m)| *m.iter().nth((b as u32 + seed) as usize % m.len()).unwrap())
                    .collect();
                let once = assign_masters(&p, &current);
                let firsts: Vec<u32> = once.iter().map(|l| l[0]).collect();
                assert_eq!(assign_masters(&p, &firsts), once, "n {n} seed {seed}");
            }
        }
    }
}

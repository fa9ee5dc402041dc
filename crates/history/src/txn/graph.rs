//! The dependency graph, its strongly connected components (iterative Tarjan), and the
//! extraction and classification of one short cycle per cyclic component.
//!
//! Nodes are transaction indices in the history. Everything that walks the graph works on a
//! *subset* of nodes given as a list of members plus a `slot` array mapping a node to its index
//! in that list (or [`NONE`]), so that the whole graph and each component are walked by the
//! same code, and arrays are sized by the subset, not the history.
//!
//! **G-single search.** Once a component has no ww/wr cycle, its ww/wr edges form a DAG, and a
//! cycle with a single rw edge `a -rw-> b` exists iff `a` is reachable from `b` over ww/wr
//! edges. Tarjan numbers the components of that DAG in reverse topological order, so `b` can
//! reach `a` only if `a`'s number is below `b`'s, and a search from `b` never needs to enter a
//! node numbered below `a`'s. The rw edges that pass this filter are tried closest first, by
//! breadth-first search, until [`G_SINGLE_VISITS_MAX`] edge visits are spent in the component;
//! if the budget runs out the component is reported by its shortest cycle through one node,
//! as G2 (or G-single if that cycle happens to have one rw edge). The budget keeps a
//! pathological component from costing quadratic time; it never turns a cycle into a pass.

use super::{format_cycle, Anomaly, AnomalyKind, Dep, DepKind};
use std::collections::VecDeque;

/// "No index": a node outside the current subset, or not visited yet.
pub(super) const NONE: u32 = u32::MAX;

/// Edge visits the G-single search may spend in one component (see the module docs).
pub(super) const G_SINGLE_VISITS_MAX: u64 = 4_000_000;

const WW: u8 = 1;
const WR: u8 = 2;
const RW: u8 = 4;
const ALL: u8 = WW | WR | RW;

fn bit(kind: DepKind) -> u8 {
    match kind {
        DepKind::Ww => WW,
        DepKind::Wr => WR,
        DepKind::Rw => RW,
    }
}

/// An edge out of a node: `to` depends on the node through `key@version` (interned key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Edge {
    pub to: u32,
    pub kind: DepKind,
    pub key: u32,
    pub version: u64,
}

/// Adjacency lists indexed by transaction index.
pub(super) struct Graph {
    adj: Vec<Vec<Edge>>,
    edges: usize,
}

impl Graph {
    pub fn new(nodes: usize) -> Self {
        Graph {
            adj: vec![Vec::new(); nodes],
            edges: 0,
        }
    }

    pub fn add(&mut self, from: u32, edge: Edge) {
        assert_ne!(from, edge.to, "a transaction does not depend on itself");
        self.adj[from as usize].push(edge);
    }

    /// Keeps one edge per (from, to, kind): the first key and version in sort order, so the
    /// labels reported do not depend on the order the edges were found in.
    pub fn finish(&mut self) {
        self.edges = 0;
        for edges in &mut self.adj {
            edges.sort_unstable_by_key(|e| (e.to, e.kind, e.key, e.version));
            edges.dedup_by_key(|e| (e.to, e.kind));
            self.edges += edges.len();
        }
    }

    /// Distinct (from, to, kind) edges, once [`Graph::finish`] ran.
    pub fn edge_count(&self) -> usize {
        self.edges
    }

    fn out(&self, node: u32) -> &[Edge] {
        &self.adj[node as usize]
    }
}

/// The strongly connected components of a subset, over the edges of some kinds.
struct Components {
    /// Local index → component number; numbers are in reverse topological order (an edge
    /// between two components goes from the higher number to the lower).
    number: Vec<u32>,
    /// The components with at least two nodes, as node lists.
    cyclic: Vec<Vec<u32>>,
}

/// Tarjan's algorithm with an explicit call stack, over the edges whose kind is in `mask`
/// between members of the subset.
fn tarjan(graph: &Graph, members: &[u32], slot: &[u32], mask: u8) -> Components {
    let n = members.len();
    let mut index = vec![NONE; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut number = vec![NONE; n];
    let mut stack: Vec<u32> = Vec::new();
    // (local node, position of the next edge to look at)
    let mut calls: Vec<(u32, u32)> = Vec::new();
    let mut next_index = 0u32;
    let mut next_number = 0u32;
    let mut cyclic = Vec::new();

    for root in 0..n as u32 {
        if index[root as usize] != NONE {
            continue;
        }
        index[root as usize] = next_index;
        low[root as usize] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root as usize] = true;
        calls.push((root, 0));

        while let Some(&(v, position)) = calls.last() {
            let edges = graph.out(members[v as usize]);
            if let Some(edge) = edges.get(position as usize) {
                calls.last_mut().expect("the loop just read it").1 += 1;
                let w = slot[edge.to as usize];
                if mask & bit(edge.kind) == 0 || w == NONE {
                    continue;
                }
                if index[w as usize] == NONE {
                    index[w as usize] = next_index;
                    low[w as usize] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w as usize] = true;
                    calls.push((w, 0));
                } else if on_stack[w as usize] {
                    low[v as usize] = low[v as usize].min(index[w as usize]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent as usize] = low[parent as usize].min(low[v as usize]);
            }
            if low[v as usize] == index[v as usize] {
                let start = stack
                    .iter()
                    .rposition(|&w| w == v)
                    .expect("a root is on the stack");
                for &w in &stack[start..] {
                    on_stack[w as usize] = false;
                    number[w as usize] = next_number;
                }
                if stack.len() - start > 1 {
                    cyclic.push(
                        stack[start..]
                            .iter()
                            .map(|&w| members[w as usize])
                            .collect(),
                    );
                }
                stack.truncate(start);
                next_number += 1;
            }
        }
    }
    assert!(stack.is_empty() && number.iter().all(|&c| c != NONE));
    Components { number, cyclic }
}

/// Reusable breadth-first search state for one subset (a visit stamp per node, so that many
/// searches in one component cost what they visit, not the component's size each).
struct Bfs {
    stamp: Vec<u32>,
    epoch: u32,
    parent: Vec<(u32, Edge)>,
    queue: VecDeque<u32>,
}

/// A path as (from node, edge) pairs; consecutive edges chain.
type Path = Vec<(u32, Edge)>;

impl Bfs {
    fn new(n: usize) -> Self {
        let blank = Edge {
            to: NONE,
            kind: DepKind::Ww,
            key: 0,
            version: 0,
        };
        Bfs {
            stamp: vec![0; n],
            epoch: 0,
            parent: vec![(NONE, blank); n],
            queue: VecDeque::new(),
        }
    }

    /// A shortest path of at least one edge from local `from` to local `to` (a cycle when
    /// they are equal), over `mask` edges inside the subset, entering only nodes `enter`
    /// accepts. Each edge looked at costs one unit of `budget`; `None` if there is no path or
    /// the budget ran out first.
    fn path(
        &mut self,
        graph: &Graph,
        (members, slot): (&[u32], &[u32]),
        (from, to): (u32, u32),
        mask: u8,
        enter: impl Fn(u32) -> bool,
        budget: &mut u64,
    ) -> Option<Path> {
        self.epoch += 1;
        self.queue.clear();
        self.stamp[from as usize] = self.epoch;
        self.queue.push_back(from);
        while let Some(u) = self.queue.pop_front() {
            for edge in graph.out(members[u as usize]) {
                if *budget == 0 {
                    return None;
                }
                *budget -= 1;
                let w = slot[edge.to as usize];
                if mask & bit(edge.kind) == 0 || w == NONE {
                    continue;
                }
                if w == to {
                    return Some(self.unwind(members, from, u, *edge));
                }
                if self.stamp[w as usize] != self.epoch && enter(w) {
                    self.stamp[w as usize] = self.epoch;
                    self.parent[w as usize] = (u, *edge);
                    self.queue.push_back(w);
                }
            }
        }
        None
    }

    fn unwind(&self, members: &[u32], from: u32, last: u32, edge: Edge) -> Path {
        let mut path = vec![(members[last as usize], edge)];
        let mut node = last;
        while node != from {
            let (parent, edge) = self.parent[node as usize];
            path.push((members[parent as usize], edge));
            node = parent;
        }
        path.reverse();
        path
    }
}

/// Finds every cyclic strongly connected component among `nodes` and reports one anomaly
/// for each. `ids` gives a node's transaction id, `keys` an interned key's name.
pub(super) fn cycles(graph: &Graph, nodes: &[u32], ids: &[u64], keys: &[String]) -> Vec<Anomaly> {
    let mut slot = vec![NONE; graph.adj.len()];
    for (i, &node) in nodes.iter().enumerate() {
        slot[node as usize] = i as u32;
    }
    let components = tarjan(graph, nodes, &slot, ALL);
    for &node in nodes {
        slot[node as usize] = NONE;
    }

    let mut found = Vec::with_capacity(components.cyclic.len());
    for component in &components.cyclic {
        for (i, &node) in component.iter().enumerate() {
            slot[node as usize] = i as u32;
        }
        let (kind, path) = worst_cycle(graph, component, &slot);
        for &node in component {
            slot[node as usize] = NONE;
        }
        found.push(anomaly(kind, &path, ids, keys));
    }
    found
}

/// The most severe short cycle in a strongly connected component: G0, G1c, G-single, G2.
fn worst_cycle(graph: &Graph, members: &[u32], slot: &[u32]) -> (AnomalyKind, Path) {
    let subset = (members, slot);
    let mut bfs = Bfs::new(members.len());
    let mut unlimited = u64::MAX;
    let cycle_through = |bfs: &mut Bfs, node: u32, mask: u8, budget: &mut u64| {
        let local = slot[node as usize];
        bfs.path(graph, subset, (local, local), mask, |_| true, budget)
            .expect("a node of a cyclic component lies on a cycle")
    };

    let ww = tarjan(graph, members, slot, WW);
    if let Some(component) = ww.cyclic.first() {
        return (
            AnomalyKind::G0,
            cycle_through(&mut bfs, component[0], WW, &mut unlimited),
        );
    }
    let wwr = tarjan(graph, members, slot, WW | WR);
    if let Some(component) = wwr.cyclic.first() {
        return (
            AnomalyKind::G1c,
            cycle_through(&mut bfs, component[0], WW | WR, &mut unlimited),
        );
    }
    if let Some(path) = single_rw_cycle(graph, subset, &wwr.number, &mut bfs) {
        return (AnomalyKind::GSingle, path);
    }
    let path = cycle_through(&mut bfs, members[0], ALL, &mut unlimited);
    let rw = path.iter().filter(|(_, e)| e.kind == DepKind::Rw).count();
    let kind = if rw == 1 {
        AnomalyKind::GSingle
    } else {
        AnomalyKind::G2
    };
    (kind, path)
}

/// A cycle of one rw edge plus ww/wr edges, when the ww/wr edges form a DAG numbered by
/// `number` (see the module docs).
fn single_rw_cycle(
    graph: &Graph,
    (members, slot): (&[u32], &[u32]),
    number: &[u32],
    bfs: &mut Bfs,
) -> Option<Path> {
    let mut candidates: Vec<(u32, u32, Edge)> = Vec::new();
    for (a, &node) in members.iter().enumerate() {
        for edge in graph.out(node) {
            let b = slot[edge.to as usize];
            if edge.kind == DepKind::Rw && b != NONE && number[a] < number[b as usize] {
                candidates.push((a as u32, b, *edge));
            }
        }
    }
    candidates.sort_by_key(|&(a, b, _)| number[b as usize] - number[a as usize]);
    let mut budget = G_SINGLE_VISITS_MAX;
    for (a, b, rw) in candidates {
        let floor = number[a as usize];
        let back = bfs.path(
            graph,
            (members, slot),
            (b, a),
            WW | WR,
            |w| number[w as usize] > floor,
            &mut budget,
        );
        if let Some(back) = back {
            let mut path = vec![(members[a as usize], rw)];
            path.extend(back);
            return Some(path);
        }
        if budget == 0 {
            return None;
        }
    }
    None
}

fn anomaly(kind: AnomalyKind, path: &Path, ids: &[u64], keys: &[String]) -> Anomaly {
    let mut cycle: Vec<Dep> = path
        .iter()
        .map(|&(from, edge)| Dep {
            from: ids[from as usize],
            to: ids[edge.to as usize],
            kind: edge.kind,
            key: keys[edge.key as usize].clone(),
            version: edge.version,
        })
        .collect();
    // Start at the lowest id, so a cycle reads the same whichever node the search began at.
    let first = (0..cycle.len())
        .min_by_key(|&i| cycle[i].from)
        .expect("a cycle has edges");
    cycle.rotate_left(first);
    let rw = cycle.iter().filter(|d| d.kind == DepKind::Rw).count();
    let why = match kind {
        AnomalyKind::G0 => "write cycle: each transaction installed the version after one the \
                            previous one installed, so no serial order produced these versions"
            .to_string(),
        AnomalyKind::G1c => "circular information flow: each transaction installed a version \
                             the next one read or overwrote"
            .to_string(),
        AnomalyKind::GSingle => "a single anti-dependency (a read of a version the next \
                                 transaction overwrote) closes a cycle of ww/wr dependencies \
                                 (read skew)"
            .to_string(),
        _ => format!(
            "anti-dependency cycle with {rw} rw edges (e.g. write skew): no serial order puts \
             every transaction before the ones that overwrote what it read"
        ),
    };
    Anomaly {
        kind,
        txns: cycle.iter().map(|d| d.from).collect(),
        explanation: format!("{why}: {}", format_cycle(&cycle)),
        cycle,
    }
}

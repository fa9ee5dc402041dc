//! `synod sim --experiment thesis`: the thesis's failure-free comparison of Zab and its
//! variants (zab.md §8) on its testbed, in the simulator, written to docs/results/thesis.md
//! beside the thesis's own tables (`thesis_data`).

pub mod membership;
pub mod mencius;
pub mod pft;
mod render;
mod thesis_data;

use anyhow::{Context, Result};
use synod_protocols::run_named_seeds_with;
pub use synod_protocols::thesis::{testbed, thesis_cost};
use synod_sim::{CostModel, FaultKind, Report, SimConfig};

/// What to run.
pub struct Plan {
    pub seeds: std::ops::Range<u64>,
    pub threads: usize,
    /// N = 3 and 5, WR = 50 and 100 %, zero wait only, printed not written.
    pub quick: bool,
    /// The thesis-calibrated cost, unless overridden.
    pub cost: Option<CostModel>,
    /// Where the document goes (`--out DIR`); printed only without it.
    pub out: Option<std::path::PathBuf>,
}

pub(crate) struct Row {
    pub protocol: &'static str,
    pub n: usize,
    /// Write ratio in percent.
    pub wr: u32,
    /// The (25, 75) ms wait-time.
    pub wait: bool,
    pub r: Report,
}

impl Row {
    pub fn secs(&self) -> f64 {
        self.r.virtual_us as f64 / 1e6
    }
    pub fn throughput(&self) -> f64 {
        self.r.committed as f64 / self.secs().max(1e-9)
    }
    pub fn latency_ms(&self) -> f64 {
        self.r.latency.as_ref().map_or(0.0, |h| h.mean() / 1000.0)
    }
    pub fn gauge(&self, name: &str) -> Option<f64> {
        self.r
            .gauges
            .get(name)
            .map(|&(sum, n)| sum / n.max(1) as f64)
    }
}

/// The protocols of the comparison: zero wait-time runs every one the thesis reports; its
/// wait-time runs are those of the adaptive ZabCT (§5.2) and App. D.
fn protocols(wait: bool) -> &'static [&'static str] {
    if wait {
        &["zab", "zab-ct", "zab-ct-a", "zab-ct-aa", "zab-ct-optimal"]
    } else {
        &[
            "zab",
            "zab-ac",
            "zab-aa-restricted",
            "zab-ct-restricted",
            "zab-aa",
            "zab-ct-half",
            "zab-ct",
            "zab-ct-a",
            "zab-ct-aa",
            "zab-ct-optimal",
        ]
    }
}

fn run(
    protocol: &'static str,
    cfg: &SimConfig<()>,
    plan: &Plan,
    theta: Option<f64>,
) -> Result<Report> {
    let r = run_named_seeds_with(protocol, cfg, plan.seeds.clone(), plan.threads, &|o| {
        if let (Some(t), synod_zab::coin::Choice::Adaptive { theta, .. }) = (theta, &mut o.coin) {
            *theta = Some(t);
        }
        synod_protocols::thesis::jgroups_timeouts(o);
    })
    .map_err(anyhow::Error::msg)?;
    if let Some((seed, v)) = r.failures.first() {
        anyhow::bail!(
            "{protocol} N={}: a checker fired (seed {seed}): {v}",
            cfg.nodes
        );
    }
    Ok(r)
}

pub fn thesis_experiment(plan: Plan) -> Result<()> {
    let cost = plan.cost.clone().unwrap_or_else(thesis_cost);
    let sizes: &[usize] = if plan.quick { &[3, 5] } else { &[3, 5, 7, 9] };
    let ratios: Vec<u32> = if plan.quick {
        vec![50, 100]
    } else {
        (1..=10).map(|k| k * 10).collect()
    };
    let waits: &[bool] = if plan.quick { &[false] } else { &[false, true] };
    let mut rows = Vec::new();
    for &wait in waits {
        for &n in sizes {
            // App. D fixes θ at the λ Zab reaches at WR = 100 % in the same conditions: Zab
            // proposes one request at a time, so λ is its throughput.
            let zab_full = run("zab", &testbed(n, 100, wait, 250, &cost), &plan, None)?;
            let theta = zab_full.committed as f64 / (zab_full.virtual_us as f64 / 1e6);
            for &wr in &ratios {
                for &protocol in protocols(wait) {
                    if protocol == "zab-ac" && n != 3 {
                        continue;
                    }
                    let cfg = testbed(n, wr, wait, 250, &cost);
                    let fixed = (protocol == "zab-ct-optimal").then_some(theta);
                    let r = if protocol == "zab" && wr == 100 {
                        zab_full.clone()
                    } else {
                        run(protocol, &cfg, &plan, fixed)?
                    };
                    let row = Row {
                        protocol,
                        n,
                        wr,
                        wait,
                        r,
                    };
                    eprintln!(
                        "  {protocol:<18} N={n} WR={wr:>3}% {}  {:>6.0} abds/s  latency {:>7.2} ms",
                        if wait { "wait" } else { "zero" },
                        row.throughput(),
                        row.latency_ms()
                    );
                    rows.push(row);
                }
            }
        }
    }
    // The same comparison with our own server's measured cost (docs/results/simulator.md),
    // at the write ratios the thesis's headline figures use.
    let ours = CostModel::calibrated();
    let mut own = Vec::new();
    for &n in &[3usize, 5] {
        for &protocol in protocols(false) {
            if (protocol == "zab-ac" && n != 3) || protocol == "zab-ct-optimal" {
                continue;
            }
            let r = run(protocol, &testbed(n, 100, false, 250, &ours), &plan, None)?;
            own.push(Row {
                protocol,
                n,
                wr: 100,
                wait: false,
                r,
            });
        }
    }
    let crash = crash_and_restart(&cost, &plan)?;
    let md = render::render(&render::Inputs {
        rows: &rows,
        own: &own,
        crash: &crash,
        cost: &cost,
        plan: &plan,
    });
    print!("{md}");
    if !plan.quick {
        write_result(plan.out.as_deref(), "thesis.md", &md)?;
    }
    Ok(())
}

/// Writes an experiment's document as DIR/NAME when `--out DIR` was given; otherwise says how
/// to (the committed documents under docs/results change only when asked).
pub fn write_result(out: Option<&std::path::Path>, name: &str, doc: &str) -> Result<()> {
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join(name);
            std::fs::write(&path, doc).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => eprintln!("(not written: --out docs/results replaces docs/results/{name})"),
    }
    Ok(())
}

/// ZabCT's membership-driven switching, shown: N = 3 under load on the thesis's testbed, a
/// follower crashes at 2 s and restarts at 4 s; the run ends at 8 s.
fn crash_and_restart(cost: &CostModel, plan: &Plan) -> Result<Vec<(&'static str, Report)>> {
    let mut out = Vec::new();
    for protocol in ["zab-ct", "zab-ct-restricted", "zab-aa"] {
        let mut cfg = testbed(3, 100, false, 250, cost);
        cfg.run_for_us = Some(8_000_000);
        // Votes prefer the larger id when logs are equal, so in a failure-free start the last
        // replica leads: the first one is a follower.
        cfg.script = vec![synod_sim::faults::Scripted {
            kind: FaultKind::Crash,
            start_us: 2_000_000,
            end_us: 4_000_000,
            targets: vec![0],
            factor: 1,
        }];
        out.push((protocol, run(protocol, &cfg, plan, None)?));
    }
    Ok(out)
}

//! The whole machine's CPU over a measured window, from /proc/stat: busy time (user, nice,
//! system, irq, softirq, steal) of every core, whoever spent it. With servers and the load
//! generator on one machine, busy time per operation is what an operation costs there, the
//! figure that must fall when the write path gets cheaper (issue 27).

use serde::{Deserialize, Serialize};

/// Busy and total jiffies of all cores, now (`None` off Linux or if unreadable).
pub fn busy() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse(&stat)
}

/// The `cpu ` line of /proc/stat: (busy, total) jiffies.
fn parse(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is within user).
    if v.len() < 8 {
        return None;
    }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    let total = busy + v[3] + v[4];
    Some((busy, total))
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineCpu {
    /// Cores busy on average over the window.
    pub cores_busy: f64,
    /// Microseconds of CPU (all cores) per operation.
    pub us_per_op: f64,
}

impl MachineCpu {
    pub fn between(
        a: Option<(u64, u64)>,
        b: Option<(u64, u64)>,
        secs: f64,
        ops: u64,
    ) -> Option<Self> {
        let ((b0, _), (b1, _)) = (a?, b?);
        let hz = crate::procs::clock_ticks_per_second() as f64;
        let busy_s = b1.saturating_sub(b0) as f64 / hz;
        Some(MachineCpu {
            cores_busy: busy_s / secs.max(1e-9),
            us_per_op: busy_s * 1e6 / ops.max(1) as f64,
        })
    }
}

/// The table's extra cells: cores busy, µs of CPU per operation.
pub fn cells(r: &super::RunResult) -> Vec<String> {
    match r.machine {
        Some(m) => vec![
            format!("{:.2}", m.cores_busy),
            format!("{:.1}", m.us_per_op),
        ],
        None => vec!["-".into(), "-".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_leaves_idle_and_iowait_out() {
        let stat = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n";
        assert_eq!(parse(stat), Some((161, 1181)));
        assert_eq!(parse("intr 1 2 3\n"), None);
        assert_eq!(parse("cpu  1 2 3\n"), None);
    }
}

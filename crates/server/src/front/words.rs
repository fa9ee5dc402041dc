//! Four-letter words on the client port (ruok, srvr, stat, mntr, conf, cons, envi, wchs, dump,
//! isro), as ZooKeeper answers them.

use super::Front;
use crate::metrics::ZkSource;
use std::sync::atomic::Ordering;
use synod_core::Role;

impl Front {
    pub(super) fn four_letter_word(&self, word: &str) -> String {
        let allowed = self
            .cfg
            .tuning
            .four_letter_words
            .iter()
            .any(|w| w == "*" || w == word);
        let known = [
            "ruok", "isro", "srvr", "stat", "mntr", "conf", "cons", "envi", "wchs", "dump",
        ];
        if !known.contains(&word) {
            return String::new();
        }
        if !allowed {
            return format!("{word} is not executed because it is not in the whitelist.\n");
        }
        let view = self.group.view();
        // The mode follows whether this server accepts clients (the same flag that admits a
        // connection), so a "follower" answer means a client connecting now is served.
        let mode = match (view.role, *self.serving.borrow()) {
            (Role::Leading, true) => "leader",
            (Role::Following | Role::Proposer, true) => "follower",
            _ => "looking",
        };
        let z = self.sample();
        let (zxid, nodes, sessions, watches, ephemerals) =
            (z.last_zxid, z.znodes, z.sessions, z.watches, z.ephemerals);
        // Quota gauges per namespace, as ZooKeeper 3.8's mntr shows them.
        let quota = if word == "mntr" {
            synod_zk::quota::mntr_lines(&self.machine.lock().expect("machine").tree)
        } else {
            String::new()
        };
        let latency = &self.stats.latency;
        let count = latency.count().max(1);
        let avg_ms = latency.sum_us() as f64 / count as f64 / 1000.0;
        let max_ms = latency.max_us() as f64 / 1000.0;
        let min_ms = latency.min_us() as f64 / 1000.0;
        let version = format!("3.8.0-synod-{}", env!("CARGO_PKG_VERSION"));
        let srvr = format!(
            "Zookeeper version: {version}, built on synod\nLatency min/avg/max: {min_ms:.4}/{avg_ms:.4}/{max_ms:.4}\n\
             Received: {}\nSent: {}\nConnections: {}\nOutstanding: {}\nZxid: {zxid:#x}\nMode: {mode}\nNode count: {nodes}\n",
            self.stats.received.load(Ordering::Relaxed),
            self.stats.sent.load(Ordering::Relaxed),
            self.stats.connections.load(Ordering::Relaxed),
            z.outstanding,
        );
        match word {
            "ruok" => "imok".into(),
            "isro" => match (self.serving(), self.cfg.tuning.read_only_mode) {
                (true, _) => "rw",
                (false, true) => "ro",
                (false, false) => "null",
            }
            .into(),
            "srvr" => srvr,
            "stat" => format!("Clients:\n /{}[0](queued=0,recved=0,sent=0)\n\n{srvr}", self.cfg.client_addr),
            "mntr" => format!(
                "zk_version\t{version}\nzk_server_state\t{mode}\nzk_avg_latency\t{avg_ms:.4}\nzk_max_latency\t{max_ms:.4}\n\
                 zk_min_latency\t{min_ms:.4}\nzk_packets_received\t{}\nzk_packets_sent\t{}\nzk_num_alive_connections\t{}\n\
                 zk_outstanding_requests\t{}\nzk_znode_count\t{nodes}\nzk_watch_count\t{watches}\n\
                 zk_ephemerals_count\t{ephemerals}\nzk_global_sessions\t{sessions}\nzk_approximate_data_size\t0\nzk_open_file_descriptor_count\t0\n\
                 zk_max_file_descriptor_count\t0\nzk_uptime\t{}\n{quota}",
                self.stats.received.load(Ordering::Relaxed),
                self.stats.sent.load(Ordering::Relaxed),
                self.stats.connections.load(Ordering::Relaxed),
                z.outstanding,
                self.started.elapsed().as_millis(),
            ),
            "conf" => {
                let mut s = format!(
                    "clientPort={}\nclientPortAddress={}\nserverId={}\nmaxClientCnxns={}\nminSessionTimeout={}\nmaxSessionTimeout={}\njute.maxbuffer={}\n",
                    self.cfg.client_addr.port(),
                    self.cfg.client_addr.ip(),
                    self.cfg.node_id,
                    self.cfg.tuning.max_client_cnxns,
                    self.cfg.tuning.min_session_timeout_ms,
                    self.cfg.tuning.max_session_timeout_ms,
                    self.cfg.tuning.max_buffer
                );
                for p in &self.cfg.peers {
                    s.push_str(p);
                    s.push('\n');
                }
                s
            }
            "cons" => {
                let s = self.sessions.lock().expect("sessions");
                let mut out = String::new();
                for id in s.keys() {
                    out.push_str(&format!(" /client[sid={id:#x}]\n"));
                }
                out.push('\n');
                out
            }
            "envi" => format!(
                "Environment:\nzookeeper.version={version}\nhost.name=localhost\nos.name={}\nos.arch={}\nuser.dir={}\n",
                std::env::consts::OS,
                std::env::consts::ARCH,
                std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default()
            ),
            "wchs" => format!(
                "{} connections watching paths\nTotal watches:{watches}\n",
                self.stats.connections.load(Ordering::Relaxed)
            ),
            "dump" => {
                let m = self.machine.lock().expect("machine");
                let mut out = format!("SessionTracker dump:\nGlobal Sessions({}):\n", m.tree.sessions.len());
                for (id, s) in m.tree.sessions.iter() {
                    out.push_str(&format!("{id:#x}\t{}ms\n", s.timeout_ms));
                }
                out.push_str("ephemeral nodes dump:\n");
                for (id, s) in m.tree.sessions.iter() {
                    if !s.ephemerals.is_empty() {
                        out.push_str(&format!("Sessions with Ephemerals ({}):\n{id:#x}:\n", 1));
                        for p in s.ephemerals.iter() {
                            out.push_str(&format!("\t{p}\n"));
                        }
                    }
                }
                out
            }
            _ => String::new(),
        }
    }
}

impl crate::metrics::ZkSource for Front {
    /// `mntr`'s numbers, for `mntr` and `/metrics` alike. Sizes the tree already keeps
    /// (`len()` of its maps) and one pass over the sessions (ephemerals and watches are counted
    /// per session); never a walk of the znodes.
    fn sample(&self) -> crate::metrics::ZkSample {
        let m = self.machine.lock().expect("machine");
        crate::metrics::ZkSample {
            connections: self.stats.connections.load(Ordering::Relaxed),
            sessions: m.tree.sessions.len() as u64,
            znodes: m.tree.nodes.len() as u64,
            watches: m.watches.total() as u64,
            ephemerals: m
                .tree
                .sessions
                .values()
                .map(|s| s.ephemerals.len() as u64)
                .sum(),
            outstanding: self.stats.outstanding.load(Ordering::Relaxed),
            received: self.stats.received.load(Ordering::Relaxed),
            sent: self.stats.sent.load(Ordering::Relaxed),
            last_zxid: m.applied_zxid,
        }
    }

    fn latency(&self) -> &crate::metrics::LatencyHistogram {
        &self.stats.latency
    }
}

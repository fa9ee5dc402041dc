//! Four-letter words on the client port (ruok, srvr, stat, mntr, conf, cons, envi, wchs, dump,
//! isro), as ZooKeeper answers them.

use super::Front;
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
        let (zxid, nodes, sessions, watches, quota) = {
            let m = self.machine.lock().expect("machine");
            (
                m.applied_zxid,
                m.tree.nodes.len(),
                m.tree.sessions.len(),
                m.watches.total(),
                // Quota gauges per namespace, as ZooKeeper 3.8's mntr shows them.
                if word == "mntr" {
                    synod_zk::quota::mntr_lines(&m.tree)
                } else {
                    String::new()
                },
            )
        };
        let count = self.stats.latency_count.load(Ordering::Relaxed).max(1);
        let avg_ms =
            self.stats.latency_sum_us.load(Ordering::Relaxed) as f64 / count as f64 / 1000.0;
        let max_ms = self.stats.latency_max_us.load(Ordering::Relaxed) as f64 / 1000.0;
        let version = format!("3.8.0-synod-{}", env!("CARGO_PKG_VERSION"));
        let srvr = format!(
            "Zookeeper version: {version}, built on synod\nLatency min/avg/max: 0/{avg_ms:.4}/{max_ms:.4}\n\
             Received: {}\nSent: {}\nConnections: {}\nOutstanding: 0\nZxid: {zxid:#x}\nMode: {mode}\nNode count: {nodes}\n",
            self.stats.received.load(Ordering::Relaxed),
            self.stats.sent.load(Ordering::Relaxed),
            self.stats.connections.load(Ordering::Relaxed),
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
                 zk_min_latency\t0\nzk_packets_received\t{}\nzk_packets_sent\t{}\nzk_num_alive_connections\t{}\n\
                 zk_outstanding_requests\t0\nzk_znode_count\t{nodes}\nzk_watch_count\t{watches}\n\
                 zk_ephemerals_count\t{}\nzk_approximate_data_size\t0\nzk_open_file_descriptor_count\t0\n\
                 zk_max_file_descriptor_count\t0\nzk_uptime\t{}\n{quota}",
                self.stats.received.load(Ordering::Relaxed),
                self.stats.sent.load(Ordering::Relaxed),
                self.stats.connections.load(Ordering::Relaxed),
                sessions,
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

//! A wide-area network: nodes placed at sites, a one-way latency, jitter and bandwidth per
//! directed pair of sites (DummyNet's pipes in the Mencius report's testbed, mencius.md §7),
//! and changes to them at given times (its Fig. 6). Messages between two sites share that
//! pair's bandwidth; every node's own interface ([`crate::NetModel`]'s bandwidth) applies too.
//!
//! The text form (`synod sim --network FILE`), one statement per line, `#` comments:
//!
//! ```text
//! node 1 A               # node 1 is at site A (nodes not named: round-robin over the sites)
//! link A B 50ms 20mbps   # A → B: one-way latency, bandwidth
//! link * * 50ms 20mbps 5ms   # every pair not given (jitter last, optional)
//! at 60s link C A 50ms 10mbps   # from 60 s of virtual time on
//! sendbuf 64kb           # optional: bounded send queues (back-pressure), see below
//! ```
//!
//! **Back-pressure** ([`Wan::send_buffer_bytes`], off by default): by default a WAN link's
//! queue is unbounded, so a sender whose link to one peer is slow keeps sending at the rate of
//! its fast links while the slow link's queue grows. With a bound, each directed link between
//! two sites has a send queue of that many bytes, like a TCP socket's send buffer: a message
//! that finds the queue fuller than that blocks its sender (a blocking write) until the queue
//! has drained to the bound. The sender's node is then busy (it handles nothing else) and its
//! interface sends nothing else until then, so a node's sending rate follows its slowest link.

use synod_core::TimeUs;

/// One directed pair of sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WanLink {
    pub latency_us: u64,
    /// Extra one-way delay, uniform in [0, jitter] per message (FIFO is kept).
    pub jitter_us: u64,
    pub bandwidth_bytes_per_s: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wan {
    pub sites: Vec<String>,
    /// The site of each node (by node index).
    pub site_of: Vec<usize>,
    /// `links[from][to]`, by site index; the diagonal is the site's own LAN.
    pub links: Vec<Vec<WanLink>>,
    /// `(at, from, to, link)`, in time order.
    pub changes: Vec<(TimeUs, usize, usize, WanLink)>,
    /// Bytes each directed link between two sites may hold queued before a send blocks its
    /// sender (a TCP send buffer; the module's "Back-pressure"). `None` (the default):
    /// unbounded queues, no sender ever blocks.
    pub send_buffer_bytes: Option<u64>,
}

impl WanLink {
    /// With a send queue of `buffer` bytes: when a sender that just queued a message on this
    /// link (whose transmitter is busy until `queue_free_at`) can write again, i.e. when what
    /// is queued has drained to `buffer` bytes.
    pub fn writable_at(&self, queue_free_at: TimeUs, buffer: u64) -> TimeUs {
        let drain_us = buffer.saturating_mul(1_000_000) / self.bandwidth_bytes_per_s.max(1);
        queue_free_at.saturating_sub(drain_us)
    }
}

const LAN: WanLink = WanLink {
    latency_us: 100,
    jitter_us: 50,
    bandwidth_bytes_per_s: 1_250_000_000,
};

impl Wan {
    /// The Mencius report's clique (mencius.md §7.2): three sites, 50 ms one-way, 20 Mbit/s
    /// per directed link; nodes placed round-robin.
    pub fn three_sites(nodes: usize) -> Self {
        Self::clique(3, nodes, 50_000, 20_000_000 / 8)
    }

    /// `sites` sites (A, B, C, …), every directed pair with the same one-way latency and
    /// bandwidth, `nodes` nodes placed round-robin. The Mencius report's star (§7.5: 25 ms to
    /// a hub, 10 Mbit/s per site) is a clique of 50 ms whose sites' own interfaces
    /// ([`crate::NetModel`]'s bandwidth) are 10 Mbit/s.
    pub fn clique(sites: usize, nodes: usize, latency_us: u64, bandwidth_bytes_per_s: u64) -> Self {
        let link = WanLink {
            latency_us,
            jitter_us: 0,
            bandwidth_bytes_per_s,
        };
        let names: Vec<String> = (0..sites)
            .map(|i| char::from(b'A' + (i % 26) as u8).to_string())
            .collect();
        let links = (0..sites)
            .map(|a| {
                (0..sites)
                    .map(|b| if a == b { LAN } else { link })
                    .collect()
            })
            .collect();
        Wan {
            site_of: (0..nodes).map(|i| i % sites.max(1)).collect(),
            sites: names,
            links,
            changes: Vec::new(),
            send_buffer_bytes: None,
        }
    }

    /// The link in effect from `from`'s site to `to`'s site.
    pub fn link(&self, from: usize, to: usize) -> WanLink {
        self.links[self.site_of[from]][self.site_of[to]]
    }

    /// Apply the changes due at or before `now`, returning whether any was.
    pub fn advance(&mut self, now: TimeUs) -> bool {
        let due = self.changes.iter().take_while(|c| c.0 <= now).count();
        for (_, a, b, l) in self.changes.drain(..due) {
            self.links[a][b] = l;
        }
        due > 0
    }

    /// Parse the text form for a cluster of `nodes` nodes.
    pub fn parse(text: &str, nodes: usize) -> Result<Self, String> {
        let mut sites: Vec<String> = Vec::new();
        let mut placed: Vec<Option<usize>> = vec![None; nodes];
        let mut given: Vec<(String, String, WanLink)> = Vec::new();
        let mut later: Vec<(TimeUs, String, String, WanLink)> = Vec::new();
        let mut send_buffer_bytes = None;
        let site = |sites: &mut Vec<String>, name: &str| -> usize {
            sites.iter().position(|s| s == name).unwrap_or_else(|| {
                sites.push(name.to_string());
                sites.len() - 1
            })
        };
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |m: String| format!("line {}: {m}: '{}'", n + 1, raw.trim());
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["node", id, s] => {
                    let id: usize = id.parse().map_err(|_| err("bad node id".into()))?;
                    if id == 0 || id > nodes {
                        return Err(err(format!("node ids run from 1 to {nodes}")));
                    }
                    placed[id - 1] = Some(site(&mut sites, s));
                }
                ["link", a, b, rest @ ..] => {
                    let l = parse_link(rest).map_err(err)?;
                    for s in [a, b] {
                        if *s != "*" {
                            site(&mut sites, s);
                        }
                    }
                    given.push((a.to_string(), b.to_string(), l));
                }
                ["at", t, "link", a, b, rest @ ..] => {
                    let at = parse_duration_us(t).map_err(err)?;
                    let l = parse_link(rest).map_err(err)?;
                    later.push((at, a.to_string(), b.to_string(), l));
                }
                ["sendbuf", b] => {
                    send_buffer_bytes = Some(parse_bytes(b).map_err(err)?);
                }
                _ => {
                    return Err(err(
                        "expected 'node', 'link', 'at … link' or 'sendbuf'".into()
                    ))
                }
            }
        }
        if sites.is_empty() {
            return Err("no sites: name them with 'node' or 'link' lines".into());
        }
        let k = sites.len();
        let site_of: Vec<usize> = placed
            .iter()
            .enumerate()
            .map(|(i, p)| p.unwrap_or(i % k))
            .collect();
        let mut links = vec![vec![LAN; k]; k];
        // Wildcards first, so that a named pair overrides them whatever the order of lines.
        let mut ordered = given;
        ordered.sort_by_key(|(a, b, _)| (a != "*") as u8 + (b != "*") as u8);
        for (a, b, l) in &ordered {
            for (i, row) in links.iter_mut().enumerate() {
                for (j, cell) in row.iter_mut().enumerate() {
                    let hit = |p: &str, x: usize| p == "*" || sites[x] == p;
                    if i != j && hit(a, i) && hit(b, j) {
                        *cell = *l;
                    }
                }
            }
        }
        let mut changes = Vec::new();
        for (at, a, b, l) in later {
            let find = |s: &str| -> Result<Vec<usize>, String> {
                if s == "*" {
                    return Ok((0..k).collect());
                }
                let i = sites
                    .iter()
                    .position(|x| x == s)
                    .ok_or_else(|| format!("'at {at}us': unknown site '{s}'"))?;
                Ok(vec![i])
            };
            for i in find(&a)? {
                for j in find(&b)? {
                    if i != j {
                        changes.push((at, i, j, l));
                    }
                }
            }
        }
        changes.sort_by_key(|c| c.0);
        Ok(Wan {
            sites,
            site_of,
            links,
            changes,
            send_buffer_bytes,
        })
    }
}

/// `65536`, `64kb`, `1mb` (bytes; k and m are powers of 1,024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let (num, mul) = if let Some(n) = lower.strip_suffix("kb") {
        (n.to_string(), 1u64 << 10)
    } else if let Some(n) = lower.strip_suffix("mb") {
        (n.to_string(), 1 << 20)
    } else {
        (lower.clone(), 1)
    };
    let v: u64 = num
        .parse()
        .map_err(|_| format!("'{s}': not a size in bytes"))?;
    if v == 0 {
        return Err(format!("'{s}': a send buffer holds at least one byte"));
    }
    v.checked_mul(mul)
        .ok_or_else(|| format!("'{s}': out of range"))
}

fn parse_link(words: &[&str]) -> Result<WanLink, String> {
    let (lat, bw, jitter) = match words {
        [lat, bw] => (lat, bw, None),
        [lat, bw, j] => (lat, bw, Some(j)),
        _ => return Err("expected: latency bandwidth [jitter]".into()),
    };
    Ok(WanLink {
        latency_us: parse_duration_us(lat)?,
        jitter_us: jitter
            .map(|j| parse_duration_us(j))
            .transpose()?
            .unwrap_or(0),
        bandwidth_bytes_per_s: parse_bandwidth(bw)?,
    })
}

/// `50ms`, `2s`, `300us`.
pub fn parse_duration_us(s: &str) -> Result<u64, String> {
    let (num, mul) = if let Some(n) = s.strip_suffix("us") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1_000)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1_000_000)
    } else {
        return Err(format!("'{s}': a duration needs a unit (us, ms, s)"));
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}': not a duration"))?;
    if !(0.0..1e12).contains(&v) {
        return Err(format!("'{s}': out of range"));
    }
    Ok((v * mul as f64).round() as u64)
}

/// `20mbps`, `1gbps`, `500kbps` (bits per second), returned in bytes per second.
pub fn parse_bandwidth(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let (num, mul) = if let Some(n) = lower.strip_suffix("gbps") {
        (n.to_string(), 1e9)
    } else if let Some(n) = lower.strip_suffix("mbps") {
        (n.to_string(), 1e6)
    } else if let Some(n) = lower.strip_suffix("kbps") {
        (n.to_string(), 1e3)
    } else {
        return Err(format!(
            "'{s}': a bandwidth needs a unit (kbps, mbps, gbps)"
        ));
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}': not a bandwidth"))?;
    if !(v > 0.0 && v < 1e6) {
        return Err(format!("'{s}': out of range"));
    }
    Ok((v * mul / 8.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mencius_asymmetric_testbed_parses() {
        // Fig. 6 of the Mencius report, with its changes.
        let text = "\
            node 1 A\nnode 2 B\nnode 3 C\n\
            link A * 15mbps 50ms # wrong order\n";
        assert!(Wan::parse(text, 3).unwrap_err().contains("line 4"));
        let text = "\
            # Fig. 6\n\
            node 1 A\nnode 2 B\nnode 3 C\n\
            link * * 50ms 10mbps\n\
            link A * 50ms 15mbps\n\
            link C * 50ms 5mbps\n\
            at 60s link C A 50ms 10mbps\n\
            at 120s link C B 50ms 10mbps\n\
            at 180s link A C 50ms 5mbps\n";
        let mut w = Wan::parse(text, 3).unwrap();
        let mbps = |w: &Wan, a, b| w.link(a, b).bandwidth_bytes_per_s * 8 / 1_000_000;
        assert_eq!(
            (mbps(&w, 0, 1), mbps(&w, 1, 0), mbps(&w, 2, 0)),
            (15, 10, 5)
        );
        assert_eq!(w.link(0, 1).latency_us, 50_000);
        assert_eq!(w.link(0, 0), LAN);
        assert!(!w.advance(59_999_999));
        assert!(w.advance(60_000_000));
        assert_eq!(mbps(&w, 2, 0), 10);
        assert_eq!(mbps(&w, 2, 1), 5);
        assert!(w.advance(200_000_000));
        assert_eq!((mbps(&w, 2, 1), mbps(&w, 0, 2)), (10, 5));
    }

    #[test]
    fn send_buffers_parse_and_drain_at_the_links_rate() {
        let w = Wan::parse("link A B 50ms 8mbps\nlink B A 50ms 8mbps\nsendbuf 64kb", 2).unwrap();
        assert_eq!(w.send_buffer_bytes, Some(64 << 10));
        assert_eq!(
            Wan::three_sites(3).send_buffer_bytes,
            None,
            "off by default"
        );
        assert_eq!(parse_bytes("1mb"), Ok(1 << 20));
        assert_eq!(parse_bytes("4000"), Ok(4000));
        assert!(parse_bytes("0").is_err() && parse_bytes("lots").is_err());
        // 8 Mbit/s = 1,000,000 B/s: a 64 KiB buffer drains in 65.536 ms, so a sender whose
        // queue is busy until 1 s can write again at 934,464 µs, and at once when less is
        // queued than the buffer holds.
        let l = w.link(0, 1);
        assert_eq!(l.writable_at(1_000_000, 64 << 10), 934_464);
        assert_eq!(l.writable_at(10_000, 64 << 10), 0);
    }

    #[test]
    fn bad_descriptions_are_clear_errors() {
        for (text, needle) in [
            ("node 9 A", "1 to 3"),
            ("link A B 50 20mbps", "unit"),
            ("link A B 50ms 20", "unit"),
            ("link A B 50ms -3mbps", "out of range"),
            (
                "at 5s link A Z 1ms 1mbps\nlink A B 1ms 1mbps",
                "unknown site",
            ),
            ("route A B", "expected"),
            ("", "no sites"),
        ] {
            let e = Wan::parse(text, 3).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn unplaced_nodes_go_round_robin() {
        let w = Wan::parse("link A B 1ms 1mbps\nlink B A 1ms 1mbps", 5).unwrap();
        assert_eq!(w.site_of, vec![0, 1, 0, 1, 0]);
        assert_eq!(Wan::three_sites(5).site_of, vec![0, 1, 2, 0, 1]);
        let star = Wan::clique(7, 7, 50_000, 1_000_000);
        assert_eq!(star.sites[6], "G");
        assert_eq!(star.link(0, 6).latency_us, 50_000);
        assert_eq!(star.link(3, 3), LAN);
    }
}

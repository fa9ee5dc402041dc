use super::*;
use prometheus_client::metrics::counter::Counter;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// What is wrong with the names in a Prometheus text exposition, by the conventions synod
/// follows (metrics.rs): one line per problem, empty when all is well.
///
/// * every family is declared (`# TYPE`) and its name is `synod_<subsystem>_...` with a
///   subsystem of [`SUBSYSTEMS`] (`synod_build_info` is the build's);
/// * a counter's samples, and only a counter's, end in `_total` (never `_total_total`);
/// * a histogram's samples are `_bucket`, `_sum` and `_count`;
/// * units are base units, named: no `_ms`, `_us`, `_millis`, `_micros`; a latency,
///   duration, age or timeout is in `_seconds`; a size named `bytes` ends in `_bytes`.
fn convention_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                problems.push(format!("malformed TYPE line: {line}"));
                continue;
            };
            types.insert(name.to_string(), kind.to_string());
        }
    }
    for (name, kind) in &types {
        let prefix_ok = name == "synod_build_info"
            || SUBSYSTEMS
                .iter()
                .any(|s| name.starts_with(&format!("synod_{s}_")));
        if !prefix_ok {
            problems.push(format!(
                "{name}: not synod_<subsystem>_ (subsystems {SUBSYSTEMS:?})"
            ));
        }
        if name.ends_with("_total") {
            problems.push(format!(
                "{name} ({kind}): a family named _total (a counter's samples get _total added; a {kind} must not look like one)"
            ));
        }
        if !matches!(kind.as_str(), "counter" | "gauge" | "histogram") {
            problems.push(format!(
                "{name}: type {kind} (synod exports counters, gauges, histograms)"
            ));
        }
        let words: Vec<&str> = name.split('_').collect();
        for unit in [
            "ms",
            "us",
            "millis",
            "micros",
            "milliseconds",
            "microseconds",
        ] {
            if words.contains(&unit) {
                problems.push(format!("{name}: unit {unit} (use base units: _seconds)"));
            }
        }
        let timed = ["latency", "duration", "age", "timeout"]
            .iter()
            .any(|w| words.contains(w));
        if timed && !words.contains(&"seconds") {
            problems.push(format!("{name}: a time without _seconds"));
        }
        if words.contains(&"bytes") && !name.ends_with("_bytes") {
            problems.push(format!("{name}: bytes, but not ending in _bytes"));
        }
    }
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let sample = line.split(['{', ' ']).next().unwrap_or_default();
        // The family: the longest declared name the sample starts with, with its suffix.
        let family = types
            .keys()
            .filter(|f| sample.starts_with(f.as_str()))
            .max_by_key(|f| f.len());
        let Some(family) = family else {
            problems.push(format!("{sample}: a sample of no declared family"));
            continue;
        };
        let suffix = &sample[family.len()..];
        let ok = match types[family].as_str() {
            "counter" => suffix == "_total" || suffix == "_created",
            "gauge" => suffix.is_empty() && !sample.ends_with("_total"),
            "histogram" => matches!(suffix, "_bucket" | "_sum" | "_count" | "_created"),
            _ => true,
        };
        if !ok {
            problems.push(format!(
                "{sample}: a sample of the {} {family} with suffix {suffix:?}",
                types[family]
            ));
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

struct FakeZk(LatencyHistogram);

impl ZkSource for FakeZk {
    fn sample(&self) -> ZkSample {
        ZkSample {
            connections: 3,
            sessions: 5,
            znodes: 42,
            watches: 7,
            ephemerals: 2,
            outstanding: 1,
            received: 100,
            sent: 99,
            last_zxid: 0x1_0000_0005,
        }
    }
    fn latency(&self) -> &LatencyHistogram {
        &self.0
    }
}

/// A node's metrics with every family showing samples: groups, every known core reading and
/// one unknown, the transport, a ZooKeeper port, the KV counters.
fn everything() -> (Metrics, Arc<dyn ZkSource>) {
    let stats = Arc::new(TransportStats::default());
    stats.frames_in.store(10, Ordering::Relaxed);
    stats.bytes_out.store(2048, Ordering::Relaxed);
    let m = Metrics::new(stats);
    let mut g = m.group(0);
    g.submitted.inc();
    g.sent("accept").inc();
    g.received("accept").inc();
    g.commit_latency.observe(0.001);
    let all: Vec<(&'static str, f64)> = readings::KNOWN
        .iter()
        .map(|r| (r.core, 1.0))
        .chain([("some_new_reading", 2.0)])
        .collect();
    g.set_core(&all);
    m.fsync_latency.observe(0.0002);
    m.fsyncs.inc();
    let zk: Arc<dyn ZkSource> = Arc::new(FakeZk(LatencyHistogram::default()));
    zk.latency().observe_us(120);
    m.zookeeper(Arc::downgrade(&zk));
    zk_front().limited("max_client_cnxns");
    zk_front().sasl(true);
    kv().committed();
    kv().aborted("the version of k is 3, the transaction saw 2");
    kv().undecided();
    etcd().request("Put");
    (m, zk)
}

#[test]
fn every_exported_name_follows_the_convention() {
    let (m, _zk) = everything();
    let text = m.render();
    let problems = convention_problems(&text);
    assert!(problems.is_empty(), "{problems:#?}\n{text}");
    // And the scrape holds what the rest of the tree relies on.
    for needle in [
        "synod_build_info{version=\"",
        "synod_wal_fsyncs_total 1",
        "synod_wal_fsync_duration_seconds_bucket",
        "synod_wal_size_bytes 0",
        "synod_peer_frames_received_total 10",
        "synod_peer_sent_bytes_total 2048",
        "synod_peer_send_queue_messages 0",
        "synod_group_submitted_total{group=\"0\"} 1",
        "synod_group_messages_sent_total{group=\"0\",kind=\"accept\"} 1",
        "synod_group_role{group=\"0\"}",
        "synod_protocol_paxos_view_changes_total{group=\"0\"} 1",
        "synod_protocol_paxos_catch_up_seconds_total{group=\"0\"} 0.000001",
        "synod_protocol_paxos_view_change_timeout_seconds{group=\"0\"} 0.001",
        "synod_protocol_mencius_suggested_total{group=\"0\"} 1",
        "synod_protocol_some_new_reading{group=\"0\"} 2",
        "synod_zk_znodes 42",
        "synod_zk_connections 3",
        "synod_zk_sessions 5",
        "synod_zk_ephemerals 2",
        "synod_zk_watches 7",
        "synod_zk_outstanding_requests 1",
        "synod_zk_packets_received_total 100",
        "synod_zk_request_latency_seconds_bucket{le=\"0.0002\"} 1",
        "synod_zk_request_latency_seconds_count 1",
        "synod_zk_limited_total{limit=\"max_client_cnxns\"}",
        "synod_zk_sasl_total{outcome=\"ok\"}",
        "synod_kv_commits_total",
        "synod_kv_aborts_total{reason=\"conflict\"}",
        "synod_kv_undecided_total",
        "synod_etcd_requests_total{method=\"Put\"}",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    let build = format!(
        "synod_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        crate::version::VERSION,
        crate::version::COMMIT
    );
    assert!(text.contains(&build), "no {build:?} in\n{text}");
}

#[test]
fn the_convention_check_catches_broken_names() {
    // Each of these is a mistake the check must name; registered as the node's are.
    let mut r = Registry::with_prefix("synod");
    let bad_gauge: Gauge = Gauge::default();
    bad_gauge.set(1);
    r.sub_registry_with_prefix("wal").register(
        "fsyncs_total",
        "a gauge named like a counter",
        bad_gauge,
    );
    let doubled: Counter = Counter::default();
    r.sub_registry_with_prefix("wal").register(
        "records_total",
        "a counter named with its _total",
        doubled,
    );
    let no_subsystem: Counter = Counter::default();
    r.register(
        "transport",
        "a counter outside every subsystem",
        no_subsystem,
    );
    let millis: Gauge = Gauge::default();
    r.sub_registry_with_prefix("group")
        .register("commit_latency_ms", "a time in ms", millis);
    let unitless: Gauge = Gauge::default();
    r.sub_registry_with_prefix("peer")
        .register("bytes_in", "bytes not last", unitless);
    let mut text = String::new();
    encode(&mut text, &r).unwrap();
    let problems = convention_problems(&text);
    let named = |what: &str| problems.iter().any(|p| p.starts_with(what));
    assert!(named("synod_wal_fsyncs_total (gauge)"), "{problems:#?}");
    assert!(named("synod_wal_records_total (counter)"), "{problems:#?}");
    assert!(
        named("synod_transport: not synod_<subsystem>_"),
        "{problems:#?}"
    );
    assert!(
        named("synod_group_commit_latency_ms: unit ms"),
        "{problems:#?}"
    );
    assert!(
        named("synod_group_commit_latency_ms: a time without _seconds"),
        "{problems:#?}"
    );
    assert!(named("synod_peer_bytes_in: bytes"), "{problems:#?}");
    // A sample that contradicts its declared type (as the old `synod_transport` gauge holding
    // counters would, were it named `_total`).
    let forged = "# TYPE synod_peer_frames gauge\nsynod_peer_frames_total 3\n\
                  # TYPE synod_wal_fsyncs counter\nsynod_wal_fsyncs 3\n";
    let problems = convention_problems(forged);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("synod_peer_frames_total: a sample of the gauge")),
        "{problems:#?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("synod_wal_fsyncs: a sample of the counter")),
        "{problems:#?}"
    );
    // The real registry with a broken name added fails too.
    let (m, _zk) = everything();
    let mut text = m.render();
    text.push_str("# HELP synod_epoch Current epoch.\n# TYPE synod_epoch gauge\nsynod_epoch 1\n");
    assert_eq!(
        convention_problems(&text),
        vec![format!(
            "synod_epoch: not synod_<subsystem>_ (subsystems {SUBSYSTEMS:?})"
        )]
    );
}

#[test]
fn core_readings_are_exported_by_group_with_their_type_and_unit() {
    let m = Metrics::new(Default::default());
    let mut g = m.group(3);
    g.set_core(&[("mencius_revocations", 2.0), ("paxos_batch_size", 1.5)]);
    g.set_core(&[
        ("mencius_revocations", 4.0),
        ("paxos_catch_up_us", 2_500_000.0),
    ]);
    let text = m.render();
    for needle in [
        "# TYPE synod_protocol_mencius_revocations counter",
        "synod_protocol_mencius_revocations_total{group=\"3\"} 4.0",
        "synod_protocol_paxos_catch_up_seconds_total{group=\"3\"} 2.5",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    // The latest readings replace the group's earlier ones.
    assert!(!text.contains("paxos_batch_commands_mean"), "{text}");
    m.group(4).set_core(&[("paxos_batch_size", 1.5)]);
    let text = m.render();
    assert!(
        text.contains("# TYPE synod_protocol_paxos_batch_commands_mean gauge"),
        "{text}"
    );
    assert!(
        text.contains("synod_protocol_paxos_batch_commands_mean{group=\"4\"} 1.5"),
        "{text}"
    );
    assert!(
        text.contains("synod_protocol_mencius_revocations_total{group=\"3\"} 4.0"),
        "{text}"
    );
}

#[test]
fn zk_front_counters_are_exported() {
    let m = Metrics::new(Default::default());
    zk_front().limited("max_client_cnxns");
    zk_front().sasl(false);
    let text = m.render();
    assert!(
        text.contains("synod_zk_limited_total{limit=\"max_client_cnxns\"}"),
        "{text}"
    );
    assert!(
        text.contains("synod_zk_sasl_total{outcome=\"failed\"}"),
        "{text}"
    );
}

#[test]
fn zk_gauges_follow_the_source_and_vanish_with_it() {
    let m = Metrics::new(Default::default());
    assert!(!m.render().contains("synod_zk_znodes"));
    let zk: Arc<dyn ZkSource> = Arc::new(FakeZk(LatencyHistogram::default()));
    m.zookeeper(Arc::downgrade(&zk));
    assert!(m.render().contains("synod_zk_znodes 42"));
    drop(zk);
    assert!(!m.render().contains("synod_zk_znodes"));
}

#[test]
fn latency_histogram_buckets_sum_and_extremes() {
    let h = LatencyHistogram::default();
    assert_eq!((h.min_us(), h.max_us(), h.count()), (0, 0, 0));
    for us in [10, 50, 51, 4_000_000] {
        h.observe_us(us);
    }
    assert_eq!((h.min_us(), h.max_us(), h.count()), (10, 4_000_000, 4));
    assert_eq!(h.sum_us(), 4_000_111);
    let mut r = Registry::default();
    #[derive(Debug)]
    struct C(Arc<LatencyHistogram>);
    impl prometheus_client::collector::Collector for C {
        fn encode(
            &self,
            mut e: prometheus_client::encoding::DescriptorEncoder,
        ) -> std::fmt::Result {
            self.0.encode(&mut e, "x_seconds", "x")
        }
    }
    let h = Arc::new(h);
    r.register_collector(Box::new(C(h.clone())));
    let mut text = String::new();
    encode(&mut text, &r).unwrap();
    // ≤ 50 µs: two; ≤ 100 µs: three; the 4 s one only in +Inf.
    assert!(
        text.contains("x_seconds_bucket{le=\"0.00005\"} 2"),
        "{text}"
    );
    assert!(text.contains("x_seconds_bucket{le=\"0.0001\"} 3"), "{text}");
    assert!(text.contains("x_seconds_bucket{le=\"+Inf\"} 4"), "{text}");
    assert!(text.contains("x_seconds_count 4"), "{text}");
}

#[test]
fn kv_abort_reasons_are_a_bounded_set() {
    assert_eq!(
        kv_abort_reason("the version of a is 2, the transaction saw 1"),
        "conflict"
    );
    assert_eq!(kv_abort_reason("aborted by the client"), "client");
    assert_eq!(kv_abort_reason("malformed part"), "malformed");
    assert_eq!(kv_abort_reason("anything else"), "other");
}

use super::compare::{chart, compare_markdown, kind_of, CompareDoc};
use super::cost::{
    parse_deliveries, parse_transport, prom_counter, ServerCost, Snapshot, Transport,
};
use super::*;

#[test]
fn durations_parse_and_bad_ones_are_refused() {
    assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
    assert!(parse_duration("ten").is_err());
    assert!(parse_duration("-1s").is_err());
}

#[test]
fn ratios_table_names_both_systems() {
    let r = |sys: &str, t: f64| RunResult {
        system: sys.into(),
        clients: 32,
        write_ratio: 100,
        value_size: 1024,
        keys: 10,
        dist: "uniform".into(),
        op: "set".into(),
        seconds: 1.0,
        ops: t as u64,
        errors: 0,
        throughput: t,
        p50_us: 100.0,
        p90_us: 1.0,
        p99_us: 200.0,
        p999_us: 1.0,
        max_us: 1.0,
        mean_us: 1.0,
        server: None,
        machine: None,
        link: None,
    };
    let doc = CompareDoc {
        machine: machine(),
        versions: vec![],
        settings: String::new(),
        skipped: vec![],
        results: vec![
            r("synod (zab)", 5000.0),
            r("synod (paxos)", 4000.0),
            r("zookeeper", 1000.0),
        ],
    };
    let md = compare_markdown(&doc);
    assert!(
        md.contains("| synod (zab) | 32 | 100% | 5.00 | 1.00 | 1.00 | – | – | – |"),
        "{md}"
    );
    assert!(
        md.contains("| synod (paxos) | 32 | 100% | 4.00 | 1.00 | 1.00 | – | – | – |"),
        "{md}"
    );
    assert!(chart(&doc.results).contains("<svg"));
}

#[test]
fn systems_name_synod_with_its_protocol() {
    let (k, label) = kind_of("synod", "zab", &[]).unwrap();
    assert_eq!(
        (k.name(), label.as_str()),
        ("synod-zab".into(), "synod (zab)")
    );
    let (k, label) = kind_of("synod-paxos", "zab", &[]).unwrap();
    assert_eq!(
        (k.name(), label.as_str()),
        ("synod-paxos".into(), "synod (paxos)")
    );
    let (_, label) = kind_of("zk", "zab", &[]).unwrap();
    assert_eq!(label, "zookeeper");
    let e = kind_of("synod-raft", "zab", &[]).unwrap_err().to_string();
    assert!(
        e.contains("'raft' is not a protocol") && e.contains("paxos"),
        "{e}"
    );
    let e = kind_of("consul", "zab", &[]).unwrap_err().to_string();
    assert!(e.contains("synod-paxos"), "{e}");
}

const METRICS: &str = "# HELP synod_peer_frames_received Frames received from peers.
# TYPE synod_peer_frames_received counter
synod_peer_frames_received_total 1200
# TYPE synod_peer_frames_sent counter
synod_peer_frames_sent_total 1190
# TYPE synod_peer_received_bytes counter
synod_peer_received_bytes_total 2400000
# TYPE synod_peer_sent_bytes counter
synod_peer_sent_bytes_total 2390000
# TYPE synod_peer_bad_frames counter
synod_peer_bad_frames_total 0
synod_peer_frames_received_total_other{kind=\"x\"} 7
# EOF
";

#[test]
fn transport_counters_parse_from_prometheus_text() {
    assert_eq!(
        parse_transport(METRICS).unwrap(),
        Transport {
            frames_in: 1200,
            frames_out: 1190,
            bytes_in: 2_400_000,
            bytes_out: 2_390_000,
        }
    );
    // A float rendering of an integer, and a trailing timestamp, are accepted.
    let t = METRICS.replace("total 1200", "total 1.2e3 1700000000000");
    assert_eq!(parse_transport(&t).unwrap().frames_in, 1200);
    // The sample must match the name exactly, not a longer one that starts like it.
    assert!(
        prom_counter(
            METRICS,
            "synod_peer_frames_received_total_other{kind=\"x\"}"
        )
        .unwrap()
            == 7
    );
    assert!(prom_counter(METRICS, "synod_peer_frames").is_err());
}

#[test]
fn missing_or_malformed_transport_counters_are_errors() {
    let missing = METRICS.replace("synod_peer_sent_bytes_total 2390000\n", "");
    assert!(parse_transport(&missing).is_err());
    assert!(parse_transport("").is_err());
    assert!(parse_transport("<html>502 Bad Gateway</html>").is_err());
    for bad in ["} x", "} -5", "} NaN", "} +Inf", "} 1.5", "}", "} ", "}\t"] {
        let t = METRICS.replace(
            "received_total 1200",
            &format!("received_total{}", &bad[1..]),
        );
        assert!(parse_transport(&t).is_err(), "{bad:?} accepted");
    }
    let huge = METRICS.replace("total 1200", "total 99999999999999999999999");
    assert!(parse_transport(&huge).is_err());
}

#[test]
fn proc_stat_cpu_ticks_are_counted_after_the_last_parenthesis() {
    use crate::procs::stat_cpu_ticks;
    let tail = "S 1 1234 1234 0 -1 4194560 2469 0 0 0 517 83 0 0 20 0 9 0 8310 2 3";
    assert_eq!(stat_cpu_ticks(&format!("4321 (synod) {tail}")), Some(600));
    // A command name with spaces and parentheses, even an unbalanced one.
    assert_eq!(
        stat_cpu_ticks(&format!("4321 (a) b (c)) 1 2 3 ) {tail}")),
        Some(600)
    );
    assert_eq!(stat_cpu_ticks(&format!("4321 (x (y {tail}")), None);
    for bad in [
        "",
        ")",
        "4321 (synod)",
        "4321 (synod) S 1 2",
        "4321 synod S 1 1234 1234 0 -1 4194560 2469 0 0 0 517 83",
        "4321 (synod) S 1 1234 1234 0 -1 4194560 2469 0 0 0 5x7 83",
        "4321 (synod) S 1 1234 1234 0 -1 4194560 2469 0 0 0 18446744073709551615 1",
    ] {
        assert_eq!(stat_cpu_ticks(bad), None, "{bad:?}");
    }
}

#[test]
fn server_cost_columns_are_dashes_without_counters() {
    assert_eq!(ServerCost::cells(None), ["—", "—", "—", "—", "—"]);
    let c = ServerCost {
        msgs_per_op: Some(8.0),
        msgs_per_write: Some(16.0),
        peer_bytes_per_op: Some(9000.0),
        cpu_us_per_op: Some(100.0),
        cpu_us_per_msg: Some(10.0),
        ..Default::default()
    };
    assert_eq!(
        ServerCost::cells(Some(&c)),
        ["8.00", "16.00", "9000", "100.0", "10.00"]
    );
}

#[test]
fn server_cost_is_the_difference_per_operation() {
    let hz = crate::procs::clock_ticks_per_second();
    let t = |f: u64, b: u64| Transport {
        frames_in: f,
        frames_out: f,
        bytes_in: b,
        bytes_out: b,
    };
    let a = Snapshot {
        cpu_ticks: Some(1000),
        transport: Some(t(100, 10_000)),
        committed: Some(70),
    };
    // 1000 operations, 500 of them writes: 4000 frames each way, 1 s of CPU.
    let b = Snapshot {
        cpu_ticks: Some(1000 + hz),
        transport: Some(t(4100, 2_010_000)),
        committed: Some(570),
    };
    let c = ServerCost::between(&a, &b, 1000);
    assert_eq!(c.peer_frames_in, Some(4000));
    assert_eq!(c.msgs_per_op, Some(8.0));
    assert_eq!(c.committed, Some(500));
    assert_eq!(c.msgs_per_write, Some(16.0));
    assert_eq!(c.peer_bytes_per_op, Some(4000.0));
    assert_eq!(c.cpu_us_per_op, Some(1000.0));
    assert_eq!(c.cpu_us_per_msg, Some(100.0));
    // A counter that went backwards, a missing scrape or no operations give no figure.
    let restarted = Snapshot {
        cpu_ticks: Some(1000 + hz),
        transport: Some(t(50, 2_010_000)),
        committed: Some(570),
    };
    let c = ServerCost::between(&a, &restarted, 1000);
    assert_eq!(
        (c.msgs_per_op, c.msgs_per_write, c.cpu_us_per_msg),
        (None, None, None)
    );
    assert_eq!(c.cpu_us_per_op, Some(1000.0));
    let lost = Snapshot {
        cpu_ticks: None,
        transport: None,
        committed: None,
    };
    assert_eq!(ServerCost::between(&a, &lost, 1000), ServerCost::default());
    assert_eq!(ServerCost::between(&a, &b, 0).cpu_us_per_op, None);
}

#[test]
fn transport_counters_parse_from_the_servers_own_metrics() {
    use std::sync::atomic::Ordering;
    let stats = std::sync::Arc::new(synod_server::transport::TransportStats::default());
    stats.frames_in.store(3, Ordering::Relaxed);
    stats.frames_out.store(4, Ordering::Relaxed);
    stats.bytes_in.store(500, Ordering::Relaxed);
    stats.bytes_out.store(600, Ordering::Relaxed);
    let metrics = synod_server::metrics::Metrics::new(stats);
    metrics.group(0).deliveries.inc_by(42);
    metrics.group(1).deliveries.inc_by(7);
    let text = metrics.render();
    assert_eq!(parse_deliveries(&text).unwrap(), 42, "{text}");
    assert_eq!(
        parse_transport(&text).unwrap(),
        Transport {
            frames_in: 3,
            frames_out: 4,
            bytes_in: 500,
            bytes_out: 600,
        },
        "{text}"
    );
}

#[test]
fn this_process_has_cpu_ticks() {
    assert!(crate::procs::cpu_ticks(std::process::id()).is_some());
    assert!(crate::procs::clock_ticks_per_second() > 0);
}

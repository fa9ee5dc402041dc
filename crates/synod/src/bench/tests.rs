use super::compare::{chart, compare_markdown, CompareDoc};
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
    };
    let doc = CompareDoc {
        machine: machine(),
        versions: vec![],
        settings: String::new(),
        skipped: vec![],
        results: vec![r("synod (zab)", 5000.0), r("zookeeper", 1000.0)],
    };
    let md = compare_markdown(&doc);
    assert!(
        md.contains("| 32 | 100% | 5.00 | 1.00 | 1.00 | – | – | – |"),
        "{md}"
    );
    assert!(chart(&doc.results).contains("<svg"));
}

//! Key → bucket, pinned to a table shared with the Python client
//! (clients/python/tests/test_routing.py reads the same file): 200 keys (ASCII, UTF-8, binary,
//! one of the maximum length) and their buckets among 1, 3 and 8. If this fails, the two
//! clients and the server disagree on where keys live.

use synod_kv::route::{bucket_of, fnv1a_64};

const TABLE: &str = include_str!("data/routing_parity.tsv");

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn buckets_match_the_shared_table() {
    let mut rows = 0;
    for line in TABLE.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 4, "{line}");
        let key = unhex(cols[0]);
        for (buckets, want) in [(1, cols[1]), (3, cols[2]), (8, cols[3])] {
            let want: u32 = want.parse().unwrap();
            assert_eq!(
                bucket_of(&key, buckets),
                want,
                "{} among {buckets}",
                cols[0]
            );
        }
        rows += 1;
    }
    assert_eq!(rows, 200);
}

#[test]
fn fnv1a_reference_values() {
    assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn the_clients_routing_uses_the_same_function() {
    let view = synod_kv_client::proto::View {
        version: 1,
        nodes: vec![],
        buckets: (0..8)
            .map(|index| synod_kv_client::proto::Bucket {
                index,
                ..Default::default()
            })
            .collect(),
    };
    let routing = synod_kv_client::Routing::new(view).unwrap();
    for line in TABLE.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(routing.bucket_of(&unhex(cols[0])).to_string(), cols[3]);
    }
}

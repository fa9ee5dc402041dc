//! SconeKV on real `synod server` processes: three nodes, three buckets (each a zab group of
//! three replicas, masters spread over the nodes), reached through the Rust client. Single-key
//! operations, transactions within and across buckets, conflicts, blind writes, a client abort,
//! a bad request refused with a clear error, and the store surviving the kill of a bucket's
//! master in the middle of cross-bucket traffic. Ports 24700–24799.

mod common;

use common::*;
use std::time::Duration;
use synod_kv_client::{Client, ClientConfig, Error, Outcome};

fn kv_section(base: u16) -> String {
    let addrs: Vec<String> = (1..=3)
        .map(|i| format!("{i} = \"127.0.0.1:{}\"", base + 40 + i))
        .collect();
    format!(
        "[kv]\nbuckets = 3\nlisten = \"127.0.0.1:{{kv}}\"\naddrs = {{ {} }}\ncommit_timeout_ms = 3000\nretain_ms = 60000",
        addrs.join(", ")
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn ready(base: u16) -> Client {
    let seeds: Vec<String> = (1..=3)
        .map(|i| format!("127.0.0.1:{}", base + 40 + i))
        .collect();
    for _ in 0..300 {
        if let Ok(c) = Client::connect_with(
            &seeds,
            ClientConfig {
                timeout: Duration::from_secs(2),
                ..ClientConfig::default()
            },
        )
        .await
        {
            if c.routing().view().buckets.iter().all(|b| b.master != 0)
                && c.put("ready", "1").await.is_ok()
            {
                return c;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the store never became ready");
}

/// A key of bucket `b` (of 3).
fn key_in(b: u32, n: usize) -> String {
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| synod_kv::route::bucket_of(k.as_bytes(), 3) == b)
        .nth(n)
        .unwrap()
}

#[test]
fn transactions_across_buckets_on_real_processes() {
    let base = 24700;
    let section = kv_section(base);
    let mut c = cluster_with(base, &[], &[&section]);
    let rt = runtime();
    rt.block_on(async {
        let kv = ready(base).await;
        // The masters of the three buckets are on three different nodes.
        let masters: std::collections::BTreeSet<u32> = kv
            .routing()
            .view()
            .buckets
            .iter()
            .map(|b| b.master)
            .collect();
        assert_eq!(
            masters.len(),
            3,
            "masters spread: {:?}",
            kv.routing().view().buckets
        );

        // Single-key operations.
        let v1 = kv.put("greeting", "hello").await.unwrap();
        assert_eq!(
            kv.get("greeting").await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(
            kv.compare_and_set("greeting", v1 - 1, "stale")
                .await
                .unwrap(),
            (false, v1)
        );
        let (done, v2) = kv.compare_and_set("greeting", v1, "again").await.unwrap();
        assert!(done && v2 == v1 + 1);
        let v3 = kv.delete("greeting").await.unwrap();
        assert_eq!(v3, v2 + 1, "a delete keeps counting versions (a tombstone)");
        assert_eq!(kv.get("greeting").await.unwrap(), None);

        // A transaction across all three buckets, read-your-writes inside it.
        let (x, y, z) = (key_in(0, 0), key_in(1, 0), key_in(2, 0));
        let mut t = kv.begin().await.unwrap();
        assert_eq!(t.get(&x).await.unwrap(), None);
        t.put(&x, "x1").await.unwrap();
        t.put(&y, "y1").await.unwrap();
        t.put_blind(&z, "z1").await.unwrap();
        assert_eq!(t.get(&x).await.unwrap().as_deref(), Some(&b"x1"[..]));
        assert_eq!(t.commit().await.unwrap(), Outcome::Committed);
        for (k, v) in [(&x, "x1"), (&y, "y1"), (&z, "z1")] {
            assert_eq!(kv.get(k).await.unwrap().as_deref(), Some(v.as_bytes()));
        }

        // Two transactions read the same versions and write: the second to commit aborts.
        let mut a = kv.begin().await.unwrap();
        let mut b = kv.begin().await.unwrap();
        for t in [&mut a, &mut b] {
            t.get(&x).await.unwrap();
            t.get(&z).await.unwrap();
        }
        a.put(&x, "from a").await.unwrap();
        b.put(&z, "from b").await.unwrap();
        b.put(&x, "from b").await.unwrap();
        assert_eq!(a.commit().await.unwrap(), Outcome::Committed);
        assert!(matches!(b.commit().await.unwrap(), Outcome::Aborted { .. }));
        assert_eq!(
            kv.get(&z).await.unwrap().as_deref(),
            Some(&b"z1"[..]),
            "nothing of b applied"
        );

        // A read-only transaction whose read changed before it committed aborts too.
        let mut r = kv.begin().await.unwrap();
        r.get(&y).await.unwrap();
        kv.put(&y, "y2").await.unwrap();
        assert!(matches!(r.commit().await.unwrap(), Outcome::Aborted { .. }));

        // A client abort before commit sends nothing and applies nothing.
        let mut t = kv.begin().await.unwrap();
        t.put(&y, "never").await.unwrap();
        t.abort().await.unwrap();
        assert_eq!(kv.get(&y).await.unwrap().as_deref(), Some(&b"y2"[..]));

        // Bad input gets a clear error.
        let too_big = vec![b'k'; 5000];
        assert!(matches!(
            kv.put(too_big, "v").await,
            Err(Error::InvalidArgument(_))
        ));
    });

    // Kill the master of bucket 0 (the coordinator of every transaction touching it) while
    // transactions across buckets run; the others take over and every transaction ends the
    // same way everywhere (checked by reading back what committed).
    let victim = rt.block_on(async { ready(base).await.routing().view().buckets[0].master });
    let committed = rt.block_on(async {
        let kv = ready(base).await;
        let (x, y) = (key_in(0, 1), key_in(1, 1));
        let writer = {
            let kv = kv.clone();
            let (x, y) = (x.clone(), y.clone());
            tokio::spawn(async move {
                let mut committed = 0u64;
                for i in 0..400u64 {
                    let Ok(mut t) = kv.begin().await else {
                        continue;
                    };
                    let ok = t.get(&x).await.is_ok() && t.get(&y).await.is_ok();
                    if ok
                        && t.put(&x, i.to_string()).await.is_ok()
                        && t.put(&y, i.to_string()).await.is_ok()
                    {
                        if let Ok(Outcome::Committed) = t.commit().await {
                            committed += 1;
                        }
                    }
                }
                committed
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.node(victim).kill9();
        let committed = writer.await.unwrap();
        // Both keys always move together: the same value, and the same version.
        let kv = ready(base).await;
        let (vx, vy) = (
            kv.get_versioned(&x).await.unwrap(),
            kv.get_versioned(&y).await.unwrap(),
        );
        assert_eq!(
            vx.value, vy.value,
            "x and y written by the same transactions"
        );
        assert_eq!(vx.version, vy.version);
        committed
    });
    assert!(committed > 0, "transactions committed around the failover");
    c.node(victim).start();
    rt.block_on(async {
        let kv = ready(base).await;
        kv.put("after-restart", "ok").await.unwrap();
    });
}

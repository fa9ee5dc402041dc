//! The client load of the rolling-upgrade test: writers that create znodes, readers that sync
//! then read an acknowledged write, and a reader of the whole tree.

use super::*;

/// What the clients saw.
#[derive(Default)]
pub(super) struct Load {
    /// Acknowledged creates: path and when the acknowledgement arrived.
    pub(super) acked: Mutex<Vec<(String, Instant)>>,
    /// Reads after a sync that did not find an acknowledged write.
    pub(super) lost_reads: Mutex<Vec<String>>,
    pub(super) reads: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) stop: AtomicBool,
}

pub(super) const SESSION_MS: i32 = 6000;
pub(super) const IO: Duration = Duration::from_secs(3);

/// Creates `/upgrade/w<w>-<n>` in a closed loop through one server, moving to the next server
/// when its connection fails; a path is never retried (an unacknowledged create may or may not
/// have taken effect).
pub(super) async fn writer(w: usize, ports: Vec<u16>, load: Arc<Load>) {
    let mut at = w % ports.len();
    let mut n = 0u64;
    while !load.stop.load(Ordering::Relaxed) {
        let addr = format!("127.0.0.1:{}", ports[at]);
        let Ok(mut s) = ZkSession::connect(&addr, SESSION_MS, None, 0, IO).await else {
            at = (at + 1) % ports.len();
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut errors = 0;
        while !load.stop.load(Ordering::Relaxed) && errors < 3 {
            let path = format!("/upgrade/w{w}-{n:06}");
            n += 1;
            match tokio::time::timeout(IO, s.create(&path, path.as_bytes(), 0)).await {
                Ok(Ok(rep)) if rep.err == 0 => {
                    load.acked.lock().unwrap().push((path, Instant::now()));
                    errors = 0;
                }
                Ok(Ok(_)) => {
                    load.failures.fetch_add(1, Ordering::Relaxed);
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    load.failures.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        at = (at + 1) % ports.len();
    }
}

/// Syncs, then reads a write acknowledged before the sync: it must be there.
pub(super) async fn reader(r: usize, ports: Vec<u16>, load: Arc<Load>) {
    let mut at = r % ports.len();
    while !load.stop.load(Ordering::Relaxed) {
        let addr = format!("127.0.0.1:{}", ports[at]);
        at = (at + 1) % ports.len();
        let Ok(mut s) = ZkSession::connect(&addr, SESSION_MS, None, 0, IO).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while !load.stop.load(Ordering::Relaxed) {
            let Some(path) = load.acked.lock().unwrap().last().map(|a| a.0.clone()) else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let read = async {
                let rep = s.sync("/upgrade").await?;
                if rep.err != 0 {
                    return Ok(None);
                }
                s.get_data(&path).await.map(Some)
            };
            match tokio::time::timeout(IO, read).await {
                Ok(Ok(Some((rep, got)))) => {
                    if rep.err == NONODE {
                        load.lost_reads
                            .lock()
                            .unwrap()
                            .push(format!("{path} at port {}", ports[at]));
                    } else if rep.err == 0 {
                        assert_eq!(got.unwrap().0, path.as_bytes());
                        load.reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(Ok(None)) => tokio::time::sleep(Duration::from_millis(50)).await,
                _ => break,
            }
        }
    }
}

/// Every znode under `/` with its data (the `/zookeeper` subtree included), as a client reads it
/// from the server at `port`: after a lost connection (a server may close its clients while its
/// group changes leader), it connects again and reads the whole tree again.
pub(super) async fn tree(port: u16) -> BTreeMap<String, Vec<u8>> {
    let mut attempt = 0;
    loop {
        match read_tree(port).await {
            Ok(t) => return t,
            Err(e) if attempt < 5 => {
                eprintln!("reading the tree at port {port}: {e:#}; reading it again");
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("reading the tree at port {port}: {e:#}"),
        }
    }
}

pub(super) async fn read_tree(port: u16) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let addr = format!("127.0.0.1:{port}");
    let mut s = ZkSession::connect(&addr, SESSION_MS, None, 0, IO).await?;
    anyhow::ensure!(s.sync("/").await?.err == 0, "sync failed");
    let mut out = BTreeMap::new();
    let mut todo = vec!["/".to_string()];
    while let Some(p) = todo.pop() {
        let (rep, got) = s.get_data(&p).await?;
        anyhow::ensure!(rep.err == 0, "get {p}: error {}", rep.err);
        out.insert(p.clone(), got.expect("data").0.to_vec());
        let (rep, kids) = s.get_children(&p).await?;
        anyhow::ensure!(rep.err == 0, "children of {p}: error {}", rep.err);
        for k in kids {
            todo.push(if p == "/" {
                format!("/{k}")
            } else {
                format!("{p}/{k}")
            });
        }
    }
    Ok(out)
}

//! One client's connection: a ZooKeeper session, or an etcd client (with the `etcd` feature).

#[cfg(not(feature = "etcd"))]
use anyhow::bail;
use anyhow::Result;
use std::time::Duration;

use super::load::key_path;
use super::Proto;
use crate::zkclient::ZkSession;

/// One client's connection: a ZooKeeper session, or an etcd client.
pub(super) enum Conn {
    Zk(ZkSession),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd_client::Client>),
}

impl Conn {
    pub(super) async fn open(proto: Proto, addr: &str, timeout: Duration) -> Result<Conn> {
        match proto {
            Proto::Zk => Ok(Conn::Zk(
                ZkSession::connect(addr, 30_000, None, 0, timeout).await?,
            )),
            #[cfg(feature = "etcd")]
            Proto::Etcd => Ok(Conn::Etcd(Box::new(
                tokio::time::timeout(timeout, etcd_client::Client::connect([addr], None))
                    .await
                    .map_err(|_| anyhow::anyhow!("connect to {addr} timed out"))??,
            ))),
            #[cfg(not(feature = "etcd"))]
            Proto::Etcd => bail!("{NO_ETCD}"),
        }
    }

    /// setData (version −1) / put.
    pub(super) async fn set(&mut self, key: &str, value: &[u8]) -> Result<bool> {
        match self {
            Conn::Zk(s) => Ok(s.set_data(key, value, -1).await?.0.err == 0),
            #[cfg(feature = "etcd")]
            Conn::Etcd(c) => {
                c.put(key, value, None).await?;
                Ok(true)
            }
        }
    }

    /// getData / get. etcd's reads are serializable: served by the member itself, as ZooKeeper
    /// and synod serve getData (etcd's default read goes through a ReadIndex round).
    pub(super) async fn get(&mut self, key: &str) -> Result<bool> {
        match self {
            Conn::Zk(s) => Ok(s.get_data(key).await?.0.err == 0),
            #[cfg(feature = "etcd")]
            Conn::Etcd(c) => {
                let o = etcd_client::GetOptions::new().with_serializable();
                c.get(key, Some(o)).await?;
                Ok(true)
            }
        }
    }

    /// Create a private key, then delete it.
    pub(super) async fn create_delete(&mut self, key: &str, value: &[u8]) -> Result<bool> {
        match self {
            Conn::Zk(s) => {
                if s.create(key, value, 0).await?.err != 0 {
                    return Ok(false);
                }
                Ok(s.delete(key, -1).await?.err == 0)
            }
            #[cfg(feature = "etcd")]
            Conn::Etcd(c) => {
                c.put(key, value, None).await?;
                c.delete(key, None).await?;
                Ok(true)
            }
        }
    }

    pub(super) async fn close(self) {
        match self {
            Conn::Zk(s) => {
                let _ = tokio::time::timeout(Duration::from_secs(1), s.close()).await;
            }
            #[cfg(feature = "etcd")]
            Conn::Etcd(_) => {}
        }
    }
}

#[cfg(not(feature = "etcd"))]
const NO_ETCD: &str = "this synod was built without etcd support: build it with \
    `cargo build --release --features etcd` (needs protoc: apt-get install protobuf-compiler), \
    or run scripts/bench-compare.sh";

/// Create the keys in etcd.
pub(super) async fn setup_etcd(servers: &[String], keys: usize, value: &[u8]) -> Result<()> {
    let mut c = Conn::open(Proto::Etcd, &servers[0], Duration::from_secs(10)).await?;
    for i in 0..keys {
        c.set(&key_path(i), value).await?;
    }
    Ok(())
}

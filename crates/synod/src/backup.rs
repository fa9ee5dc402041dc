//! `synod backup`, `synod restore` and `synod import`: a consistent backup of a running
//! cluster's ZooKeeper tree over the admin port, seeding a new cluster from it, and moving an
//! Apache ZooKeeper data directory over. The file format is synod_zk::backup; seeding is
//! [`crate::restore`]; the ZooKeeper reader is synod_zk::import.
//!
//! ```text
//! synod backup --admin 127.0.0.1:9181,127.0.0.1:9182 --out tree.synodbak
//! synod backup --admin node1:9181 --ca ca.crt --cert client-root.crt --key client-root.key --out tree.synodbak
//! synod restore --from tree.synodbak --config node1.toml     # on every node, before its first start
//! synod import --zookeeper /var/lib/zookeeper --out tree.synodbak
//! ```

use crate::restore;
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use synod_server::config::Config;
use synod_zk::backup::{self, Backup, Header};

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Admin addresses (host:port, comma-separated) of the cluster's nodes; the first that
    /// takes the backup is used. Default: the client configuration's (`synod dev` writes it),
    /// else 127.0.0.1:9181.
    #[arg(long)]
    admin: Option<String>,
    /// Where to write the backup (written to FILE.tmp, synced, then renamed).
    #[arg(long)]
    out: PathBuf,
    /// The largest backup accepted, in bytes.
    #[arg(long, default_value_t = 16 << 30)]
    max_bytes: u64,
    /// How long to wait for a node to answer.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// The cluster CA (PEM): speak HTTPS to an admin port with `[tls]` (the default there).
    #[arg(long, requires_all = ["cert", "key"])]
    ca: Option<PathBuf>,
    /// A client certificate of the cluster CA (`synod certs client`), PEM.
    #[arg(long, requires = "ca")]
    cert: Option<PathBuf>,
    /// Its private key, PEM.
    #[arg(long, requires = "ca")]
    key: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup file (from `synod backup` or `synod import`).
    #[arg(long)]
    from: PathBuf,
    /// The configuration of the node to seed (its data_dir, protocol and members).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override configuration keys, as `synod server --set`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Replace the log (and identity) the data directory already holds.
    #[arg(long)]
    force: bool,
    /// Only check the file and print what it holds.
    #[arg(long)]
    check: bool,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// ZooKeeper's dataDir (holding version-2/snapshot.*; the server must be stopped or the
    /// directory copied).
    #[arg(long)]
    zookeeper: PathBuf,
    /// ZooKeeper's dataLogDir, when its transaction logs are kept apart.
    #[arg(long)]
    zookeeper_logs: Option<PathBuf>,
    /// Write a backup file.
    #[arg(long, required_unless_present = "config")]
    out: Option<PathBuf>,
    /// Or seed this node's data directory directly (as `synod restore`).
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    #[arg(long)]
    force: bool,
}

/// Write `data` to `path` durably: a temporary file, synced, renamed, the directory synced.
fn write_durably(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(data)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot rename to {}", path.display()))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

fn describe(h: &Header, bytes: usize) -> String {
    format!(
        "source {} (cluster '{}', node {}), group {}, slot {}, zxid {:#x}, taken at {} ms, {} bytes",
        h.source, h.cluster_id, h.node, h.group, h.slot, h.zxid, h.created_ms, bytes
    )
}

/// The admin ports to ask and the TLS to ask them with: `--admin` and `--ca/--cert/--key`, else
/// the client configuration's, else 127.0.0.1:9181 in plain text.
pub(crate) fn admin_target(
    admin: Option<&str>,
    tls: (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
) -> Result<(Vec<String>, Option<Arc<rustls::ClientConfig>>)> {
    let t = crate::client_config::Target::resolve(
        admin.map(crate::client_config::split_addrs),
        |c| c.admin.clone(),
        "127.0.0.1:9181",
        tls,
    )?;
    let tls = match (&t.ca, &t.cert, &t.key) {
        (Some(ca), Some(cert), Some(key)) => Some(tls_config(ca, cert, key)?),
        _ => None,
    };
    Ok((t.addrs, tls))
}

/// TLS to the admin port: the cluster CA, and a client certificate (the admin port serves
/// backups only to clients of the cluster CA).
pub(crate) fn tls_config(ca: &Path, cert: &Path, key: &Path) -> Result<Arc<rustls::ClientConfig>> {
    client_tls(ca, Some((cert, key)))
}

/// A TLS client trusting the cluster CA `ca`, showing the client certificate `identity` (its
/// chain and key, PEM) when given.
pub(crate) fn client_tls(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("cannot read {}", ca.display()))?
    {
        let c = c.with_context(|| format!("{} holds a bad certificate", ca.display()))?;
        roots
            .add(c)
            .with_context(|| format!("{}: not a CA certificate", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let Some((cert, key)) = identity else {
        return Ok(Arc::new(builder.with_no_client_auth()));
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{} holds a bad certificate", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read a private key from {}", key.display()))?;
    let cfg = builder
        .with_client_auth_cert(chain, key)
        .context("the client certificate and key do not match")?;
    Ok(Arc::new(cfg))
}

/// Opens TLS over `s`, checking that the server's certificate names `addr`'s host.
pub(crate) fn tls_stream(
    s: TcpStream,
    addr: &str,
    cfg: &Arc<rustls::ClientConfig>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| anyhow!("{addr}: '{host}' is not a server name"))?;
    let conn =
        rustls::ClientConnection::new(cfg.clone(), name).with_context(|| format!("{addr}: TLS"))?;
    Ok(rustls::StreamOwned::new(conn, s))
}

/// One HTTP/1.1 request (`GET` or `POST`) with an empty body (over TLS when `tls` is given);
/// the response's status and body (at most `max` bytes, by its Content-Length).
pub(crate) fn http(
    method: &str,
    addr: &str,
    path: &str,
    max: u64,
    timeout: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<(u16, Bytes)> {
    let sa = addr
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {addr}"))?
        .next()
        .ok_or_else(|| anyhow!("{addr} resolves to nothing"))?;
    let s = TcpStream::connect_timeout(&sa, Duration::from_secs(5))
        .with_context(|| format!("cannot connect to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    match tls {
        None => exchange(s, method, addr, path, max),
        Some(cfg) => exchange(tls_stream(s, addr, cfg)?, method, addr, path, max),
    }
}

fn exchange<S: Read + Write>(
    mut s: S,
    method: &str,
    addr: &str,
    path: &str,
    max: u64,
) -> Result<(u16, Bytes)> {
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .and_then(|_| s.flush())
    .with_context(|| format!("{addr}: sending the request"))?;
    // Headers: at most 64 KiB.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 64 << 10 {
            bail!("{addr}: response headers longer than 64 KiB");
        }
        let n = s
            .read(&mut byte)
            .with_context(|| format!("{addr}: reading the response"))?;
        if n == 0 {
            bail!("{addr}: connection closed before the response headers ended");
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("{addr}: not an HTTP response"))?;
    let len: Option<u64> = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok());
    let Some(len) = len else {
        bail!("{addr}: the response has no Content-Length");
    };
    if len > max {
        bail!("{addr}: the response is {len} bytes, more than the {max} accepted");
    }
    let mut body = Vec::with_capacity(len.min(1 << 30) as usize);
    s.take(len)
        .read_to_end(&mut body)
        .with_context(|| format!("{addr}: reading the response"))?;
    if body.len() as u64 != len {
        bail!(
            "{addr}: the response ended after {} of {len} bytes",
            body.len()
        );
    }
    Ok((status, Bytes::from(body)))
}

pub fn run_backup(a: BackupArgs) -> Result<()> {
    let timeout = Duration::from_secs(a.timeout_s);
    let (addrs, tls) = admin_target(
        a.admin.as_deref(),
        (a.ca.clone(), a.cert.clone(), a.key.clone()),
    )?;
    let mut last = None;
    for addr in addrs.iter().map(String::as_str) {
        match http(
            "POST",
            addr,
            "/v1/backup",
            a.max_bytes,
            timeout,
            tls.as_ref(),
        ) {
            Ok((200, file)) => {
                let b = backup::decode(&file)
                    .map_err(|e| anyhow!("{addr} sent a backup that does not check: {e}"))?;
                restore::machine(&b)?;
                write_durably(&a.out, &file)?;
                println!(
                    "backup of {addr} written to {}: {}",
                    a.out.display(),
                    describe(&b.header, file.len())
                );
                return Ok(());
            }
            Ok((code, body)) => {
                let why = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
                eprintln!("{addr}: {code} {}", why.trim());
                last = Some(anyhow!("{addr}: {code} {}", why.trim()));
            }
            Err(e) => {
                let e = if tls.is_none() {
                    e.context(
                        "(an admin port with [tls] speaks HTTPS: pass --ca, --cert and --key)",
                    )
                } else {
                    e
                };
                eprintln!("{e:#}");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow!("no admin address given")))
}

fn read_backup(path: &Path) -> Result<Backup> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    backup::decode(&Bytes::from(data))
        .map_err(|e| anyhow!("{} is not a usable backup: {e}", path.display()))
}

fn load_config(path: Option<&Path>, set: &[String]) -> Result<Config> {
    Config::load(path, set)
}

fn seed(cfg: &Config, b: &Backup, force: bool) -> Result<()> {
    let (at, zxid) = restore::seed(cfg, b, force)?;
    println!(
        "node {} of cluster '{}' ({}): {} seeded at slot {}, zxid {zxid:#x}; start it with \
         `synod server --config ...`",
        cfg.node_id,
        cfg.cluster_id,
        cfg.protocol,
        cfg.data_dir.display(),
        at.slot
    );
    Ok(())
}

pub fn run_restore(a: RestoreArgs) -> Result<()> {
    let b = read_backup(&a.from)?;
    let m = restore::machine(&b)?;
    println!(
        "{}: {}; {} nodes, {} sessions",
        a.from.display(),
        describe(&b.header, b.state.len()),
        m.tree.nodes.len(),
        m.tree.sessions.len()
    );
    if a.check {
        return Ok(());
    }
    if a.config.is_none() && a.set.is_empty() {
        bail!("--config (the node to seed) is required unless --check");
    }
    let cfg = load_config(a.config.as_deref(), &a.set)?;
    seed(&cfg, &b, a.force)?;
    Ok(())
}

pub fn run_import(a: ImportArgs) -> Result<()> {
    let i = synod_zk::import::import(&a.zookeeper, a.zookeeper_logs.as_deref())
        .map_err(|e| anyhow!("{e}"))?;
    for w in &i.warnings {
        eprintln!("warning: {w}");
    }
    println!(
        "read {} and {} log file(s): {} transactions replayed ({} already in the fuzzy \
         snapshot), zxid {:#x}, {} nodes, {} sessions ({} dead sessions' ephemerals dropped)",
        i.snapshot.display(),
        i.logs.len(),
        i.replayed,
        i.failed,
        i.zxid,
        i.nodes,
        i.sessions,
        i.dead_sessions
    );
    let header = Header {
        cluster_id: String::new(),
        source: format!("zookeeper:{}", a.zookeeper.display()),
        node: 0,
        group: 0,
        slot: 1,
        tag: i.zxid as u64,
        zxid: i.zxid,
        created_ms: synod_server::now_ms(),
    };
    let file = backup::encode(&header, &i.state);
    let b = backup::decode(&file).map_err(|e| anyhow!("{e}"))?;
    restore::machine(&b)?;
    if let Some(out) = &a.out {
        write_durably(out, &file)?;
        println!("backup written to {}", out.display());
    }
    if a.config.is_some() {
        let cfg = load_config(a.config.as_deref(), &a.set)?;
        seed(&cfg, &b, a.force)?;
    }
    Ok(())
}

//! `synod cli`: a small ZooKeeper client for operators (works against synod and ZooKeeper).
//!
//! ```text
//! synod cli ls /                                  # the client configuration's cluster
//! synod cli --servers 127.0.0.1:2181 ls /
//! synod cli --servers 127.0.0.1:2281 --ca ca.crt ls /     # over TLS
//! synod cli                                       # interactive: one command per line
//! ```
//!
//! Exit status: 0 when every command succeeded, 1 when one failed (the server's error, or an
//! unknown command or bad arguments), 2 when no server could be reached.

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use clap::Args;
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use synod_zk::jute::{err, mode, op, xid, JuteWrite, Reader, Stat};

#[derive(Args, Debug)]
pub struct CliArgs {
    /// Servers, host:port (comma-separated: the first that answers is used). Default: the client
    /// configuration's (`synod dev` writes it; its TLS ports when it names a CA), else
    /// 127.0.0.1:2181.
    #[arg(long, alias = "server")]
    servers: Option<String>,
    /// The cluster CA (PEM): connect over TLS (to the servers' secure client ports).
    #[arg(long)]
    ca: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM), shown to servers that ask for one (x509 ACLs).
    #[arg(long, requires_all = ["key", "ca"])]
    cert: Option<std::path::PathBuf>,
    #[arg(long, requires = "cert")]
    key: Option<std::path::PathBuf>,
    /// Credentials sent when the session opens, as zkCli's `addauth`: SCHEME:CREDENTIAL, e.g.
    /// `digest:alice:secret` (repeatable).
    #[arg(long, value_name = "SCHEME:CREDENTIAL")]
    auth: Vec<String>,
    /// Session timeout in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: i32,
    /// A command to run instead of the interactive prompt: ls, get, set, create, delete, stat,
    /// watch (see `help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// The connection: plain TCP or TLS.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

pub(crate) struct Client {
    s: Box<dyn Stream>,
    xid: i32,
}

fn error_name(code: i32) -> &'static str {
    match code {
        err::NO_NODE => "no such node",
        err::NODE_EXISTS => "node already exists",
        err::NOT_EMPTY => "node has children",
        err::BAD_VERSION => "version mismatch",
        err::NO_AUTH => "not authorised",
        err::BAD_ARGUMENTS => "bad arguments (invalid path?)",
        err::NO_CHILDREN_FOR_EPHEMERALS => "ephemeral nodes cannot have children",
        err::INVALID_ACL => "invalid ACL",
        err::SESSION_EXPIRED => "session expired",
        err::UNIMPLEMENTED => "operation not supported by the server",
        _ => "error",
    }
}

impl Client {
    fn connect(
        servers: &[String],
        timeout_ms: i32,
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Client> {
        let mut last = None;
        for addr in servers {
            let addr = addr.as_str();
            match TcpStream::connect(addr) {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_secs(30)))?;
                    let s: Box<dyn Stream> = match tls {
                        Some(cfg) => Box::new(crate::backup::tls_stream(s, addr, cfg)?),
                        None => Box::new(s),
                    };
                    let mut c = Client { s, xid: 0 };
                    let mut b = BytesMut::new();
                    b.int(0);
                    b.long(0);
                    b.int(timeout_ms);
                    b.long(0);
                    b.buffer(&[0u8; 16]);
                    b.boolean(false);
                    if let Err(e) = c.send(&b) {
                        last = Some(format!("{addr}: {e:#}"));
                        continue;
                    }
                    let resp = match c.recv() {
                        Ok(r) => r,
                        Err(e) => {
                            last = Some(format!("{addr}: {e:#}"));
                            continue;
                        }
                    };
                    let mut r = Reader::new(resp);
                    let _version = r.int()?;
                    let timeout = r.int()?;
                    let session = r.long()?;
                    if timeout <= 0 {
                        bail!("{addr} refused the session");
                    }
                    eprintln!("connected to {addr}, session {session:#x}, timeout {timeout} ms");
                    return Ok(c);
                }
                Err(e) => last = Some(format!("{addr}: {e}")),
            }
        }
        bail!(
            "no server answered ({}); start one with `synod dev`, or name servers with --servers \
             (and --ca for TLS ports)",
            last.unwrap_or_default()
        )
    }

    fn send(&mut self, body: &[u8]) -> Result<()> {
        let mut f = Vec::with_capacity(body.len() + 4);
        f.extend_from_slice(&(body.len() as i32).to_be_bytes());
        f.extend_from_slice(body);
        self.s.write_all(&f)?;
        self.s.flush()?;
        Ok(())
    }

    fn recv(&mut self) -> Result<Bytes> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).context("connection closed")?;
        if matches!(len, [0x15 | 0x16, 0x03, _, _]) {
            bail!("the server answered in TLS: this is a secure port, pass --ca (the cluster CA)");
        }
        let n = i32::from_be_bytes(len);
        if !(0..=64 << 20).contains(&n) {
            bail!("bad frame length {n}");
        }
        let mut body = vec![0u8; n as usize];
        self.s.read_exact(&mut body)?;
        Ok(Bytes::from(body))
    }

    /// Send a request and wait for its reply; watch events received meanwhile are printed.
    fn call(&mut self, code: i32, body: &[u8]) -> Result<(i32, Reader)> {
        self.xid += 1;
        let mut b = BytesMut::new();
        b.int(self.xid);
        b.int(code);
        b.extend_from_slice(body);
        self.send(&b)?;
        loop {
            let mut r = Reader::new(self.recv()?);
            let xid = r.int()?;
            let _zxid = r.long()?;
            let e = r.int()?;
            if xid == -1 {
                print_event(&mut r)?;
                continue;
            }
            if xid == self.xid {
                return Ok((e, r));
            }
        }
    }
}

impl Client {
    /// zkCli's `addauth SCHEME CREDENTIAL`: the AUTH packet (xid -4); its reply says whether the
    /// server took it.
    fn add_auth(&mut self, scheme: &str, credential: &str) -> Result<()> {
        let mut b = BytesMut::new();
        b.int(xid::AUTH);
        b.int(op::AUTH);
        b.int(0);
        b.string(scheme);
        b.buffer(credential.as_bytes());
        self.send(&b)?;
        loop {
            let mut r = Reader::new(self.recv()?);
            let x = r.int()?;
            let _zxid = r.long()?;
            let e = r.int()?;
            if x == xid::NOTIFICATION {
                print_event(&mut r)?;
                continue;
            }
            if x == xid::AUTH {
                if e == err::AUTH_FAILED {
                    bail!("authentication failed ({scheme}); the server closes the session");
                }
                return check(e);
            }
        }
    }

    /// The children of `path`, sorted (for tab completion; errors give none).
    pub(crate) fn children(&mut self, path: &str) -> Vec<String> {
        let Ok((e, mut r)) = self.call(op::GET_CHILDREN, &path_watch(path, false)) else {
            return Vec::new();
        };
        if e != err::OK {
            return Vec::new();
        }
        let mut kids = r.strings().unwrap_or_default();
        kids.sort();
        kids
    }
}

fn print_event(r: &mut Reader) -> Result<()> {
    let ty = r.int()?;
    let _state = r.int()?;
    let path = r.string()?;
    let name = match ty {
        1 => "NodeCreated",
        2 => "NodeDeleted",
        3 => "NodeDataChanged",
        4 => "NodeChildrenChanged",
        _ => "Event",
    };
    println!("WATCHER: {name} {path}");
    Ok(())
}

fn print_stat(s: &Stat) {
    println!("cZxid = {:#x}", s.czxid);
    println!("ctime = {}", s.ctime);
    println!("mZxid = {:#x}", s.mzxid);
    println!("mtime = {}", s.mtime);
    println!("pZxid = {:#x}", s.pzxid);
    println!("cversion = {}", s.cversion);
    println!("dataVersion = {}", s.version);
    println!("aclVersion = {}", s.aversion);
    println!("ephemeralOwner = {:#x}", s.ephemeral_owner);
    println!("dataLength = {}", s.data_length);
    println!("numChildren = {}", s.num_children);
}

fn path_watch(p: &str, watch: bool) -> BytesMut {
    let mut b = BytesMut::new();
    b.string(p);
    b.boolean(watch);
    b
}

pub(crate) const HELP: &str = "commands:
  ls PATH                      list children
  get PATH                     print data
  stat PATH                    print the Stat
  set PATH DATA [VERSION]      set data
  create [-e] [-s] PATH [DATA] create (ephemeral, sequential)
  delete PATH [VERSION]        delete
  watch PATH                   wait for the next change of PATH's data or children
  addauth SCHEME CREDENTIAL    add credentials to the session (addauth digest alice:secret)
  quit";

pub(crate) fn run_command(c: &mut Client, words: &[String]) -> Result<bool> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        [] => {}
        ["help"] => println!("{HELP}"),
        ["quit"] | ["exit"] => return Ok(false),
        ["addauth", scheme, credential] => c.add_auth(scheme, credential)?,
        ["ls", p] => {
            let (e, mut r) = c.call(op::GET_CHILDREN, &path_watch(p, false))?;
            check(e)?;
            let mut kids = r.strings()?;
            kids.sort();
            println!("[{}]", kids.join(", "));
        }
        ["get", p] => {
            let (e, mut r) = c.call(op::GET_DATA, &path_watch(p, false))?;
            check(e)?;
            println!("{}", String::from_utf8_lossy(&r.buffer()?));
        }
        ["stat", p] => {
            let (e, mut r) = c.call(op::EXISTS, &path_watch(p, false))?;
            check(e)?;
            print_stat(&Stat::read(&mut r)?);
        }
        ["set", p, data, rest @ ..] => {
            let version: i32 = rest.first().map_or(Ok(-1), |v| v.parse())?;
            let mut b = BytesMut::new();
            b.string(p);
            b.buffer(data.as_bytes());
            b.int(version);
            let (e, _) = c.call(op::SET_DATA, &b)?;
            check(e)?;
        }
        ["create", rest @ ..] => {
            let flags: Vec<&str> = rest
                .iter()
                .copied()
                .filter(|a| a.starts_with('-'))
                .collect();
            let args: Vec<&str> = rest
                .iter()
                .copied()
                .filter(|a| !a.starts_with('-'))
                .collect();
            let (Some(p), data) = (args.first(), args.get(1).copied().unwrap_or("")) else {
                bail!("usage: create [-e] [-s] PATH [DATA]");
            };
            let m = match (flags.contains(&"-e"), flags.contains(&"-s")) {
                (false, false) => mode::PERSISTENT,
                (true, false) => mode::EPHEMERAL,
                (false, true) => mode::PERSISTENT_SEQUENTIAL,
                (true, true) => mode::EPHEMERAL_SEQUENTIAL,
            };
            let mut b = BytesMut::new();
            b.string(p);
            b.buffer(data.as_bytes());
            b.int(1);
            b.int(31);
            b.string("world");
            b.string("anyone");
            b.int(m);
            let (e, mut r) = c.call(op::CREATE, &b)?;
            check(e)?;
            println!("Created {}", r.string()?);
        }
        ["delete", p, rest @ ..] => {
            let version: i32 = rest.first().map_or(Ok(-1), |v| v.parse())?;
            let mut b = BytesMut::new();
            b.string(p);
            b.int(version);
            let (e, _) = c.call(op::DELETE, &b)?;
            check(e)?;
        }
        ["watch", p] => {
            let (e, _) = c.call(op::EXISTS, &path_watch(p, true))?;
            if e != err::OK && e != err::NO_NODE {
                check(e)?;
            }
            // A child watch too, when the node exists.
            let _ = c.call(op::GET_CHILDREN, &path_watch(p, true))?;
            println!("watching {p}; waiting for a change ...");
            let mut r = Reader::new(c.recv()?);
            let xid = r.int()?;
            let _ = r.long()?;
            let _ = r.int()?;
            if xid == -1 {
                print_event(&mut r)?;
            }
        }
        [cmd, ..] => bail!("{cmd}: unknown command or wrong arguments; try help\n{HELP}"),
    }
    Ok(true)
}

fn check(e: i32) -> Result<()> {
    if e == err::OK {
        Ok(())
    } else {
        bail!("{} ({e})", error_name(e))
    }
}

/// Where to connect: --servers (TLS with --ca), else the client configuration (its TLS ports
/// when it names a CA), else 127.0.0.1:2181.
fn target(args: &CliArgs) -> Result<(Vec<String>, Option<std::sync::Arc<rustls::ClientConfig>>)> {
    use crate::client_config::{split_addrs, ClientConfig};
    let (addrs, ca, identity) = match (&args.servers, ClientConfig::load()?) {
        (Some(s), _) => (
            split_addrs(s),
            args.ca.clone(),
            args.cert.clone().zip(args.key.clone()),
        ),
        (None, Some(cfg)) if cfg.ca.is_some() && !cfg.zookeeper_tls.is_empty() => {
            let (ca, cert, key) = ClientConfig::tls_files(
                Some(&cfg),
                args.ca.clone(),
                args.cert.clone(),
                args.key.clone(),
            );
            (cfg.zookeeper_tls.clone(), ca, cert.zip(key))
        }
        (None, Some(cfg)) if !cfg.zookeeper.is_empty() => (
            cfg.zookeeper.clone(),
            args.ca.clone(),
            args.cert.clone().zip(args.key.clone()),
        ),
        (None, _) => (
            vec!["127.0.0.1:2181".to_string()],
            args.ca.clone(),
            args.cert.clone().zip(args.key.clone()),
        ),
    };
    if addrs.is_empty() {
        bail!("--servers: no address");
    }
    let tls = match &ca {
        Some(ca) => Some(crate::backup::client_tls(
            ca,
            identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
        )?),
        None => None,
    };
    Ok((addrs, tls))
}

pub fn run(args: CliArgs) -> Result<i32> {
    let (addrs, tls) = target(&args)?;
    let mut c = match Client::connect(&addrs, args.timeout_ms, tls.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("synod cli: {e:#}");
            return Ok(2);
        }
    };
    for a in &args.auth {
        let Some((scheme, credential)) = a.split_once(':') else {
            bail!("--auth {a}: expected SCHEME:CREDENTIAL (digest:alice:secret)");
        };
        if let Err(e) = c.add_auth(scheme, credential) {
            eprintln!("synod cli: {e:#}");
            return Ok(1);
        }
    }
    if !args.command.is_empty() {
        let code = match run_command(&mut c, &args.command) {
            Ok(_) => 0,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        };
        let _ = c.call(op::CLOSE_SESSION, &[]);
        return Ok(code);
    }
    let stdin = std::io::stdin();
    if std::io::IsTerminal::is_terminal(&stdin) {
        return crate::cli_shell::interactive(c);
    }
    let mut code = 0;
    print!("synod> ");
    std::io::stdout().flush()?;
    for line in stdin.lock().lines() {
        let words: Vec<String> = line?.split_whitespace().map(String::from).collect();
        match run_command(&mut c, &words) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                println!("{e}");
                code = 1;
            }
        }
        print!("synod> ");
        std::io::stdout().flush()?;
    }
    c.close();
    Ok(code)
}

impl Client {
    pub(crate) fn close(&mut self) {
        let _ = self.call(op::CLOSE_SESSION, &[]);
    }
}

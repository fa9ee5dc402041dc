//! `synod cli`: a small ZooKeeper client for operators (works against synod and ZooKeeper).
//!
//! ```text
//! synod cli --server 127.0.0.1:2181 ls /
//! synod cli --server 127.0.0.1:2181          # interactive: one command per line
//! ```

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use clap::Args;
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use synod_zk::jute::{err, mode, op, JuteWrite, Reader, Stat};

#[derive(Args, Debug)]
pub struct CliArgs {
    /// host:port of a server (comma-separated: the first that answers is used).
    #[arg(long, default_value = "127.0.0.1:2181")]
    server: String,
    /// Session timeout in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: i32,
    /// A command to run instead of the interactive prompt: ls, get, set, create, delete, stat,
    /// watch (see `help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

struct Client {
    s: TcpStream,
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
    fn connect(servers: &str, timeout_ms: i32) -> Result<Client> {
        let mut last = None;
        for addr in servers.split(',') {
            match TcpStream::connect(addr.trim()) {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_secs(30)))?;
                    let mut c = Client { s, xid: 0 };
                    let mut b = BytesMut::new();
                    b.int(0);
                    b.long(0);
                    b.int(timeout_ms);
                    b.long(0);
                    b.buffer(&[0u8; 16]);
                    b.boolean(false);
                    c.send(&b)?;
                    let resp = c.recv()?;
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
        bail!("no server answered ({})", last.unwrap_or_default())
    }

    fn send(&mut self, body: &[u8]) -> Result<()> {
        let mut f = Vec::with_capacity(body.len() + 4);
        f.extend_from_slice(&(body.len() as i32).to_be_bytes());
        f.extend_from_slice(body);
        self.s.write_all(&f)?;
        Ok(())
    }

    fn recv(&mut self) -> Result<Bytes> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).context("connection closed")?;
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

const HELP: &str = "commands:
  ls PATH                      list children
  get PATH                     print data
  stat PATH                    print the Stat
  set PATH DATA [VERSION]      set data
  create [-e] [-s] PATH [DATA] create (ephemeral, sequential)
  delete PATH [VERSION]        delete
  watch PATH                   wait for the next change of PATH's data or children
  quit";

fn run_command(c: &mut Client, words: &[String]) -> Result<bool> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        [] => {}
        ["help"] => println!("{HELP}"),
        ["quit"] | ["exit"] => return Ok(false),
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
        _ => println!("unknown command; try help"),
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

pub fn run(args: CliArgs) -> Result<i32> {
    let mut c = Client::connect(&args.server, args.timeout_ms)?;
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
    print!("synod> ");
    std::io::stdout().flush()?;
    for line in stdin.lock().lines() {
        let words: Vec<String> = line?.split_whitespace().map(String::from).collect();
        match run_command(&mut c, &words) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => println!("{e}"),
        }
        print!("synod> ");
        std::io::stdout().flush()?;
    }
    let _ = c.call(op::CLOSE_SESSION, &[]);
    Ok(0)
}

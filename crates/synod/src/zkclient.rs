//! A small asynchronous ZooKeeper client for the load generator and the chaos harness.
//!
//! One request is outstanding at a time per session (closed loop, as a Jepsen or YCSB client
//! behaves); replies are matched by xid and watch notifications and ping replies are skipped.
//! The client speaks the real wire protocol, so the same code drives synod and Apache ZooKeeper.

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, Bytes, BytesMut};
use std::time::Duration;
use synod_zk::jute::{op, JuteWrite, Reader, Stat};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest reply frame the client accepts (ZooKeeper's jute.maxbuffer default is 1 MiB,
/// a getChildren of a large directory can exceed it a little).
const MAX_FRAME: usize = 16 << 20;

/// Credentials of an established session, to reattach it through another server.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionId {
    pub id: i64,
    pub passwd: [u8; 16],
}

/// The header of a reply and its body.
pub struct Reply {
    pub zxid: i64,
    pub err: i32,
    pub body: Reader,
}

/// One ZooKeeper session over one TCP connection.
pub struct ZkSession {
    stream: TcpStream,
    rbuf: BytesMut,
    xid: i32,
    pub session: SessionId,
    /// The highest zxid seen in any reply (sent on reattachment, as real clients do).
    pub last_zxid: i64,
}

impl ZkSession {
    /// Open a new session (or, with `resume`, reattach an existing one) at `addr`.
    pub async fn connect(
        addr: &str,
        timeout_ms: i32,
        resume: Option<SessionId>,
        last_zxid: i64,
        io_timeout: Duration,
    ) -> Result<ZkSession> {
        let stream = tokio::time::timeout(io_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connect to {addr} timed out"))?
            .with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true)?;
        let mut s = ZkSession {
            stream,
            rbuf: BytesMut::with_capacity(4096),
            xid: 0,
            session: SessionId::default(),
            last_zxid,
        };
        let mut b = BytesMut::with_capacity(64);
        b.int(0); // protocol version
        b.long(last_zxid);
        b.int(timeout_ms);
        match resume {
            Some(r) => {
                b.long(r.id);
                b.buffer(&r.passwd);
            }
            None => {
                b.long(0);
                b.buffer(&[0u8; 16]);
            }
        }
        b.boolean(false);
        let reply = tokio::time::timeout(io_timeout, async {
            s.send(&b).await?;
            s.recv().await
        })
        .await
        .map_err(|_| anyhow!("session handshake with {addr} timed out"))??;
        let mut r = Reader::new(reply);
        let _version = r.int()?;
        let timeout = r.int()?;
        let id = r.long()?;
        let pw = r.buffer()?;
        if timeout <= 0 {
            bail!("{addr} refused the session (expired or unknown)");
        }
        let mut passwd = [0u8; 16];
        let n = pw.len().min(16);
        passwd[..n].copy_from_slice(&pw[..n]);
        s.session = SessionId { id, passwd };
        Ok(s)
    }

    async fn send(&mut self, body: &[u8]) -> Result<()> {
        let mut f = Vec::with_capacity(body.len() + 4);
        f.extend_from_slice(&(body.len() as u32).to_be_bytes());
        f.extend_from_slice(body);
        self.stream.write_all(&f).await?;
        Ok(())
    }

    async fn recv(&mut self) -> Result<Bytes> {
        loop {
            if self.rbuf.len() >= 4 {
                let n = u32::from_be_bytes(self.rbuf[..4].try_into().unwrap()) as usize;
                if n > MAX_FRAME {
                    bail!("reply frame of {n} bytes exceeds the {MAX_FRAME}-byte limit");
                }
                if self.rbuf.len() >= 4 + n {
                    self.rbuf.advance(4);
                    return Ok(self.rbuf.split_to(n).freeze());
                }
                self.rbuf.reserve(4 + n - self.rbuf.len());
            }
            let got = self.stream.read_buf(&mut self.rbuf).await?;
            if got == 0 {
                bail!("connection closed by the server");
            }
        }
    }

    /// Send a request and wait for its reply (no timeout: wrap the call in one).
    pub async fn call(&mut self, code: i32, body: &[u8]) -> Result<Reply> {
        self.xid = self.xid.wrapping_add(1).max(1);
        let mut b = BytesMut::with_capacity(body.len() + 8);
        b.int(self.xid);
        b.int(code);
        b.extend_from_slice(body);
        self.send(&b).await?;
        loop {
            let mut r = Reader::new(self.recv().await?);
            let xid = r.int()?;
            let zxid = r.long()?;
            let err = r.int()?;
            if xid == -1 || xid == -2 {
                continue; // a watch event or a ping reply
            }
            if xid != self.xid {
                bail!("reply xid {xid} does not match request xid {}", self.xid);
            }
            if zxid > self.last_zxid {
                self.last_zxid = zxid;
            }
            return Ok(Reply { zxid, err, body: r });
        }
    }

    pub async fn get_data(&mut self, path: &str) -> Result<(Reply, Option<(Bytes, Stat)>)> {
        let mut b = BytesMut::with_capacity(path.len() + 8);
        b.string(path);
        b.boolean(false);
        let mut rep = self.call(op::GET_DATA, &b).await?;
        if rep.err != 0 {
            return Ok((rep, None));
        }
        let data = rep.body.buffer()?;
        let stat = Stat::read(&mut rep.body)?;
        Ok((rep, Some((data, stat))))
    }

    pub async fn set_data(
        &mut self,
        path: &str,
        data: &[u8],
        version: i32,
    ) -> Result<(Reply, Option<Stat>)> {
        let mut b = BytesMut::with_capacity(path.len() + data.len() + 16);
        b.string(path);
        b.buffer(data);
        b.int(version);
        let mut rep = self.call(op::SET_DATA, &b).await?;
        if rep.err != 0 {
            return Ok((rep, None));
        }
        let stat = Stat::read(&mut rep.body)?;
        Ok((rep, Some(stat)))
    }

    /// create with the open ACL (world:anyone, all permissions).
    pub async fn create(&mut self, path: &str, data: &[u8], mode: i32) -> Result<Reply> {
        let mut b = BytesMut::with_capacity(path.len() + data.len() + 48);
        b.string(path);
        b.buffer(data);
        b.int(1); // one ACL
        b.int(synod_zk::jute::perms::ALL);
        b.string("world");
        b.string("anyone");
        b.int(mode);
        self.call(op::CREATE, &b).await
    }

    pub async fn delete(&mut self, path: &str, version: i32) -> Result<Reply> {
        let mut b = BytesMut::with_capacity(path.len() + 8);
        b.string(path);
        b.int(version);
        self.call(op::DELETE, &b).await
    }

    /// `sync`: the server catches up with the leader before answering.
    pub async fn sync(&mut self, path: &str) -> Result<Reply> {
        let mut b = BytesMut::with_capacity(path.len() + 4);
        b.string(path);
        self.call(op::SYNC, &b).await
    }

    pub async fn get_children(&mut self, path: &str) -> Result<(Reply, Vec<String>)> {
        let mut b = BytesMut::with_capacity(path.len() + 8);
        b.string(path);
        b.boolean(false);
        let mut rep = self.call(op::GET_CHILDREN, &b).await?;
        if rep.err != 0 {
            return Ok((rep, Vec::new()));
        }
        let kids = rep.body.strings()?;
        Ok((rep, kids))
    }

    /// closeSession: the server removes the session's ephemerals.
    pub async fn close(mut self) -> Result<()> {
        self.call(op::CLOSE_SESSION, &[]).await?;
        Ok(())
    }
}

//! A small ZooKeeper client for the hostile-input test, and the well-behaved probes that keep
//! measuring the servers while they are attacked.

use super::*;

// ------------------------------------------------------------------ a small ZooKeeper client

pub(super) struct Zk {
    pub(super) s: TcpStream,
    pub(super) xid: i32,
}

pub(super) fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(body.len() + 4);
    f.extend_from_slice(&(body.len() as i32).to_be_bytes());
    f.extend_from_slice(body);
    f
}

pub(super) fn connect_request(timeout_ms: i32) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.int(0);
    b.long(0);
    b.int(timeout_ms);
    b.long(0);
    b.buffer(&[0u8; 16]);
    b.boolean(false);
    frame(&b)
}

impl Zk {
    pub(super) fn connect(port: u16) -> std::io::Result<Zk> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.set_nodelay(true)?;
        let mut z = Zk { s, xid: 0 };
        z.s.write_all(&connect_request(SESSION_TIMEOUT_MS))?;
        let mut r = Reader::new(z.recv()?);
        let bad = || std::io::Error::other("malformed connect response");
        let _version = r.int().map_err(|_| bad())?;
        let timeout = r.int().map_err(|_| bad())?;
        if timeout <= 0 {
            return Err(std::io::Error::other("session refused"));
        }
        Ok(z)
    }

    pub(super) fn recv(&mut self) -> std::io::Result<Bytes> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        if !(0..=16 << 20).contains(&n) {
            return Err(std::io::Error::other(format!("bad frame length {n}")));
        }
        let mut body = vec![0u8; n as usize];
        self.s.read_exact(&mut body)?;
        Ok(Bytes::from(body))
    }

    /// Send a request and wait for its reply (skipping watch events): (error code, body).
    pub(super) fn call(&mut self, code: i32, body: &[u8]) -> std::io::Result<(i32, Reader)> {
        self.xid += 1;
        let mut b = BytesMut::new();
        b.int(self.xid);
        b.int(code);
        b.extend_from_slice(body);
        self.s.write_all(&frame(&b))?;
        loop {
            let mut r = Reader::new(self.recv()?);
            let bad = || std::io::Error::other("malformed reply header");
            let xid = r.int().map_err(|_| bad())?;
            let _zxid = r.long().map_err(|_| bad())?;
            let e = r.int().map_err(|_| bad())?;
            if xid == self.xid {
                return Ok((e, r));
            }
        }
    }

    pub(super) fn create(&mut self, path: &str, data: &[u8]) -> std::io::Result<i32> {
        Ok(self.call(op::CREATE, &create_body(path, data))?.0)
    }

    pub(super) fn set(&mut self, path: &str, data: &[u8]) -> std::io::Result<i32> {
        let mut b = BytesMut::new();
        b.string(path);
        b.buffer(data);
        b.int(-1);
        Ok(self.call(op::SET_DATA, &b)?.0)
    }

    pub(super) fn get(&mut self, path: &str) -> std::io::Result<Result<Bytes, i32>> {
        let (e, mut r) = self.call(op::GET_DATA, &path_watch(path, false))?;
        if e != 0 {
            return Ok(Err(e));
        }
        Ok(Ok(r
            .buffer()
            .map_err(|_| std::io::Error::other("bad getData reply"))?))
    }
}

pub(super) fn create_body(path: &str, data: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.string(path);
    b.buffer(data);
    b.int(1);
    b.int(31);
    b.string("world");
    b.string("anyone");
    b.int(mode::PERSISTENT);
    b
}

pub(super) fn path_watch(path: &str, watch: bool) -> BytesMut {
    let mut b = BytesMut::new();
    b.string(path);
    b.boolean(watch);
    b
}

// ------------------------------------------------------------------ the well-behaved client

#[derive(Default)]
pub(super) struct ProbeStats {
    pub(super) ops: AtomicU64,
    pub(super) max_latency_us: AtomicU64,
    pub(super) failures: Mutex<Vec<String>>,
}

/// On every node, a client writes its own znode and reads it back, over and over, checking the
/// value and timing every request.
pub(super) fn start_probes(
    ports: Vec<u16>,
    stop: Arc<AtomicBool>,
    stats: Arc<ProbeStats>,
) -> Vec<thread::JoinHandle<()>> {
    ports
        .into_iter()
        .enumerate()
        .map(|(i, port)| {
            let stop = stop.clone();
            let stats = stats.clone();
            thread::spawn(move || {
                let path = format!("/probe{i}");
                let mut zk = Zk::connect(port).expect("probe connects");
                let e = zk.create(&path, b"0").expect("probe create");
                assert!(e == 0 || e == -110, "probe create: {e}");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let value = format!("{n}");
                    let t = Instant::now();
                    let outcome = zk.set(&path, value.as_bytes()).and_then(|e| {
                        if e != 0 {
                            return Err(std::io::Error::other(format!("setData error {e}")));
                        }
                        match zk.get(&path)? {
                            Ok(v) if v == value.as_bytes() => Ok(()),
                            other => Err(std::io::Error::other(format!(
                                "read {other:?}, expected {value}"
                            ))),
                        }
                    });
                    let us = t.elapsed().as_micros() as u64;
                    stats.max_latency_us.fetch_max(us, Ordering::Relaxed);
                    stats.ops.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = outcome {
                        stats
                            .failures
                            .lock()
                            .unwrap()
                            .push(format!("node on port {port}: {e}"));
                        // Carry on with a fresh session so that one failure does not hide others.
                        thread::sleep(Duration::from_millis(200));
                        if let Ok(z) = Zk::connect(port) {
                            zk = z;
                        }
                    }
                    thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect()
}

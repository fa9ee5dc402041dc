//! The attacks of the hostile-input test: mutated and random frames on the client, peer and
//! admin ports, SASL junk, stalled and idle connections.

use super::*;

// ------------------------------------------------------------------ attacks

/// Valid request bodies, to be mutated.
pub(super) fn request_corpus() -> Vec<(i32, Vec<u8>)> {
    let mut v = vec![
        (op::CREATE, create_body("/fuzz/a", b"data").to_vec()),
        (op::EXISTS, path_watch("/probe0", true).to_vec()),
        (op::GET_DATA, path_watch("/big", true).to_vec()),
        (op::GET_CHILDREN2, path_watch("/", true).to_vec()),
        (op::PING, Vec::new()),
    ];
    let mut set = BytesMut::new();
    set.string("/fuzz");
    set.buffer(b"v");
    set.int(-1);
    v.push((op::SET_DATA, set.to_vec()));
    let mut w = BytesMut::new();
    w.long(0);
    for _ in 0..5 {
        w.strings(&["/a".into(), "/fuzz".into()]);
    }
    v.push((op::SET_WATCHES2, w.to_vec()));
    let mut auth = BytesMut::new();
    auth.int(0);
    auth.string("digest");
    auth.buffer(b"user:pw");
    v.push((op::AUTH, auth.to_vec()));
    v.push((op::SASL, sasl_body(b"")));
    v.push((
        op::SASL,
        sasl_body(b"username=\"bob\",nonce=\"x\",nc=00000001"),
    ));
    let mut m = BytesMut::new();
    m.int(op::CREATE);
    m.boolean(false);
    m.int(-1);
    m.extend_from_slice(&create_body("/fuzz/m", b""));
    m.int(op::DELETE);
    m.boolean(false);
    m.int(-1);
    m.string("/fuzz/m");
    m.int(-1);
    m.int(-1);
    m.boolean(true);
    m.int(-1);
    v.push((op::MULTI, m.to_vec()));
    v
}

/// A GetSASLRequest body: the token.
pub(super) fn sasl_body(token: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.buffer(token);
    b.to_vec()
}

/// bob's DIGEST-MD5 response to a challenge (the cluster has the SASL user bob/bobsecret).
pub(super) fn sasl_response(challenge: &[u8]) -> Vec<u8> {
    use synod_zk::sasl::{parse_directives, Secret, DIGEST_URI, REALM};
    let d = parse_directives(challenge).expect("a well-formed challenge");
    let nonce = d
        .iter()
        .find(|(n, _)| n == "nonce")
        .map(|(_, v)| v.clone())
        .expect("a nonce");
    let secret = Secret {
        username: b"bob",
        realm: REALM.as_bytes(),
        password: b"bobsecret",
        nonce: &nonce,
        cnonce: b"hostile",
        nc: b"00000001",
        authzid: None,
    };
    let response = secret.digest(format!("AUTHENTICATE:{DIGEST_URI}").as_bytes());
    format!(
        "charset=utf-8,username=\"bob\",realm=\"{REALM}\",nonce=\"{}\",nc=00000001,cnonce=\"hostile\",digest-uri=\"{DIGEST_URI}\",qop=auth,response={response}",
        String::from_utf8_lossy(&nonce)
    )
    .into_bytes()
}

/// SASL garbage on a session: a malformed request, malformed, mutated or oversized tokens
/// after the challenge, and steps past the end of a successful exchange. Each must end with
/// AUTHFAILED and the connection closed, within three steps; a correct exchange must succeed.
pub(super) fn sasl_attack(rng: &mut SmallRng, port: u16) {
    let Ok(mut z) = Zk::connect(port) else {
        return;
    };
    const AUTH_FAILED: i32 = -115;
    let kind = rng.gen_range(0..5);
    if kind == 4 {
        // Not a GetSASLRequest: a buffer length past the end.
        let mut b = BytesMut::new();
        b.int(1 << 20);
        b.extend_from_slice(b"abc");
        let (e, _) = z.call(op::SASL, &b).expect("an answer");
        assert_eq!(e, AUTH_FAILED, "malformed SASL request");
        assert!(closed_within(&z.s, Duration::from_secs(3)));
        return;
    }
    let (e, mut r) = z.call(op::SASL, &sasl_body(b"")).expect("a challenge");
    assert_eq!(e, 0, "SASL challenge");
    let challenge = r.buffer().expect("a challenge token");
    let good = sasl_response(&challenge);
    let mut token = match kind {
        0 => random_bytes(rng, 600),
        1 => vec![b'a'; rng.gen_range(4097..200_000)],
        2 => mutate(rng, &good),
        _ => good.clone(),
    };
    for step in 0..3 {
        let Ok((e, _)) = z.call(op::SASL, &sasl_body(&token)) else {
            panic!("no answer to SASL step {step} (kind {kind})");
        };
        if e == AUTH_FAILED {
            assert!(
                closed_within(&z.s, Duration::from_secs(3)),
                "a failed SASL exchange must close the connection"
            );
            return;
        }
        assert_eq!(e, 0, "SASL step {step} (kind {kind})");
        assert!(
            kind >= 2 && step == 0,
            "only a response that means what bob's does may succeed (kind {kind}, step {step})"
        );
        token = random_bytes(rng, 100);
    }
    panic!("three SASL steps without an end (kind {kind})");
}

pub(super) fn mutate(rng: &mut SmallRng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..4) {
        match rng.gen_range(0..5) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let n = rng.gen_range(0..=v.len());
                v.truncate(n);
            }
            2 if v.len() >= 4 => {
                let i = rng.gen_range(0..v.len() - 3);
                let forged: u32 =
                    [u32::MAX, i32::MAX as u32, 1 << 20, 1 << 24, rng.gen()][rng.gen_range(0..5)];
                v[i..i + 4].copy_from_slice(&forged.to_be_bytes());
            }
            3 => {
                let i = rng.gen_range(0..=v.len());
                let junk: Vec<u8> = (0..rng.gen_range(1..32)).map(|_| rng.gen()).collect();
                v.splice(i..i, junk);
            }
            _ => {}
        }
    }
    v
}

pub(super) fn random_bytes(rng: &mut SmallRng, max: usize) -> Vec<u8> {
    (0..rng.gen_range(0..max)).map(|_| rng.gen()).collect()
}

/// Open, send, linger briefly, close. Errors (the server closing on us) are expected.
pub(super) fn send_and_close(port: u16, data: &[u8], linger: Duration) {
    if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = s.write_all(data);
        if !linger.is_zero() {
            let _ = s.set_read_timeout(Some(linger));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
        }
    }
}

/// One hostile client-port connection: garbage, a random frame, or a valid session followed
/// by random and mutated requests with random opcodes.
pub(super) fn client_attack(rng: &mut SmallRng, port: u16, corpus: &[(i32, Vec<u8>)]) {
    match rng.gen_range(0..4) {
        0 => send_and_close(port, &random_bytes(rng, 512), Duration::ZERO),
        1 => {
            let mut d = frame(&random_bytes(rng, 256));
            if rng.gen_bool(0.5) {
                d[..4].copy_from_slice(&rng.gen::<u32>().to_be_bytes());
            }
            send_and_close(port, &d, Duration::from_millis(10));
        }
        2 => {
            // A mutated connect request.
            let c = connect_request(SESSION_TIMEOUT_MS);
            let mut body = mutate(rng, &c[4..]);
            if rng.gen_bool(0.3) {
                body = random_bytes(rng, 64);
            }
            send_and_close(port, &frame(&body), Duration::from_millis(10));
        }
        _ => {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                return;
            };
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            if s.write_all(&connect_request(SESSION_TIMEOUT_MS)).is_err() {
                return;
            }
            let mut data = Vec::new();
            for i in 0..rng.gen_range(1..20) {
                let (code, base) = &corpus[rng.gen_range(0..corpus.len())];
                let code = if rng.gen_bool(0.2) {
                    [rng.gen_range(-12..110), rng.gen()][rng.gen_range(0..2)]
                } else {
                    *code
                };
                let body = if rng.gen_bool(0.2) {
                    random_bytes(rng, 128)
                } else {
                    mutate(rng, base)
                };
                let mut b = BytesMut::new();
                b.int(i + 1);
                b.int(code);
                b.extend_from_slice(&body);
                data.extend_from_slice(&frame(&b));
            }
            let _ = s.write_all(&data);
            // Read whatever comes back for a moment, then hang up.
            let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
            let mut buf = vec![0u8; 64 << 10];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    }
}

pub(super) fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A peer-transport frame: length, CRC32C, kind, data.
pub(super) fn peer_frame(kind: u8, data: &[u8]) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend_from_slice(data);
    let mut f = Vec::new();
    f.extend_from_slice(&(body.len() as u32).to_be_bytes());
    f.extend_from_slice(&crc32c(&body).to_be_bytes());
    f.extend_from_slice(&body);
    f
}

/// A hello (peer protocol version 2): magic, version, cluster id, node id, then the groups the
/// sender runs with their protocols (here group 0 only).
pub(super) fn hello_data(cluster: &str, node: u32, protocol: &str) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&0x5359_4E44u32.to_be_bytes());
    d.extend_from_slice(&2u16.to_be_bytes());
    d.extend_from_slice(&(cluster.len() as u32).to_be_bytes());
    d.extend_from_slice(cluster.as_bytes());
    d.extend_from_slice(&node.to_be_bytes());
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(&0u32.to_be_bytes());
    d.extend_from_slice(&(protocol.len() as u32).to_be_bytes());
    d.extend_from_slice(protocol.as_bytes());
    d
}

/// Does `data` start with an intact hello frame of a member of the cluster? (The peer port has
/// no authentication: such a connection takes over that member's inbound connection. Mutation
/// can produce one by chance, e.g. node id 2 with a bit flipped to 3, or junk appended.)
pub(super) fn is_member_hello(data: &[u8]) -> bool {
    let parse = || -> Option<bool> {
        let len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let crc = u32::from_be_bytes(data.get(4..8)?.try_into().ok()?);
        let body = data.get(8..8 + len)?;
        if crc32c(body) != crc || body.first() != Some(&3) {
            return Some(false);
        }
        let mut d = &body[1..];
        let mut take = |n: usize| -> Option<&[u8]> {
            let (a, b) = (d.get(..n)?, d.get(n..)?);
            d = b;
            Some(a)
        };
        if take(6)? != [0x53, 0x59, 0x4E, 0x44, 0, 2] {
            return Some(false);
        }
        let n = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
        let cluster = take(n)?;
        let node = u32::from_be_bytes(take(4)?.try_into().ok()?);
        // Any list of groups whose protocols do not contradict the cluster's is accepted.
        let groups = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let mut agrees = true;
        for _ in 0..groups {
            let g = u32::from_be_bytes(take(4)?.try_into().ok()?);
            let n = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
            let protocol = take(n)?;
            agrees &= g != 0 || protocol == b"zab";
        }
        Some(cluster == b"hostile" && agrees && (1..=3).contains(&node) && d.is_empty())
    };
    parse().unwrap_or(false)
}

/// One hostile peer-port connection: random bytes, a mutated hello (with a correct or a broken
/// checksum), a hello of another cluster, or a hello with a forged length.
pub(super) fn peer_attack(rng: &mut SmallRng, port: u16) {
    let hello = hello_data("hostile", 2, "zab");
    let data = match rng.gen_range(0..5) {
        0 => random_bytes(rng, 512),
        1 => peer_frame(3, &mutate(rng, &hello)),
        2 => mutate(rng, &peer_frame(3, &hello)),
        3 => peer_frame(3, &hello_data("another", rng.gen_range(0..5), "zab")),
        _ => {
            let mut f = peer_frame(3, &hello);
            f[..4].copy_from_slice(&rng.gen::<u32>().to_be_bytes());
            f
        }
    };
    if is_member_hello(&data) {
        return; // impersonation is tested on its own, at the end
    }
    send_and_close(port, &data, Duration::from_millis(20));
}

/// An admin-port connection: random bytes, or a mutated HTTP request.
pub(super) fn admin_attack(rng: &mut SmallRng, port: u16) {
    let req = b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n";
    let data = if rng.gen_bool(0.5) {
        random_bytes(rng, 512)
    } else {
        mutate(rng, req)
    };
    send_and_close(port, &data, Duration::from_millis(20));
}

/// Does the server still hold this connection open? Read from /proc/net/tcp, not from the
/// socket (reading would unblock a server stuck writing to it): once the server closes, its
/// end leaves ESTABLISHED (FIN_WAIT after a close, gone after a reset).
pub(super) fn server_holds(s: &TcpStream) -> bool {
    let (Ok(local), Ok(peer)) = (s.local_addr(), s.peer_addr()) else {
        return false;
    };
    let server = format!("0100007F:{:04X}", peer.port());
    let client = format!("0100007F:{:04X}", local.port());
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1] == server && f[2] == client && f[3] == "01"
    })
}

/// Is the connection closed by the server within `within`? (EOF or reset, not a timeout.)
pub(super) fn closed_within(mut s: &TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a reply or an error frame: keep reading
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Run `f` on `threads` threads, each with its own seeded RNG, `per_thread` times.
pub(super) fn swarm(
    threads: u64,
    per_thread: usize,
    f: impl Fn(&mut SmallRng) + Send + Sync + 'static,
) {
    let f = Arc::new(f);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let f = f.clone();
            thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5EED ^ t);
                for _ in 0..per_thread {
                    f(&mut rng);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

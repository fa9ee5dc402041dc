//! Mutual TLS on a real three-node cluster (ports 31700–31799): certificates made by `synod
//! certs`; a server without certificates refuses to start unless told `insecure = true`, and
//! one given another node's certificate refuses too; the admin port serves HTTPS and keeps its
//! data behind a client certificate; a peer without a certificate, with one from another CA,
//! or with another node's, is refused and logged; certificates rotate on SIGHUP without a
//! restart, and a bad rotation keeps the old ones.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BASE: u16 = 31700;
const CLUSTER: &str = "tls-test";

fn synod() -> Command {
    Command::new(env!("CARGO_BIN_EXE_synod"))
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `synod certs <args> --dir <dir>`, which must succeed.
fn make_certs(args: &[&str], dir: &Path) {
    ok(synod()
        .arg("certs")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap());
}

fn peer_port(i: u32) -> u16 {
    BASE + 10 + i as u16
}
fn admin_port(i: u32) -> u16 {
    BASE + 30 + i as u16
}

/// Node i's configuration, with the certificate files of node `cert_of`, or none at all.
fn config(dir: &Path, certs: &Path, i: u32, cert_of: Option<u32>) -> PathBuf {
    let mut t = format!(
        "cluster_id = \"{CLUSTER}\"\nnode_id = {i}\nadmin_addr = \"127.0.0.1:{}\"\n\
         client_addr = \"127.0.0.1:{}\"\ndata_dir = {:?}\nfsync = \"never\"\nlog_level = \"info\"\n",
        admin_port(i),
        BASE + i as u16,
        dir.join(format!("node{i}")).display().to_string()
    );
    t.push_str("[zab]\ntick_ms = 10\nheartbeat_ms = 50\nfollower_timeout_ms = 500\nleader_timeout_ms = 500\n");
    t.push_str("[peers]\n");
    for j in 1..=3 {
        t.push_str(&format!("{j} = \"127.0.0.1:{}\"\n", peer_port(j)));
    }
    if let Some(c) = cert_of {
        t.insert_str(
            0,
            &format!(
                "secure_client_addr = \"127.0.0.1:{}\"\n",
                BASE + 50 + i as u16
            ),
        );
        t.push_str(&format!(
            "[tls]\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
            certs.join("ca.crt").display().to_string(),
            certs.join(format!("node-{c}.crt")).display().to_string(),
            certs.join(format!("node-{c}.key")).display().to_string()
        ));
    }
    let path = dir.join(format!("node{i}.toml"));
    std::fs::write(&path, t).unwrap();
    path
}

struct Nodes(Vec<Child>);
impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start(dir: &Path, cfg: &Path, i: u32) -> Child {
    let log = std::fs::File::create(dir.join(format!("node{i}.log"))).unwrap();
    synod()
        .args(["server", "--config"])
        .arg(cfg)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn log_of(dir: &Path, i: u32) -> String {
    std::fs::read_to_string(dir.join(format!("node{i}.log"))).unwrap_or_default()
}

/// curl over HTTPS to node i's admin port, with the `root` client certificate or without:
/// (status, body).
fn curl(certs: &Path, i: u32, method: &str, path: &str, client: bool) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "-m",
        "5",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "-X",
        method,
    ])
    .arg("--cacert")
    .arg(certs.join("ca.crt"));
    if client {
        c.arg("--cert")
            .arg(certs.join("client-root.crt"))
            .arg("--key")
            .arg(certs.join("client-root.key"));
    }
    if method == "PUT" {
        c.args(["--data-binary", "hello"]);
    }
    let out = c
        .arg(format!("https://127.0.0.1:{}{path}", admin_port(i)))
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

fn pem_certs(p: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(p)
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
}

/// A TLS client trusting `ca`, with `identity` (certificate, key) or none.
fn client(ca: &Path, identity: Option<(PathBuf, PathBuf)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in pem_certs(ca) {
        roots.add(c).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    Arc::new(match identity {
        Some((c, k)) => b
            .with_client_auth_cert(pem_certs(&c), PrivateKeyDer::from_pem_file(k).unwrap())
            .unwrap(),
        None => b.with_no_client_auth(),
    })
}

/// Play a peer of node 1: TLS with `cfg`, then a hello claiming node `claim`. What came back
/// (the hello reply's bytes), or the error that ended the exchange.
fn impostor(cfg: Arc<rustls::ClientConfig>, claim: u32) -> Result<String, String> {
    let name = ServerName::try_from(synod_server::tls::node_name(CLUSTER, 1)).unwrap();
    let conn = rustls::ClientConnection::new(cfg, name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", peer_port(1))).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let hello = synod_server::transport::hello_frame(CLUSTER, claim, &[(0, "zab".into())]);
    s.write_all(&hello).map_err(|e| e.to_string())?;
    s.flush().map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The serial of the certificate node i's admin port shows.
fn admin_serial(ca: &Path, i: u32) -> String {
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(client(ca, None), name).unwrap();
    let mut tcp = TcpStream::connect(("127.0.0.1", admin_port(i))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    let cert = &conn.peer_certificates().unwrap()[0];
    synod_server::tls::serial_of(cert)
}

#[test]
fn a_cluster_over_mutual_tls_refuses_impostors_and_rotates_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let certs = d.join("certs");
    let other = d.join("other");
    make_certs(&["dev", "--cluster-id", CLUSTER], &certs);
    make_certs(&["ca", "--cluster-id", CLUSTER], &other);
    make_certs(&["node", "--cluster-id", CLUSTER, "--node-id", "2"], &other);

    // Secure by default: no certificates and no `insecure = true` is refused; so is another
    // node's certificate.
    let out = synod()
        .args(["server", "--config"])
        .arg(config(d, &certs, 1, None))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("insecure = true"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = synod()
        .args(["server", "--config"])
        .arg(config(d, &certs, 1, Some(2)))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("this is node 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut nodes = Nodes(Vec::new());
    for i in 1..=3 {
        let cfg = config(d, &certs, i, Some(i));
        nodes.0.push(start(d, &cfg, i));
    }
    wait_until("every node healthy over HTTPS", 30, || {
        (1..=3).all(|i| curl(&certs, i, "GET", "/health", false).0 == 200)
    });
    // /metrics is open, with the certificate's expiry for alerts.
    let (code, metrics) = curl(&certs, 2, "GET", "/metrics", false);
    assert_eq!(code, 200);
    let expiry: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("synod_tls_certificate_expiry_timestamp_seconds "))
        .expect("the expiry gauge")
        .trim()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(expiry > now + 300.0 * 86400.0, "{expiry}");
    // The admin port's data needs a client certificate; with one, writes replicate over the
    // peers' mutual TLS.
    assert_eq!(curl(&certs, 1, "GET", "/v1/kv/k", false).0, 403);
    // A client certificate of the CA that is not an admin's (an application's, for x509 ACLs)
    // gets no further: the admin API bypasses ACLs.
    make_certs(&["client", "--name", "alice"], &certs);
    let alice = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(certs.join("ca.crt"))
        .arg("--cert")
        .arg(certs.join("client-alice.crt"))
        .arg("--key")
        .arg(certs.join("client-alice.key"))
        .arg(format!("https://127.0.0.1:{}/v1/kv/k", admin_port(1)))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&alice.stdout), "403");
    wait_until("a write through node 1", 20, || {
        curl(&certs, 1, "PUT", "/v1/kv/k", true).0 == 200
    });
    for i in 2..=3 {
        wait_until("the write on every node", 20, || {
            let (code, body) = curl(&certs, i, "GET", "/v1/kv/k", true);
            code == 200 && body == "hello"
        });
    }

    // Impostors at node 1's peer port, spaced past the one-per-second rate limit of the log.
    let ca = certs.join("ca.crt");
    let no_cert = impostor(client(&ca, None), 2);
    assert!(
        no_cert.is_err() || no_cert.as_deref() == Ok(""),
        "{no_cert:?}"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let foreign = impostor(
        client(
            &ca,
            Some((other.join("node-2.crt"), other.join("node-2.key"))),
        ),
        2,
    );
    assert!(
        foreign.is_err() || foreign.as_deref() == Ok(""),
        "{foreign:?}"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let three = client(
        &ca,
        Some((certs.join("node-3.crt"), certs.join("node-3.key"))),
    );
    let posing = impostor(three, 2).unwrap();
    assert!(posing.contains("certificate is node [3]'s"), "{posing:?}");
    std::thread::sleep(Duration::from_millis(1100));
    let mut plain = TcpStream::connect(("127.0.0.1", peer_port(1))).unwrap();
    plain
        .write_all(&synod_server::transport::hello_frame(CLUSTER, 2, &[]))
        .unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut junk = Vec::new();
    let _ = plain.read_to_end(&mut junk);
    assert!(!String::from_utf8_lossy(&junk).contains("SYND"));
    wait_until("every refusal logged", 10, || {
        let log = log_of(d, 1);
        log.matches("refusing peer connection: TLS handshake failed")
            .count()
            >= 3
            && log.contains("certificate is node [3]'s")
    });
    let log = log_of(d, 1);
    assert!(
        log.contains("peer sent no certificates") || log.contains("NoCertificatesPresented"),
        "{log}"
    );
    // The other CA has the same name as the cluster's: its signature does not verify.
    assert!(
        log.contains("UnknownIssuer") || log.contains("BadSignature"),
        "{log}"
    );

    // Hostile handshakes on every TLS port of node 2: a real ClientHello mutated (bits
    // flipped, bytes cut, lengths forged) and random bytes, each on its own connection.
    let hello = {
        let c = client(&ca, None);
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut conn = rustls::ClientConnection::new(c, name).unwrap();
        let mut v = Vec::new();
        conn.write_tls(&mut v).unwrap();
        v
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for port in [peer_port(2), admin_port(2), BASE + 52] {
        for k in 0..150 {
            let mut m = hello.clone();
            match k % 3 {
                0 => {
                    for _ in 0..1 + next() % 4 {
                        let i = (next() % m.len() as u64) as usize;
                        m[i] ^= 1 << (next() % 8);
                    }
                }
                1 => m.truncate((next() % m.len() as u64) as usize),
                _ => m = (0..next() % 600).map(|_| next() as u8).collect(),
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
                let _ = s.write_all(&m);
                let mut sink = [0u8; 256];
                let _ = s.read(&mut sink);
            }
        }
    }
    wait_until("node 2 serves after the hostile handshakes", 20, || {
        curl(&certs, 2, "PUT", "/v1/kv/hostile", true).0 == 200
            && curl(&certs, 1, "GET", "/v1/kv/hostile", true).0 == 200
    });

    // Rotation: a new certificate for node 1, SIGHUP, and new connections see it; the cluster
    // keeps replicating.
    let before = admin_serial(&ca, 1);
    make_certs(&["node", "--cluster-id", CLUSTER, "--node-id", "1"], &certs);
    let pid = nodes.0[0].id().to_string();
    ok(Command::new("kill").args(["-HUP", &pid]).output().unwrap());
    wait_until("the reload", 10, || {
        log_of(d, 1).contains("SIGHUP: reloaded the TLS certificates")
    });
    let after = admin_serial(&ca, 1);
    assert_ne!(before, after, "the new certificate is served");
    // A broken file on the next rotation: the node says so and keeps the working one.
    std::fs::write(certs.join("node-1.crt"), "not a certificate").unwrap();
    ok(Command::new("kill").args(["-HUP", &pid]).output().unwrap());
    wait_until("the failed reload", 10, || {
        log_of(d, 1).contains("cannot reload the TLS certificates")
    });
    assert_eq!(admin_serial(&ca, 1), after);
    // Every node still up and replicating.
    wait_until("a write after rotation", 20, || {
        curl(&certs, 1, "PUT", "/v1/kv/after", true).0 == 200
    });
    wait_until("it replicates", 20, || {
        curl(&certs, 3, "GET", "/v1/kv/after", true).0 == 200
    });
    for (i, c) in nodes.0.iter_mut().enumerate() {
        assert!(c.try_wait().unwrap().is_none(), "node {} exited", i + 1);
    }
}

//! Mutual TLS between peers on loopback: the right node gets through; a process with no
//! certificate, with one from another CA, with another node's certificate, or in plain text,
//! is refused before it can deliver anything.

use super::frame::{decode_reply, encode_hello, read_frame, Hello, HELLO_MAX_FRAME, K_REPLY};
use super::*;
use crate::tls::certs::{create_ca, create_node};
use crate::tls::tests::files;
use crate::tls::Tls;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::Path;

const CLUSTER: &str = "t";

fn config(
    me: NodeId,
    members: &BTreeMap<NodeId, PeerAddr>,
    tls: Option<Arc<Tls>>,
) -> TransportConfig {
    TransportConfig {
        cut: Arc::default(),
        cluster_id: CLUSTER.into(),
        me,
        members: members.clone(),
        groups: vec![(0, "zab".into())],
        chunk_bytes: 1 << 20,
        max_message_bytes: 1 << 30,
        peer_queue: 100,
        max_handshakes: 8,
        link: LinkEmulations::default(),
        tls,
    }
}

/// A TLS client config: `cert` (a node or none) trusting `ca`.
fn client(ca: &Path, cert: Option<(&Path, &Path)>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let c = match cert {
        Some((crt, key)) => b
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(crt)
                    .unwrap()
                    .map(|c| c.unwrap())
                    .collect(),
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(c))
}

/// Connect to `addr` as a TLS client and send a hello claiming `claim`: the refusal reason,
/// or None if the node accepted the hello.
async fn impostor(
    addr: SocketAddr,
    connector: &tokio_rustls::TlsConnector,
    claim: NodeId,
) -> Result<Option<String>, String> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(crate::tls::node_name(CLUSTER, 1)).unwrap();
    // TLS 1.3 finishes the client's side before the server has checked its certificate: a
    // refusal shows as an error on the first read.
    let mut s = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let hello = encode_hello(&Hello {
        cluster_id: CLUSTER.into(),
        node_id: claim,
        groups: vec![(0, "zab".into())],
    });
    s.write_all(&hello)
        .await
        .map_err(|e| format!("write: {e}"))?;
    s.flush().await.map_err(|e| format!("write: {e}"))?;
    match read_frame(&mut s, HELLO_MAX_FRAME).await {
        Ok(Some((K_REPLY, b))) => match decode_reply(b) {
            Ok((true, _)) => Ok(None),
            Ok((false, reason)) => Ok(Some(reason)),
            Err(e) => Err(e),
        },
        Ok(_) => Err("no reply".into()),
        Err(e) => Err(format!("read: {e}")),
    }
}

#[test]
fn peers_need_a_certificate_of_the_cluster_ca_naming_the_node_they_claim() {
    crate::fuzz::block_on(async {
        let d = tempfile::tempdir().unwrap();
        create_ca(d.path(), CLUSTER, 10).unwrap();
        for id in 1..=3 {
            create_node(d.path(), CLUSTER, id, &[], 10).unwrap();
        }
        let other = tempfile::tempdir().unwrap();
        create_ca(other.path(), CLUSTER, 10).unwrap();
        create_node(other.path(), CLUSTER, 2, &[], 10).unwrap();

        let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a1 = l1.local_addr().unwrap();
        let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let members: BTreeMap<NodeId, PeerAddr> = [
            (1, a1.into()),
            (2, l2.local_addr().unwrap().into()),
            (3, "127.0.0.1:9".parse::<SocketAddr>().unwrap().into()),
        ]
        .into_iter()
        .collect();
        let tls1 = Tls::load(&files(d.path(), 1), CLUSTER, 1).unwrap();
        let (tx1, mut rx1) = mpsc::channel::<Inbound>(100);
        let stats1 = Arc::new(TransportStats::default());
        tokio::spawn(serve_inbound::<Inbound>(
            config(1, &members, Some(tls1)),
            l1,
            tx1,
            stats1.clone(),
        ));

        // Node 2, with its own certificate: its message arrives.
        let tls2 = Tls::load(&files(d.path(), 2), CLUSTER, 2).unwrap();
        let (tx2, _rx2) = mpsc::channel::<Inbound>(100);
        let senders = start_outbound::<Inbound>(
            &config(2, &members, Some(tls2)),
            tx2,
            Arc::new(TransportStats::default()),
        );
        assert!(senders[&1].send(0, Bytes::from_static(b"over tls")));
        let got = tokio::time::timeout(Duration::from_secs(10), rx1.recv())
            .await
            .expect("delivered")
            .unwrap();
        match got {
            Inbound::Message { from, data, .. } => {
                assert_eq!(from, 2);
                assert_eq!(&data[..], b"over tls");
            }
            _ => panic!("expected a message"),
        }
        let refused = || stats1.rejected_handshakes.load(Ordering::Relaxed);
        assert_eq!(refused(), 0);

        // No certificate: the handshake fails.
        let r = impostor(a1, &client(&d.path().join("ca.crt"), None), 2).await;
        assert!(r.is_err(), "{r:?}");
        assert_eq!(refused(), 1);
        // A certificate for node 2 from another CA.
        let foreign = client(
            &d.path().join("ca.crt"),
            Some((
                &other.path().join("node-2.crt"),
                &other.path().join("node-2.key"),
            )),
        );
        let r = impostor(a1, &foreign, 2).await;
        assert!(r.is_err(), "{r:?}");
        assert_eq!(refused(), 2);
        // Node 3's certificate, claiming to be node 2.
        let three = client(
            &d.path().join("ca.crt"),
            Some((&d.path().join("node-3.crt"), &d.path().join("node-3.key"))),
        );
        let r = impostor(a1, &three, 2).await.unwrap();
        assert!(
            r.as_deref()
                .is_some_and(|r| r.contains("certificate is node [3]'s")),
            "{r:?}"
        );
        assert_eq!(refused(), 3);
        // Node 3 as itself is let in.
        assert_eq!(impostor(a1, &three, 3).await, Ok(None));
        // Plain text to a TLS port: refused by the handshake.
        let mut plain = TcpStream::connect(a1).await.unwrap();
        plain
            .write_all(&encode_hello(&Hello {
                cluster_id: CLUSTER.into(),
                node_id: 2,
                groups: vec![],
            }))
            .await
            .unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut rest),
        )
        .await;
        assert_eq!(refused(), 4);
        // Nothing from any of them reached the host.
        while let Ok(m) = rx1.try_recv() {
            assert!(
                matches!(m, Inbound::Disconnected { .. }),
                "nothing but disconnections"
            );
        }

        // Outbound: a listener that shows node 3's certificate where node 1 is expected is
        // refused by the dialler.
        let tls_as3 = Tls::load(&files(d.path(), 3), CLUSTER, 3).unwrap();
        let wrong: BTreeMap<NodeId, PeerAddr> = [
            (1, members[&2].clone()),
            (2, a1.into()),
            (3, members[&3].clone()),
        ]
        .into_iter()
        .collect();
        let (tx3, _rx3) = mpsc::channel::<Inbound>(100);
        tokio::spawn(serve_inbound::<Inbound>(
            config(3, &members, Some(tls_as3)),
            l2,
            tx3,
            Arc::new(TransportStats::default()),
        ));
        let tls2b = Tls::load(&files(d.path(), 2), CLUSTER, 2).unwrap();
        let cfg = config(2, &wrong, Some(tls2b));
        let r = connect(&cfg, 1, &wrong[&1], &my_hello(&cfg)).await;
        assert!(
            matches!(&r, Err(ConnectError::Tls(e)) if e.contains("node 1")),
            "{}",
            r.err().map(|e| e.to_string()).unwrap_or_default()
        );
    });
}

/// Hostile bytes into the TLS handshake of the peer port: a real ClientHello of a node, mutated
/// (flipped bits, forged lengths, splices), and random bytes. The handshake fails with a reason
/// and never panics, and its allocations stay bounded by what arrived.
mod hostile {
    use super::*;
    use crate::fuzz::{bounded, config, mutate, mutation};
    use proptest::prelude::*;
    use std::sync::OnceLock;

    struct Fixture {
        cfg: TransportConfig,
        hello: Vec<u8>,
        _dir: tempfile::TempDir,
    }

    fn fixture() -> &'static Fixture {
        static F: OnceLock<Fixture> = OnceLock::new();
        F.get_or_init(|| {
            let d = tempfile::tempdir().unwrap();
            create_ca(d.path(), CLUSTER, 10).unwrap();
            for id in 1..=2 {
                create_node(d.path(), CLUSTER, id, &[], 10).unwrap();
            }
            let members: BTreeMap<NodeId, PeerAddr> = [
                (1, "127.0.0.1:1".parse::<SocketAddr>().unwrap().into()),
                (2, "127.0.0.1:2".parse::<SocketAddr>().unwrap().into()),
            ]
            .into_iter()
            .collect();
            let tls1 = Tls::load(&files(d.path(), 1), CLUSTER, 1).unwrap();
            // What a peer sends first: its ClientHello.
            let c = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
            let name = ServerName::try_from(crate::tls::node_name(CLUSTER, 1)).unwrap();
            let mut conn = rustls::ClientConnection::new(Arc::new(c), name).unwrap();
            let mut hello = Vec::new();
            conn.write_tls(&mut hello).unwrap();
            Fixture {
                cfg: super::config(1, &members, Some(tls1)),
                hello,
                _dir: d,
            }
        })
    }

    /// Feed `data` to the peer port's TLS accept, then end the stream: refused, never a panic.
    fn consume(data: &[u8]) {
        let f = fixture();
        let r = bounded(data.len(), || {
            crate::fuzz::block_on(async {
                let (mut near, far) = tokio::io::duplex(64 << 10);
                near.write_all(data).await.unwrap();
                near.shutdown().await.unwrap();
                secure::accept(&f.cfg, far, Duration::from_secs(2))
                    .await
                    .map(|_| ())
            })
        });
        assert!(r.is_err(), "junk was accepted as a peer");
    }

    #[test]
    fn the_real_client_hello_alone_is_not_a_peer() {
        consume(&fixture().hello);
    }

    proptest! {
        #![proptest_config(config(300))]

        #[test]
        fn mutated_client_hellos_are_refused(muts in prop::collection::vec(mutation(), 1..6)) {
            let f = fixture();
            consume(&mutate(&f.hello, &muts, std::slice::from_ref(&f.hello)));
        }

        #[test]
        fn random_bytes_are_refused(data in prop::collection::vec(any::<u8>(), 0..2048)) {
            consume(&data);
        }
    }
}

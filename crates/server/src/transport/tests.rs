use super::frame::*;
use super::*;
use crate::config::PeerAddr;
use bytes::{Buf, BufMut};
use synod_core::wire::Wire;
use synod_zab::{Msg, Point, Zxid};

/// The groups of the tests' node.
fn runs() -> HashSet<GroupId> {
    [0, 7].into_iter().collect()
}

/// Walk frames, returning (kind, body without the kind byte).
fn frames(mut b: Bytes) -> Vec<(u8, Bytes)> {
    let mut out = Vec::new();
    while b.has_remaining() {
        let len = b.get_u32() as usize;
        let crc = b.get_u32();
        let mut body = b.split_to(len);
        assert_eq!(crc32c::crc32c(&body), crc);
        let kind = body.get_u8();
        out.push((kind, body));
    }
    out
}

#[test]
fn large_messages_are_chunked_and_reassembled_per_group() {
    let msg = Msg::Forward {
        epoch: 1,
        nonce: 2,
        seq: 3,
        commands: vec![synod_core::Command {
            id: 1,
            payload: Bytes::from(vec![9u8; 10_000]),
        }],
    };
    let data = msg.to_bytes();
    let mut out = BytesMut::new();
    encode_message(&mut out, K_WHOLE, 7, &data, 4096);
    let fs = frames(out.freeze());
    assert_eq!(
        fs.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        vec![K_CHUNK, K_CHUNK, K_LAST]
    );
    let groups = runs();
    let mut r = Reassembly::new(1 << 20);
    let mut done = None;
    for (k, b) in fs {
        if let Some(a) = r.frame(k, b, &groups).unwrap() {
            done = Some(a);
        }
    }
    let Some(Assembled::Message(7, m)) = done else {
        panic!("a whole message of group 7")
    };
    assert_eq!(m, data);
    // Too large for the limit: refused with the reason.
    let mut r = Reassembly::new(5_000);
    let mut out = BytesMut::new();
    encode_message(&mut out, K_WHOLE, 7, &data, 4096);
    let err = frames(out.freeze())
        .into_iter()
        .find_map(|(k, b)| r.frame(k, b, &groups).err())
        .unwrap();
    assert!(err.contains("max_message_bytes"), "{err}");
}

#[test]
fn frames_of_unknown_groups_are_dropped_and_message_bytes_go_to_the_host_as_they_are() {
    let groups = runs();
    let mut out = BytesMut::new();
    group_frame(&mut out, K_WHOLE, 3, &Msg::NewEpoch { epoch: 1 }.to_bytes());
    let (k, b) = frames(out.freeze()).remove(0);
    let r = Reassembly::new(1 << 20).frame(k, b, &groups);
    assert!(matches!(r, Ok(Some(Assembled::Unknown(3)))));
    // Undecodable for the group's protocol: the host's codec refuses it (crates/host), not
    // the transport.
    let mut out = BytesMut::new();
    group_frame(&mut out, K_WHOLE, 0, b"\xFFjunk");
    let (k, b) = frames(out.freeze()).remove(0);
    let r = Reassembly::new(1 << 20).frame(k, b, &groups);
    assert!(matches!(r, Ok(Some(Assembled::Message(0, ref d))) if &d[..] == b"\xFFjunk"));
}

#[test]
fn large_submissions_are_chunked_too() {
    let payload = vec![3u8; 10_000];
    let mut out = BytesMut::new();
    encode_message(&mut out, K_SUBMIT, 7, &payload, 4096);
    let fs = frames(out.freeze());
    assert_eq!(
        fs.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        vec![K_SUBMIT_CHUNK, K_SUBMIT_CHUNK, K_SUBMIT_LAST]
    );
    let groups = runs();
    let mut r = Reassembly::new(1 << 20);
    let done: Vec<Assembled> = fs
        .into_iter()
        .filter_map(|(k, b)| r.frame(k, b, &groups).unwrap())
        .collect();
    let [Assembled::Submit(7, whole)] = &done[..] else {
        panic!("one submission of group 7")
    };
    assert_eq!(&whole[..], &payload[..]);
}

#[test]
fn hellos_name_the_groups_and_mismatched_protocols_are_refused() {
    let cfg = TransportConfig {
        cut: Arc::default(),
        cluster_id: "c1".into(),
        me: 1,
        members: [
            (1, PeerAddr::parse("127.0.0.1:1").unwrap()),
            (2, PeerAddr::parse("127.0.0.1:2").unwrap()),
        ]
        .into_iter()
        .collect(),
        groups: vec![(0, "zab".into()), (1, "zab-ct".into())],
        chunk_bytes: 1 << 20,
        max_message_bytes: 1 << 30,
        peer_queue: 10,
        max_handshakes: 1,
        link: LinkEmulations::default(),
        tls: None,
    };
    let hello = |node, groups: Vec<(GroupId, &str)>| Hello {
        cluster_id: "c1".into(),
        node_id: node,
        groups: groups
            .into_iter()
            .map(|(g, p)| (g, p.to_string()))
            .collect(),
    };
    let round_trip = |h: &Hello| {
        let (k, b) = frames(encode_hello(h).freeze()).remove(0);
        assert_eq!(k, K_HELLO);
        decode_hello(b).unwrap()
    };
    let h = hello(2, vec![(0, "zab"), (1, "zab-ct"), (5, "paxos")]);
    assert_eq!(round_trip(&h), h);
    assert_eq!(check_hello(&cfg, h.clone(), None), Ok(2));
    assert_eq!(check_hello(&cfg, h.clone(), Some(&[2])), Ok(2), "certified");
    let e = check_hello(&cfg, h, Some(&[3])).unwrap_err();
    assert!(e.contains("certificate is node [3]'s"), "{e}");
    let e = check_hello(&cfg, hello(2, vec![(1, "zab")]), None).unwrap_err();
    assert!(e.contains("group 1"), "{e}");
    assert!(
        check_hello(&cfg, hello(1, vec![]), None).is_err(),
        "not a peer: itself"
    );
    assert!(
        check_hello(&cfg, hello(3, vec![]), None).is_err(),
        "not a member"
    );
}

/// The peer transport on real loopback sockets, with and without emulated links.
mod emulated {
    use super::*;
    use std::time::Instant as Clock;

    struct Node {
        senders: BTreeMap<NodeId, PeerSender>,
        rx: mpsc::Receiver<Inbound>,
    }

    impl Node {
        fn send(&self, to: NodeId, data: &[u8]) {
            assert!(self.senders[&to].send(0, Bytes::copy_from_slice(data)));
        }

        /// The next message, and whom from (a broken connection fails the test).
        async fn recv(&mut self) -> (NodeId, Bytes) {
            let e = tokio::time::timeout(Duration::from_secs(5), self.rx.recv())
                .await
                .expect("a message within 5 s")
                .expect("transport running");
            match e {
                Inbound::Message { from, data, .. } => (from, data),
                _ => panic!("expected a message"),
            }
        }
    }

    /// `n` nodes (ids 1..=n) on loopback, every one emulating `link`.
    async fn cluster(n: u32, link: impl Into<LinkEmulations>) -> Vec<Node> {
        let link: LinkEmulations = link.into();
        let mut listeners = Vec::new();
        let mut members = BTreeMap::new();
        for id in 1..=n {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            members.insert(id, l.local_addr().unwrap().into());
            listeners.push(l);
        }
        let mut nodes = Vec::new();
        for (me, l) in (1..).zip(listeners) {
            let cfg = TransportConfig {
                cut: Arc::default(),
                cluster_id: "t".into(),
                me,
                members: members.clone(),
                groups: vec![(0, "zab".into())],
                chunk_bytes: 1 << 20,
                max_message_bytes: 1 << 30,
                peer_queue: 10_000,
                max_handshakes: 8,
                link: link.clone(),
                tls: None,
            };
            let (tx, rx) = mpsc::channel(100_000);
            let stats = Arc::new(TransportStats::default());
            tokio::spawn(serve_inbound::<Inbound>(
                cfg.clone(),
                l,
                tx.clone(),
                stats.clone(),
            ));
            let senders = start_outbound::<Inbound>(&cfg, tx, stats);
            nodes.push(Node { senders, rx });
        }
        nodes
    }

    /// One message from node 1 to node 2 and its answer back.
    async fn round_trip(nodes: &mut [Node]) -> Duration {
        let t = Clock::now();
        nodes[0].send(2, b"ping");
        assert_eq!(nodes[1].recv().await, (1, Bytes::from_static(b"ping")));
        nodes[1].send(1, b"pong");
        assert_eq!(nodes[0].recv().await, (2, Bytes::from_static(b"pong")));
        t.elapsed()
    }

    #[test]
    fn release_times_follow_the_interface_then_the_delay_and_never_reorder() {
        let e = LinkEmulation {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(3),
            bits_per_s: 10_000_000, // 1250 bytes take 1 ms
            link_bits_per_s: 0,
        };
        let nic = Nic::default();
        let (mut a, mut b) = (link::Link::new(e, &nic), link::Link::new(e, &nic));
        let t0 = std::time::Instant::now() + Duration::from_secs(1);
        let mut last = t0;
        for i in 0..100u32 {
            // Two links, one interface: the i-th message (of either link) leaves after i + 1 ms.
            let l = if i % 2 == 0 { &mut a } else { &mut b };
            let r = l.release_at(t0, 1250);
            let sent = t0 + Duration::from_millis(i as u64 + 1);
            assert!(r >= sent + e.delay, "{i}: released before it arrived");
            assert!(
                r <= sent + e.delay + e.jitter + Duration::from_millis(3),
                "{i}"
            );
            if i % 2 == 0 {
                assert!(r >= last, "{i}: reordered");
                last = r;
            }
        }
        let off = LinkEmulation::default();
        assert!(!off.is_on());
        assert_eq!(link::Link::new(off, &nic).release_at(t0, 1 << 20), t0);
    }

    #[tokio::test]
    async fn links_are_not_emulated_by_default() {
        let mut nodes = cluster(2, LinkEmulation::default()).await;
        round_trip(&mut nodes).await; // connects
        let mut rtts = Vec::new();
        for _ in 0..21 {
            rtts.push(round_trip(&mut nodes).await);
        }
        rtts.sort();
        // Loopback answers in well under a millisecond; 20 ms leaves room for a busy machine.
        assert!(rtts[10] < Duration::from_millis(20), "{rtts:?}");
    }

    #[tokio::test]
    async fn emulated_delay_applies_to_every_hop_and_keeps_fifo() {
        let delay = Duration::from_millis(40);
        let link = LinkEmulation {
            delay,
            jitter: Duration::from_millis(20),
            bits_per_s: 0,
            link_bits_per_s: 0,
        };
        let mut nodes = cluster(2, link).await;
        round_trip(&mut nodes).await; // connects
        let rtt = round_trip(&mut nodes).await;
        assert!(rtt >= 2 * delay, "round trip {rtt:?} under twice the delay");
        assert!(rtt < Duration::from_millis(1500), "round trip {rtt:?}");
        // Many messages at once, each with its own jitter: they still arrive in order, none
        // before the delay.
        let t = Clock::now();
        for i in 0..500u32 {
            nodes[0].send(2, &i.to_be_bytes());
        }
        for i in 0..500u32 {
            let (from, m) = nodes[1].recv().await;
            assert_eq!((from, &m[..]), (1, &i.to_be_bytes()[..]), "out of order");
            if i == 0 {
                assert!(
                    t.elapsed() >= delay,
                    "first message after {:?}",
                    t.elapsed()
                );
            }
        }
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );
    }

    #[tokio::test]
    async fn emulated_bandwidth_is_one_interface_shared_by_every_link() {
        let bits_per_s = 8_000_000; // 1 MB/s
        let link = LinkEmulation {
            bits_per_s,
            ..LinkEmulation::default()
        };
        let mut nodes = cluster(3, link).await;
        let payload = vec![7u8; 4096];
        let per_peer = 32;
        let t = Clock::now();
        for _ in 0..per_peer {
            nodes[0].send(2, &payload);
            nodes[0].send(3, &payload);
        }
        for n in &mut nodes[1..] {
            for _ in 0..per_peer {
                assert_eq!(n.recv().await.1.len(), payload.len());
            }
        }
        let elapsed = t.elapsed();
        // 256 KiB of payload through one 1 MB/s interface (frames add headers: more still);
        // with a limit per link instead, it would take half as long.
        let bytes = (2 * per_peer * payload.len()) as f64;
        let floor = Duration::from_secs_f64(bytes * 8.0 / bits_per_s as f64);
        assert!(elapsed >= floor, "{elapsed:?} < {floor:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    }

    /// A per-peer override (asymmetric links): node 1's link to node 2 is slow and narrow, its
    /// link to node 3 is the default; the other nodes emulate nothing.
    #[tokio::test]
    async fn a_per_peer_override_applies_to_its_link_only() {
        let delay = Duration::from_millis(60);
        let slow = LinkEmulation {
            delay,
            link_bits_per_s: 8_000_000, // 1 MB/s on this link alone
            ..LinkEmulation::default()
        };
        let links = LinkEmulations {
            all: LinkEmulation::default(),
            peers: [(2, slow)].into_iter().collect(),
        };
        assert!(links.is_on() && !links.all.is_on());
        assert_eq!((links.to(2), links.to(3)), (slow, LinkEmulation::default()));
        // Every node gets the same table (node 3's link to node 2 is slow too): the test
        // measures node 1's links only.
        let mut nodes = cluster(3, links).await;
        // Connect every link first.
        nodes[0].send(2, b"hello");
        nodes[0].send(3, b"hello");
        assert_eq!(nodes[1].recv().await.0, 1);
        assert_eq!(nodes[2].recv().await.0, 1);
        let t = Clock::now();
        nodes[0].send(3, b"fast");
        assert_eq!(nodes[2].recv().await, (1, Bytes::from_static(b"fast")));
        let fast = t.elapsed();
        assert!(
            fast < Duration::from_millis(40),
            "the default link took {fast:?}"
        );
        let t = Clock::now();
        nodes[0].send(2, b"slow");
        assert_eq!(nodes[1].recv().await, (1, Bytes::from_static(b"slow")));
        assert!(t.elapsed() >= delay, "the slow link took {:?}", t.elapsed());
        // The override's bandwidth paces its link: 128 KiB at 1 MB/s take over 130 ms, while
        // the same through the unlimited link to node 3 take far less.
        let payload = vec![1u8; 4096];
        let t = Clock::now();
        for _ in 0..32 {
            nodes[0].send(2, &payload);
        }
        for _ in 0..32 {
            assert_eq!(nodes[1].recv().await.1.len(), payload.len());
        }
        let paced = t.elapsed();
        let floor = Duration::from_secs_f64((32 * payload.len()) as f64 * 8.0 / 8e6);
        assert!(paced >= floor + delay, "{paced:?} < {floor:?} + {delay:?}");
        let t = Clock::now();
        for _ in 0..32 {
            nodes[0].send(3, &payload);
        }
        for _ in 0..32 {
            assert_eq!(nodes[2].recv().await.1.len(), payload.len());
        }
        assert!(
            t.elapsed() < floor,
            "the default link was paced: {:?}",
            t.elapsed()
        );
    }
}

mod hostile {
    use super::*;
    use crate::fuzz::{block_on, bounded, config, mutate, mutation};
    use proptest::prelude::*;

    fn hello() -> Vec<u8> {
        encode_hello(&Hello {
            cluster_id: "c1".into(),
            node_id: 2,
            groups: vec![(0, "zab".into())],
        })
        .to_vec()
    }

    /// Valid peer-port byte streams: a hello, a hello reply, frames of messages.
    fn corpus() -> Vec<Vec<u8>> {
        let mut msgs = BytesMut::new();
        let p = Point {
            zxid: Zxid::new(1, 2),
            slot: 3,
        };
        for m in [
            Msg::NewEpoch { epoch: 4 },
            Msg::UpToDate {
                epoch: 4,
                commit: p,
            },
        ] {
            encode_message(&mut msgs, K_WHOLE, 0, &m.to_bytes(), 1 << 20);
        }
        encode_message(&mut msgs, K_SUBMIT, 7, b"a command", 1 << 20);
        let mut chunked = BytesMut::new();
        let forward = Msg::Forward {
            epoch: 1,
            nonce: 2,
            seq: 3,
            commands: vec![synod_core::Command {
                id: 1,
                payload: Bytes::from(vec![1u8; 100]),
            }],
        };
        encode_message(&mut chunked, K_WHOLE, 0, &forward.to_bytes(), 16);
        vec![
            hello(),
            reply(false, "no").to_vec(),
            msgs.to_vec(),
            chunked.to_vec(),
        ]
    }

    /// Read frames from `data` as an inbound connection does: the hello with the hello
    /// limit, then messages, reassembled and decoded.
    fn consume(data: &[u8]) {
        let groups = runs();
        bounded(data.len(), || {
            block_on(async {
                let mut r = data;
                match read_frame(&mut r, HELLO_MAX_FRAME).await {
                    Ok(Some((K_HELLO, b))) => {
                        let _ = decode_hello(b);
                    }
                    Ok(Some((K_REPLY, b))) => {
                        let _ = decode_reply(b);
                    }
                    _ => {}
                }
                let mut r = data;
                let mut re = Reassembly::new(1 << 20);
                while let Ok(Some((kind, b))) = read_frame(&mut r, (1 << 20) + 65536).await {
                    if re.frame(kind, b, &groups).is_err() {
                        break;
                    }
                }
            })
        });
    }

    proptest! {
        #![proptest_config(config(3_000))]

        #[test]
        fn mutated_peer_streams_never_panic(
            which in any::<usize>(),
            muts in prop::collection::vec(mutation(), 1..5),
        ) {
            let c = corpus();
            consume(&mutate(&c[which % c.len()], &muts, &c));
        }

        /// Mutations behind a valid checksum reach decode_hello itself.
        #[test]
        fn mutated_hellos_are_refused_or_accepted_never_panic(
            muts in prop::collection::vec(mutation(), 1..5),
        ) {
            let h = hello();
            let data = mutate(&h[9..], &muts, &[h[9..].to_vec()]);
            let b = Bytes::from(data.clone());
            if let Ok(h) = bounded(data.len(), || decode_hello(b)) {
                prop_assert!(h.cluster_id.len() <= 256);
                prop_assert!(h.groups.iter().all(|(_, p)| p.len() <= 64));
            }
            let mut framed = BytesMut::new();
            frame(&mut framed, K_HELLO, &data);
            consume(&framed);
        }

        #[test]
        fn random_peer_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
            consume(&data);
        }
    }

    #[test]
    fn a_hello_claiming_a_megabyte_is_refused_unread() {
        let mut d = BytesMut::new();
        d.put_u32(1 << 20);
        d.put_u32(0);
        d.put_u8(K_HELLO);
        let r = bounded(d.len(), || {
            block_on(read_frame(&mut &d[..], HELLO_MAX_FRAME))
        });
        assert!(matches!(r, Err(FrameError::Bad(_))));
    }
}

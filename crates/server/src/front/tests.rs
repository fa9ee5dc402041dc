use super::*;
use bytes::{Bytes, BytesMut};
use synod_zk::jute::{JuteWrite, Reader};

#[test]
fn digest_identity_matches_zookeeper() {
    // ZooKeeper's DigestAuthenticationProvider.generateDigest("super:test").
    assert_eq!(
        digest_id("super:test"),
        "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
    );
    // No colon: the whole credential is the user (ZooKeeper accepts it too).
    assert!(digest_id("nocolon").starts_with("nocolon:"));
    assert!(digest_id("").starts_with(':'));
}

mod hostile {
    use super::*;
    use crate::fuzz::{block_on, bounded, config, mutate, mutation};
    use proptest::prelude::*;

    fn connect_body() -> Vec<u8> {
        let mut b = BytesMut::new();
        b.int(0);
        b.long(5);
        b.int(10_000);
        b.long(0x0100_0000_0000_0001);
        b.buffer(&[9u8; 16]);
        b.boolean(false);
        b.to_vec()
    }

    fn auth_body() -> Vec<u8> {
        let mut b = BytesMut::new();
        b.int(0);
        b.string("digest");
        b.buffer(b"user:password");
        b.to_vec()
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// What the client port does with the first bytes of a connection: read a frame (at
    /// most jute.maxbuffer), parse it as a ConnectRequest, and the same for auth.
    fn consume(data: &[u8]) {
        bounded(data.len(), || {
            let mut r = data;
            if let Ok(body) = block_on(read_request(&mut r, None, 0xfffff)) {
                let _ = parse_connect(body.clone());
                let _ = parse_auth(body.clone());
                // A request header, as for every frame after the connect.
                let mut h = Reader::new(body);
                let _ = (h.int(), h.int(), h.rest());
            }
            let _ = parse_connect(Bytes::copy_from_slice(data));
            let _ = parse_auth(Bytes::copy_from_slice(data));
        });
    }

    proptest! {
        #![proptest_config(config(3_000))]

        #[test]
        fn mutated_connect_and_auth_frames_never_panic(
            which in any::<bool>(),
            muts in prop::collection::vec(mutation(), 1..5),
        ) {
            let corpus = [framed(&connect_body()), framed(&auth_body())];
            let base = &corpus[which as usize];
            consume(&mutate(base, &muts, &corpus));
        }

        #[test]
        fn random_client_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
            consume(&data);
        }
    }

    #[test]
    fn valid_connect_and_auth_parse() {
        let c = parse_connect(Bytes::from(connect_body())).unwrap();
        assert_eq!((c.last_zxid, c.timeout_ms), (5, 10_000));
        assert_eq!(c.password.len(), 16);
        let (_, scheme, cred) = parse_auth(Bytes::from(auth_body())).unwrap();
        assert_eq!(
            (scheme.as_str(), &cred.unwrap()[..]),
            ("digest", &b"user:password"[..])
        );
    }

    #[test]
    fn claimed_lengths_are_not_allocated() {
        // Within jute.maxbuffer but not sent: an error, without a megabyte allocated.
        let d = framed(&[1, 2, 3]);
        let mut d = d.clone();
        d[..4].copy_from_slice(&0xfffffi32.to_be_bytes());
        let r = bounded(d.len(), || {
            block_on(read_request(&mut &d[..], None, 0xfffff))
        });
        assert!(r.is_err());
        // Over jute.maxbuffer, or negative: refused before reading anything.
        for len in [0x100000i32, i32::MAX, -1, i32::MIN] {
            let d = len.to_be_bytes();
            let r = block_on(read_request(&mut &d[..], None, 0xfffff));
            assert!(r.unwrap_err().contains("out of range"));
        }
    }
}

use super::*;
use proptest::prelude::*;

fn users(u: &str) -> Option<String> {
    (u == "bob").then(|| "bobsecret".to_string())
}

/// A client's digest-response, as pure-sasl (kazoo) builds it.
fn client_response(user: &str, password: &str, nonce: &str, extra: &str) -> Vec<u8> {
    let cnonce = "4219837182";
    let secret = Secret {
        username: user.as_bytes(),
        realm: REALM.as_bytes(),
        password: password.as_bytes(),
        nonce: nonce.as_bytes(),
        cnonce: cnonce.as_bytes(),
        nc: b"00000001",
        authzid: None,
    };
    let response = secret.digest(format!("AUTHENTICATE:{DIGEST_URI}").as_bytes());
    format!(
        "qop=auth,realm=\"{REALM}\",username=\"{user}\",nonce=\"{nonce}\",cnonce=\"{cnonce}\",nc=00000001,digest-uri=\"{DIGEST_URI}\",response={response}{extra}"
    )
    .into_bytes()
}

fn challenged() -> DigestMd5Server {
    let mut s = DigestMd5Server::new("n0nce+/=".into());
    let Ok(Step::Challenge(c)) = s.step(b"", users) else {
        panic!("no challenge")
    };
    let c = String::from_utf8(c).unwrap();
    assert!(c.contains("realm=\"zk-sasl-md5\""), "{c}");
    assert!(c.contains("nonce=\"n0nce+/=\""), "{c}");
    // As ZooKeeper words it: no qop (auth, the default, is the only one offered).
    assert!(
        c.contains("algorithm=md5-sess") && !c.contains("qop"),
        "{c}"
    );
    s
}

#[test]
fn rfc_2831_example() {
    let s = Secret {
        username: b"chris",
        realm: b"elwood.innosoft.com",
        password: b"secret",
        nonce: b"OA6MG9tEQGm2hh",
        cnonce: b"OA6MHXh6VqTrRk",
        nc: b"00000001",
        authzid: None,
    };
    assert_eq!(
        s.digest(b"AUTHENTICATE:imap/elwood.innosoft.com"),
        "d388dad90d4bbd760a152321f2143af7"
    );
    assert_eq!(
        s.digest(b":imap/elwood.innosoft.com"),
        "ea40f60335c427b5527b84dbabcdfffd"
    );
}

#[test]
fn the_right_password_authenticates_and_proves_the_server() {
    let mut s = challenged();
    let r = s.step(&client_response("bob", "bobsecret", "n0nce+/=", ""), users);
    let Ok(Step::Success { user, rspauth }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(user, "bob");
    let secret = Secret {
        username: b"bob",
        realm: REALM.as_bytes(),
        password: b"bobsecret",
        nonce: b"n0nce+/=",
        cnonce: b"4219837182",
        nc: b"00000001",
        authzid: None,
    };
    let want = format!(
        "rspauth={}",
        secret.digest(format!(":{DIGEST_URI}").as_bytes())
    );
    assert_eq!(String::from_utf8(rspauth).unwrap(), want);
    assert!(s.finished());
    // Nothing after the end.
    assert!(s.step(b"", users).is_err());
}

#[test]
fn wrong_or_mismatched_responses_fail() {
    let nonce = "n0nce+/=";
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (client_response("bob", "wrong", nonce, ""), "wrong password"),
        (
            client_response("eve", "bobsecret", nonce, ""),
            "unknown user",
        ),
        (client_response("bob", "bobsecret", "other", ""), "nonce"),
        (
            client_response("bob", "bobsecret", nonce, ",charset=latin1"),
            "charset",
        ),
        (b"username=\"bob\"".to_vec(), "nonce"),
        (
            String::from_utf8(client_response("bob", "bobsecret", nonce, ""))
                .unwrap()
                .replace("qop=auth", "qop=auth-conf")
                .into_bytes(),
            "qop",
        ),
        (
            String::from_utf8(client_response("bob", "bobsecret", nonce, ""))
                .unwrap()
                .replace("zookeeper/zk-sasl-md5", "imap/zk-sasl-md5")
                .into_bytes(),
            "digest-uri",
        ),
        (
            String::from_utf8(client_response("bob", "bobsecret", nonce, ""))
                .unwrap()
                .replace("nc=00000001", "nc=00000002")
                .into_bytes(),
            "nc",
        ),
        (
            String::from_utf8(client_response("bob", "bobsecret", nonce, ""))
                .unwrap()
                .replace("realm=\"zk-sasl-md5\"", "realm=\"elsewhere\"")
                .into_bytes(),
            "realm",
        ),
        (
            client_response("bob", "bobsecret", nonce, ",nonce=\"x\""),
            "twice",
        ),
        (vec![b'a'; MAX_RESPONSE + 1], "bytes"),
    ];
    for (token, want) in cases {
        let mut s = challenged();
        let e = s.step(&token, users).unwrap_err();
        assert!(
            e.0.contains(want),
            "{}: {e}",
            String::from_utf8_lossy(&token)
        );
        // A failed exchange stays failed, even with the right response.
        assert!(s
            .step(&client_response("bob", "bobsecret", nonce, ""), users)
            .is_err());
    }
}

#[test]
fn an_initial_response_is_ignored_as_zookeeper_ignores_it() {
    let mut s = DigestMd5Server::new("n".into());
    assert!(matches!(
        s.step(b"charset=utf-8", users),
        Ok(Step::Challenge(_))
    ));
    // The exchange goes on: the next token is the digest-response.
    assert!(matches!(
        s.step(&client_response("bob", "bobsecret", "n", ""), users),
        Ok(Step::Success { .. })
    ));
}

#[test]
fn directives_parse_as_rfc_2831_writes_them() {
    let d = parse_directives(b" a = \"x\\\"y\" ,, B=tok ,c=\"\"").unwrap();
    assert_eq!(
        d,
        vec![
            ("a".to_string(), b"x\"y".to_vec()),
            ("b".to_string(), b"tok".to_vec()),
            ("c".to_string(), vec![]),
        ]
    );
    for bad in [
        &b"a"[..],
        b"a=\"open",
        b"a=\"x\"y",
        b"=x",
        b"a=x b=y",
        b"a=1,a=2",
        b"a=\"\\",
        b"\x00=1",
    ] {
        assert!(
            parse_directives(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let many: String = (0..40).map(|i| format!("k{i}=v,")).collect();
    assert!(parse_directives(many.as_bytes()).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes never panic the parser, and never authenticate.
    #[test]
    fn junk_is_rejected(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_directives(&bytes);
        let mut s = challenged();
        let r = s.step(&bytes, users);
        prop_assert!(r.is_err());
    }

    /// A valid response with one byte changed or cut never panics and never authenticates
    /// unless the change leaves it meaning the same.
    #[test]
    fn mutated_responses_are_rejected(at in 0usize..400, to in any::<u8>(), cut in any::<bool>()) {
        let good = client_response("bob", "bobsecret", "n0nce+/=", "");
        let mut bad = good.clone();
        let at = at % good.len();
        if cut { bad.truncate(at) } else { bad[at] = to }
        let mut s = challenged();
        if let Ok(Step::Success { user, .. }) = s.step(&bad, users) {
            // Only changes that keep the meaning (letter case of a name or of the hex digits,
            // whitespace, commas, an ignored directive) may still authenticate, and only as bob.
            prop_assert_eq!(user, "bob");
            let norm = |b: &[u8]| -> Vec<(String, Vec<u8>)> {
                // Unknown directives are ignored, and a missing qop means auth.
                let known = ["realm", "username", "nonce", "cnonce", "nc", "digest-uri", "response", "charset", "authzid"];
                let mut d = parse_directives(b).unwrap();
                d.retain(|(n, _)| known.contains(&n.as_str()));
                for (n, v) in d.iter_mut() {
                    if n == "response" { v.make_ascii_lowercase() }
                }
                d
            };
            prop_assert_eq!(norm(&bad), norm(&good));
        }
    }
}

/// With `charset=utf-8`, a password whose characters all fit ISO 8859-1 is hashed in ISO
/// 8859-1 (RFC 2831 §2.1.2.1), as the JDK's client hashes it; others in UTF-8.
#[test]
fn utf8_clients_hash_latin1_passwords_in_latin1() {
    let users = |u: &str| match u {
        "zoë" => Some("pässword".to_string()),
        "kim" => Some("密码".to_string()),
        _ => None,
    };
    let respond = |user: &str, hashed_user: &[u8], hashed_password: &[u8]| {
        let secret = Secret {
            username: hashed_user,
            realm: REALM.as_bytes(),
            password: hashed_password,
            nonce: b"n0nce+/=",
            cnonce: b"c",
            nc: b"00000001",
            authzid: None,
        };
        let response = secret.digest(format!("AUTHENTICATE:{DIGEST_URI}").as_bytes());
        format!(
            "charset=utf-8,qop=auth,realm=\"{REALM}\",username=\"{user}\",nonce=\"n0nce+/=\",cnonce=\"c\",nc=00000001,digest-uri=\"{DIGEST_URI}\",response={response}"
        )
        .into_bytes()
    };
    let latin1 = |s: &str| s.chars().map(|c| c as u32 as u8).collect::<Vec<u8>>();
    let mut s = DigestMd5Server::new("n0nce+/=".into());
    let _ = s.step(b"", users);
    let r = s.step(&respond("zoë", &latin1("zoë"), &latin1("pässword")), users);
    assert!(matches!(r, Ok(Step::Success { .. })), "{r:?}");
    // The same password hashed in UTF-8 is not what an RFC client sends.
    let mut s = DigestMd5Server::new("n0nce+/=".into());
    let _ = s.step(b"", users);
    let r = s.step(
        &respond("zoë", "zoë".as_bytes(), "pässword".as_bytes()),
        users,
    );
    assert!(r.is_err(), "{r:?}");
    // Outside ISO 8859-1: UTF-8.
    let mut s = DigestMd5Server::new("n0nce+/=".into());
    let _ = s.step(b"", users);
    let r = s.step(&respond("kim", b"kim", "密码".as_bytes()), users);
    assert!(matches!(r, Ok(Step::Success { .. })), "{r:?}");
}

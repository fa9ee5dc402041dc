use super::*;

fn args<'a>(p: &'a str, flags: i32, zxid: i64, acl: &'a [Acl]) -> CreateArgs<'a> {
    CreateArgs {
        path: p,
        data: Some(Bytes::from_static(b"d")),
        acl,
        flags,
        container: false,
        ttl: 0,
        session: 7,
        auth: &[],
        zxid,
        time: 1000 + zxid,
    }
}

#[test]
fn create_sets_stats_and_parent() {
    let mut t = Tree::default();
    let acl = open_acl();
    let mut ch = Vec::new();
    let (p, s) = t
        .create(args("/a", mode::PERSISTENT, 5, &acl), &mut ch)
        .unwrap();
    assert_eq!(p, "/a");
    assert_eq!(
        (s.czxid, s.mzxid, s.pzxid, s.version, s.data_length),
        (5, 5, 5, 0, 1)
    );
    let root = t.get("/").unwrap().stat();
    // One counted create; "zookeeper" was never created by a txn: 2×1 − 2 = 0.
    assert_eq!((root.cversion, root.pzxid, root.num_children), (0, 5, 2));
    assert_eq!(Tree::default().get("/").unwrap().stat().cversion, -1);
    assert_eq!(
        Tree::default().get("/zookeeper").unwrap().stat().cversion,
        -2
    );
    assert_eq!(
        t.create(args("/a", 0, 6, &acl), &mut ch),
        Err(err::NODE_EXISTS)
    );
    assert_eq!(
        t.create(args("/x/y", 0, 6, &acl), &mut ch),
        Err(err::NO_NODE)
    );
    assert_eq!(
        t.create(args("/bad/", 0, 6, &acl), &mut ch),
        Err(err::NO_NODE),
        "the parent is looked up before the full path validation"
    );
    assert_eq!(
        t.create(args("/a/.", 0, 6, &acl), &mut ch),
        Err(err::BAD_ARGUMENTS)
    );
    assert_eq!(
        t.create(args("bad", 0, 6, &acl), &mut ch),
        Err(err::BAD_ARGUMENTS)
    );
    assert_eq!(
        t.create(args("/e", 0, 6, &[]), &mut ch),
        Err(err::INVALID_ACL)
    );
}

#[test]
fn sequential_names_come_from_the_parent_cversion() {
    let mut t = Tree::default();
    let acl = open_acl();
    let mut ch = Vec::new();
    t.create(args("/q", 0, 1, &acl), &mut ch).unwrap();
    let (a, _) = t
        .create(args("/q/n-", mode::PERSISTENT_SEQUENTIAL, 2, &acl), &mut ch)
        .unwrap();
    let (b, _) = t
        .create(args("/q/n-", mode::PERSISTENT_SEQUENTIAL, 3, &acl), &mut ch)
        .unwrap();
    assert_eq!(a, "/q/n-0000000000");
    assert_eq!(b, "/q/n-0000000001");
    t.delete(&a, -1, &[], 4, &mut ch).unwrap();
    let (c, _) = t
        .create(args("/q/n-", mode::PERSISTENT_SEQUENTIAL, 5, &acl), &mut ch)
        .unwrap();
    assert_eq!(c, "/q/n-0000000002", "the suffix counts creations only");
    assert_eq!(
        t.get("/q").unwrap().stat().cversion,
        4,
        "visible: creates + deletes"
    );
}

#[test]
fn versions_and_deletes() {
    let mut t = Tree::default();
    let acl = open_acl();
    let mut ch = Vec::new();
    t.create(args("/a", 0, 1, &acl), &mut ch).unwrap();
    t.create(args("/a/b", 0, 2, &acl), &mut ch).unwrap();
    let s = t
        .set_data(
            "/a",
            Some(Bytes::from_static(b"xyz")),
            0,
            &[],
            3,
            9,
            &mut ch,
        )
        .unwrap();
    assert_eq!(
        (s.version, s.mzxid, s.mtime, s.data_length, s.num_children),
        (1, 3, 9, 3, 1)
    );
    assert_eq!(
        t.set_data("/a", Some(Bytes::new()), 0, &[], 4, 9, &mut ch),
        Err(err::BAD_VERSION)
    );
    assert_eq!(t.delete("/a", -1, &[], 4, &mut ch), Err(err::NOT_EMPTY));
    assert_eq!(t.delete("/a/b", 3, &[], 4, &mut ch), Err(err::BAD_VERSION));
    t.delete("/a/b", 0, &[], 4, &mut ch).unwrap();
    let a = t.get("/a").unwrap().stat();
    assert_eq!((a.cversion, a.pzxid, a.num_children), (2, 4, 0));
    assert_eq!(
        t.delete("/zookeeper", -1, &[], 5, &mut ch),
        Err(err::BAD_ARGUMENTS)
    );
}

#[test]
fn ephemerals_go_with_their_session() {
    let mut t = Tree::default();
    let acl = open_acl();
    let mut ch = Vec::new();
    assert_eq!(
        t.create(args("/e", mode::EPHEMERAL, 1, &acl), &mut ch),
        Err(err::SESSION_EXPIRED)
    );
    t.create_session(7, 10_000, Bytes::from_static(b"pw"));
    let (_, s) = t
        .create(args("/e", mode::EPHEMERAL, 2, &acl), &mut ch)
        .unwrap();
    assert_eq!(s.ephemeral_owner, 7);
    assert_eq!(
        t.create(args("/e/child", 0, 3, &acl), &mut ch),
        Err(err::NO_CHILDREN_FOR_EPHEMERALS)
    );
    assert_eq!(t.ephemerals(7, "/"), vec!["/e".to_string()]);
    ch.clear();
    assert!(t.close_session(7, 4, &mut ch));
    assert!(t.get("/e").is_none());
    assert!(ch.contains(&Change::Deleted(Arc::from("/e"), acl.clone())));
}

#[test]
fn containers_and_ttls_are_reaped_when_due() {
    let mut t = Tree::default();
    let acl = open_acl();
    let mut ch = Vec::new();
    t.create(args("/c", mode::CONTAINER, 1, &acl), &mut ch)
        .unwrap();
    assert!(
        !t.reap_due("/c", 0),
        "a container that never had a child stays"
    );
    t.create(args("/c/x", 0, 2, &acl), &mut ch).unwrap();
    assert!(!t.reap_due("/c", 0));
    t.delete("/c/x", -1, &[], 3, &mut ch).unwrap();
    assert!(t.reap_due("/c", 0));
    let mut a = args("/t", mode::PERSISTENT_WITH_TTL, 4, &acl);
    a.ttl = 100;
    let (_, s) = t.create(a, &mut ch).unwrap();
    assert_eq!(s.ephemeral_owner, 0, "clients see no owner on TTL nodes");
    assert_eq!(t.get("/t").unwrap().kind(), Kind::Ttl(100));
    assert!(!t.reap_due("/t", 1004 + 50));
    assert!(t.reap_due("/t", 1004 + 101));
    assert!(t.reap("/t", 1004 + 101, 5, &mut ch));
    assert!(t.get("/t").is_none());
}

#[test]
fn acls() {
    let digest = Id {
        scheme: "digest".into(),
        id: "bob:hash".into(),
    };
    let acl = vec![Acl {
        perms: perms::READ | perms::CREATE,
        id: digest.clone(),
    }];
    assert!(allowed(&acl, perms::READ, std::slice::from_ref(&digest)));
    assert!(!allowed(&acl, perms::WRITE, std::slice::from_ref(&digest)));
    assert!(!allowed(&acl, perms::READ, &[]));
    let ip = vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "ip".into(),
            id: "127.0.0.0/8".into(),
        },
    }];
    let me = Id {
        scheme: "ip".into(),
        id: "127.0.0.1".into(),
    };
    assert!(allowed(&ip, perms::READ, &[me]));
    let auth_acl = vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "auth".into(),
            id: "".into(),
        },
    }];
    assert_eq!(fix_acl(&auth_acl, &[]), Err(err::INVALID_ACL));
    assert_eq!(
        fix_acl(&auth_acl, std::slice::from_ref(&digest)).unwrap()[0].id,
        digest
    );
}

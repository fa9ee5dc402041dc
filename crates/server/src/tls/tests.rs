use super::certs::{create_ca, create_client, create_node};
use super::*;
use crate::config::{ClientAuth, TlsConfig};
use std::path::Path;

/// The files `synod certs` makes for node `id` in `dir`, as a `[tls]` section.
pub(crate) fn files(dir: &Path, id: NodeId) -> TlsConfig {
    TlsConfig {
        ca_file: dir.join("ca.crt"),
        cert_file: dir.join(format!("node-{id}.crt")),
        key_file: dir.join(format!("node-{id}.key")),
        client_auth: ClientAuth::Want,
        admin: true,
        admin_subjects: vec!["CN=root,O=synod".into()],
        kv: true,
    }
}

fn der(path: &Path) -> CertificateDer<'static> {
    load_certs(path, "test").unwrap().remove(0)
}

#[test]
fn node_certificates_name_their_node_and_load_only_for_it() {
    let d = tempfile::tempdir().unwrap();
    create_ca(d.path(), "My Cluster_1", 10).unwrap();
    assert!(
        create_ca(d.path(), "My Cluster_1", 10).is_err(),
        "a CA is never overwritten"
    );
    for id in 1..=2 {
        create_node(d.path(), "My Cluster_1", id, &["db.example".into()], 10).unwrap();
    }
    let label = cluster_label("My Cluster_1");
    assert!(
        label.starts_with("my-cluster-1-") && label.len() == 21,
        "{label}"
    );
    assert_eq!(
        node_name("My Cluster_1", 2),
        format!("node-2.{label}.synod")
    );
    assert_eq!(cluster_label("prod-a"), "prod-a");
    assert_ne!(cluster_label("prod_a"), cluster_label("prod-a"));
    assert_ne!(cluster_label("Prod-a"), cluster_label("prod-a"));
    assert_eq!(
        cert_node_ids(&der(&d.path().join("node-2.crt")), "My Cluster_1"),
        vec![2]
    );
    assert!(cert_node_ids(&der(&d.path().join("node-2.crt")), "other").is_empty());
    let tls = Tls::load(&files(d.path(), 1), "My Cluster_1", 1).unwrap();
    assert!(tls.not_after_unix() > 0);
    // Node 2's files on node 1, or the files of another cluster: refused at start.
    let mut wrong = files(d.path(), 2);
    let e = Tls::load(&wrong, "My Cluster_1", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("this is node 1"), "{e}");
    let e = Tls::load(&files(d.path(), 1), "other", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("names node(s) []"), "{e}");
    // A certificate that another CA signed.
    let other = tempfile::tempdir().unwrap();
    create_ca(other.path(), "My Cluster_1", 10).unwrap();
    wrong.ca_file = other.path().join("ca.crt");
    wrong.cert_file = d.path().join("node-1.crt");
    wrong.key_file = d.path().join("node-1.key");
    let e = Tls::load(&wrong, "My Cluster_1", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("does not verify"), "{e}");
    // A key that is not the certificate's.
    let mut mismatched = files(d.path(), 1);
    mismatched.key_file = d.path().join("node-2.key");
    let e = Tls::load(&mismatched, "My Cluster_1", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("does not match its key"), "{e}");
    // Junk files.
    std::fs::write(
        d.path().join("junk.crt"),
        b"-----BEGIN CERTIFICATE-----\nnot base64!\n",
    )
    .unwrap();
    let mut junk = files(d.path(), 1);
    junk.cert_file = d.path().join("junk.crt");
    assert!(Tls::load(&junk, "My Cluster_1", 1).is_err());
    junk.cert_file = d.path().join("missing.crt");
    let e = Tls::load(&junk, "My Cluster_1", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("cannot read"), "{e}");
}

#[test]
fn a_reload_takes_new_files_and_a_bad_one_keeps_the_old() {
    let d = tempfile::tempdir().unwrap();
    create_ca(d.path(), "c", 10).unwrap();
    create_node(d.path(), "c", 1, &[], 10).unwrap();
    let tls = Tls::load(&files(d.path(), 1), "c", 1).unwrap();
    let first = tls.serial();
    create_node(d.path(), "c", 1, &[], 20).unwrap();
    tls.reload().unwrap();
    assert_ne!(tls.serial(), first, "the new certificate is in use");
    let second = tls.serial();
    std::fs::write(d.path().join("node-1.crt"), b"garbage").unwrap();
    assert!(tls.reload().is_err());
    assert_eq!(tls.serial(), second, "a failed reload keeps what works");
}

#[test]
fn client_subjects_read_as_java_names_them() {
    let d = tempfile::tempdir().unwrap();
    create_ca(d.path(), "c", 10).unwrap();
    create_client(d.path(), "alice", 10).unwrap();
    let s = x509_subject(&der(&d.path().join("client-alice.crt"))).unwrap();
    assert_eq!(s, "CN=alice,O=synod");
    assert!(create_client(d.path(), "bad,name", 10).is_err());
    assert!(x509_subject(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])).is_none());
}

#[test]
fn rfc2253_escapes_special_characters() {
    assert_eq!(names::escape_for_test("a,b+c"), "a\\,b\\+c");
    assert_eq!(names::escape_for_test(" #x "), "\\ #x\\ ");
    assert_eq!(names::escape_for_test("#x"), "\\#x");
}

//! `synod certs`: a cluster CA, node certificates and client certificates, as PEM files.
//!
//! ```text
//! ca.crt, ca.key                 the cluster CA (keep ca.key offline in production)
//! node-<id>.crt, node-<id>.key   node <id>: DNS name node-<id>.<cluster>.synod plus the host
//!                                names and addresses clients dial; server and client auth
//! client-<name>.crt/.key         a client: subject CN=<name>,O=synod (its x509 ACL id)
//! ```
//! Keys are ECDSA P-256, written with mode 0600.

use super::node_name;
use anyhow::{bail, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use std::path::{Path, PathBuf};
use synod_core::NodeId;
use time::{Duration, OffsetDateTime};

/// Default validity of a node or client certificate, and of a CA.
pub const NODE_DAYS: u32 = 365;
pub const CA_DAYS: u32 = 3650;

fn write(dir: &Path, name: &str, text: &str, secret: bool) -> Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    // Renamed into place: a server reloading on SIGHUP never reads half a file.
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn validity(p: &mut CertificateParams, days: u32) {
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(days as i64);
}

fn serial(p: &mut CertificateParams) {
    let mut s = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut s);
    s[0] &= 0x7f; // positive
    p.serial_number = Some(s.to_vec().into());
}

/// Create the CA of `cluster_id` in `dir` (`ca.crt`, `ca.key`); refuses to overwrite one.
pub fn create_ca(dir: &Path, cluster_id: &str, days: u32) -> Result<PathBuf> {
    if dir.join("ca.key").exists() {
        bail!(
            "{} already holds a CA key: refusing to overwrite it (remove it first)",
            dir.display()
        );
    }
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "synod");
    dn.push(
        DnType::CommonName,
        format!("synod CA of cluster {cluster_id}"),
    );
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut p, days);
    serial(&mut p);
    let key = KeyPair::generate().context("cannot generate a key")?;
    let cert = p.self_signed(&key).context("cannot sign the CA")?;
    write(dir, "ca.key", &key.serialize_pem(), true)?;
    write(dir, "ca.crt", &cert.pem(), false)
}

/// The CA of `dir`, to sign with.
fn ca(dir: &Path) -> Result<(rcgen::Certificate, KeyPair)> {
    let read = |n: &str| {
        std::fs::read_to_string(dir.join(n)).with_context(|| {
            format!(
                "cannot read {} (create the CA first: synod certs ca --dir {})",
                dir.join(n).display(),
                dir.display()
            )
        })
    };
    let key = KeyPair::from_pem(&read("ca.key")?).context("ca.key is not a PEM key")?;
    let params = CertificateParams::from_ca_cert_pem(&read("ca.crt")?)
        .context("ca.crt is not a PEM CA certificate")?;
    // Re-signing the CA's own parameters gives an issuer with the same name and key, which is
    // all a signature by it needs.
    let cert = params
        .self_signed(&key)
        .context("ca.key does not sign ca.crt")?;
    Ok((cert, key))
}

fn san(host: &str) -> Result<SanType> {
    Ok(match host.parse::<std::net::IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(
            host.to_string()
                .try_into()
                .with_context(|| format!("'{host}' is not a DNS name"))?,
        ),
    })
}

/// Create node `id`'s certificate and key in `dir`, signed by the CA there. `hosts` are the
/// names and addresses clients use to reach the node (checked by clients that verify host
/// names); `localhost` and 127.0.0.1 are always included.
pub fn create_node(
    dir: &Path,
    cluster_id: &str,
    id: NodeId,
    hosts: &[String],
    days: u32,
) -> Result<PathBuf> {
    let (ca, ca_key) = ca(dir)?;
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "synod");
    dn.push(DnType::CommonName, node_name(cluster_id, id));
    p.distinguished_name = dn;
    let mut names = vec![
        node_name(cluster_id, id),
        "localhost".into(),
        "127.0.0.1".into(),
    ];
    names.extend(hosts.iter().cloned());
    names.dedup();
    p.subject_alt_names = names.iter().map(|h| san(h)).collect::<Result<_>>()?;
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut p, days);
    serial(&mut p);
    let key = KeyPair::generate().context("cannot generate a key")?;
    let cert = p.signed_by(&key, &ca, &ca_key).context("cannot sign")?;
    write(dir, &format!("node-{id}.key"), &key.serialize_pem(), true)?;
    write(dir, &format!("node-{id}.crt"), &cert.pem(), false)
}

/// Create a client certificate for `name` (subject `CN=<name>,O=synod`).
pub fn create_client(dir: &Path, name: &str, days: u32) -> Result<PathBuf> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    {
        bail!("client name '{name}': use letters, digits and -_.@");
    }
    let (ca, ca_key) = ca(dir)?;
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "synod");
    dn.push(DnType::CommonName, name);
    p.distinguished_name = dn;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut p, days);
    serial(&mut p);
    let key = KeyPair::generate().context("cannot generate a key")?;
    let cert = p.signed_by(&key, &ca, &ca_key).context("cannot sign")?;
    write(
        dir,
        &format!("client-{name}.key"),
        &key.serialize_pem(),
        true,
    )?;
    write(dir, &format!("client-{name}.crt"), &cert.pem(), false)
}

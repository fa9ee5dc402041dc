//! What a certificate says: the nodes it names, its subject as an ACL id, its validity.

use rustls_pki_types::CertificateDer;
use synod_core::NodeId;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The cluster id as one DNS label: the id itself when it is one (lowercase letters, digits,
/// inner dashes, at most 63), else its letters and digits with a hash of the whole id, so that
/// two ids never share a label (`prod_a` and `prod-a` differ).
pub fn cluster_label(cluster_id: &str) -> String {
    let plain = !cluster_id.is_empty()
        && cluster_id.len() <= 63
        && cluster_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !cluster_id.starts_with('-')
        && !cluster_id.ends_with('-');
    if plain {
        return cluster_id.to_string();
    }
    let mut l: String = cluster_id
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() {
                c
            } else {
                '-'
            }
        })
        .collect();
    l.truncate(54);
    let l = l.trim_matches('-');
    let hash = crc32c::crc32c(cluster_id.as_bytes());
    if l.is_empty() {
        format!("cluster-{hash:08x}")
    } else {
        format!("{l}-{hash:08x}")
    }
}

/// The DNS name a node's certificate carries: `node-<id>.<cluster label>.synod`.
pub fn node_name(cluster_id: &str, id: NodeId) -> String {
    format!("node-{id}.{}.synod", cluster_label(cluster_id))
}

/// The nodes of `cluster_id` a certificate names. Nothing for junk.
pub fn cert_node_ids(der: &CertificateDer<'_>, cluster_id: &str) -> Vec<NodeId> {
    let Ok((_, cert)) = X509Certificate::from_der(der.as_ref()) else {
        return Vec::new();
    };
    let suffix = format!(".{}.synod", cluster_label(cluster_id));
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    let mut ids: Vec<NodeId> = san
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => d
                .to_ascii_lowercase()
                .strip_suffix(&suffix)?
                .strip_prefix("node-")?
                .parse()
                .ok(),
            _ => None,
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Short names Java's `X500Principal.getName()` (RFC 2253) uses; other attributes are written
/// as their dotted OID, as Java does.
const KEYWORDS: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// A certificate's subject as ZooKeeper's X509AuthenticationProvider names a client:
/// `X500Principal.getName()`, RFC 2253 (most specific RDN first, `,` between RDNs, `+` inside
/// one, special characters escaped), e.g. `CN=alice,O=synod`.
pub fn x509_subject(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter() {
        let mut parts = Vec::new();
        for attr in rdn.iter() {
            let oid = attr.attr_type().to_id_string();
            let key = KEYWORDS
                .iter()
                .find(|(o, _)| *o == oid)
                .map_or(oid.clone(), |(_, k)| k.to_string());
            let value = attr.as_str().ok()?;
            parts.push(format!("{key}={}", escape(value)));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// RFC 2253 §2.4 escaping.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let n = v.chars().count();
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i + 1 == n && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A certificate's expiry (Unix seconds) and serial number (hex).
pub(crate) fn validity(der: &CertificateDer<'_>) -> (i64, String) {
    match X509Certificate::from_der(der.as_ref()) {
        Ok((_, c)) => (c.validity().not_after.timestamp(), c.raw_serial_as_string()),
        Err(_) => (0, String::new()),
    }
}

#[cfg(test)]
pub(crate) fn escape_for_test(v: &str) -> String {
    escape(v)
}

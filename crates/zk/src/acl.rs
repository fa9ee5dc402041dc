//! ZooKeeper's ACL rules for the data tree: the open ACL, the permission check (`allowed`, with
//! the super user and `ip` ranges) and the check and expansion of a create's ACL (`fix_acl`).

use crate::jute::{err, perms, Acl, Id};
use std::sync::Arc;

pub fn open_acl() -> Arc<Vec<Acl>> {
    Arc::new(vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }])
}

/// Can `auth` (the session's identities) do `perm` under `acl`?
pub fn allowed(acl: &[Acl], perm: i32, auth: &[Id]) -> bool {
    if auth.iter().any(|i| i.scheme == "super") {
        return true;
    }
    acl.iter().any(|a| {
        a.perms & perm != 0
            && match a.id.scheme.as_str() {
                "world" => a.id.id == "anyone",
                "ip" => auth
                    .iter()
                    .any(|i| i.scheme == "ip" && ip_matches(&a.id.id, &i.id)),
                _ => auth.contains(&a.id),
            }
    })
}

/// `spec` is an address or `address/bits` (IPv4).
fn ip_matches(spec: &str, addr: &str) -> bool {
    let parse = |s: &str| -> Option<u32> {
        let o: Vec<u8> = s
            .split('.')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        (o.len() == 4).then(|| u32::from_be_bytes([o[0], o[1], o[2], o[3]]))
    };
    let (net, bits) = match spec.split_once('/') {
        Some((n, b)) => (n, b.parse::<u32>().unwrap_or(33)),
        None => (spec, 32),
    };
    match (parse(net), parse(addr)) {
        (Some(n), Some(a)) if bits <= 32 => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            n & mask == a & mask
        }
        _ => spec == addr,
    }
}

/// Check and complete an ACL for a create or setACL (the `auth` scheme stands for the session's
/// authenticated identities).
pub fn fix_acl(acl: &[Acl], auth: &[Id]) -> Result<Vec<Acl>, i32> {
    if acl.is_empty() {
        return Err(err::INVALID_ACL);
    }
    // Duplicates go first, the first of each kept in place, and `auth` is expanded after (as
    // ZooKeeper's fixupACL does: the expansion may repeat an entry, which then stays).
    let mut seen = std::collections::HashSet::new();
    let acl: Vec<&Acl> = acl.iter().filter(|a| seen.insert(*a)).collect();
    let mut out: Vec<Acl> = Vec::new();
    for a in acl {
        // ZooKeeper stores permission bits as sent (beyond ALL too).
        match a.id.scheme.as_str() {
            "world" if a.id.id == "anyone" => out.push(a.clone()),
            "auth" => {
                let mut any = false;
                for i in auth
                    .iter()
                    .filter(|i| i.scheme != "ip" && i.scheme != "super")
                {
                    any = true;
                    out.push(Acl {
                        perms: a.perms,
                        id: i.clone(),
                    });
                }
                if !any {
                    return Err(err::INVALID_ACL);
                }
            }
            "digest" if a.id.id.split_once(':').is_some() => out.push(a.clone()),
            "ip" if valid_ip(&a.id.id) => out.push(a.clone()),
            // As ZooKeeper with its SASL and X509 providers registered: a SASL id is a user
            // or Kerberos name, an x509 id a certificate subject.
            "sasl" if valid_sasl(&a.id.id) => out.push(a.clone()),
            "x509" if !a.id.id.is_empty() => out.push(a.clone()),
            _ => return Err(err::INVALID_ACL),
        }
    }
    Ok(out)
}

/// A `sasl` ACL id as ZooKeeper's SASLAuthenticationProvider.isValid takes it (a KerberosName):
/// any name without `@`, or `name[/host]@realm` with no further `/` or `@`.
fn valid_sasl(id: &str) -> bool {
    match id.split_once('@') {
        None => true,
        Some((principal, realm)) => {
            !realm.contains(['@', '/']) && principal.matches('/').count() <= 1
        }
    }
}

/// An `ip` ACL id as ZooKeeper's IPAuthenticationProvider.isValid takes it: an IPv4 address,
/// optionally with a prefix length of at most 32.
fn valid_ip(spec: &str) -> bool {
    let (addr, bits) = match spec.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (spec, None),
    };
    let octets: Vec<&str> = addr.split('.').collect();
    octets.len() == 4
        && octets
            .iter()
            .all(|o| !o.is_empty() && o.parse::<u8>().is_ok())
        && bits.is_none_or(|b| b.parse::<u32>().is_ok_and(|b| b <= 32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            id: Id {
                scheme: scheme.into(),
                id: id.into(),
            },
        }
    }

    #[test]
    fn acls_are_checked_as_zookeeper_checks_them() {
        for bad in ["not-an-ip", "10.0.0.0/99", "::1", "1.2.3", "1.2.3.256", ""] {
            assert_eq!(
                fix_acl(&[acl(31, "ip", bad)], &[]),
                Err(err::INVALID_ACL),
                "{bad}"
            );
        }
        for good in ["10.0.0.1", "10.0.0.0/8", "0.0.0.0/0"] {
            assert!(fix_acl(&[acl(31, "ip", good)], &[]).is_ok(), "{good}");
        }
        for good in ["bob", "zk/host@EXAMPLE.COM", "bob@EXAMPLE.COM"] {
            assert!(fix_acl(&[acl(31, "sasl", good)], &[]).is_ok(), "{good}");
        }
        for bad in ["a@b@c", "a/b/c@R", "a@R/x"] {
            assert_eq!(
                fix_acl(&[acl(31, "sasl", bad)], &[]),
                Err(err::INVALID_ACL),
                "{bad}"
            );
        }
        assert!(fix_acl(&[acl(31, "x509", "CN=client,O=synod")], &[]).is_ok());
        assert_eq!(fix_acl(&[acl(31, "x509", "")], &[]), Err(err::INVALID_ACL));
        // Permission bits are kept as sent, and the order as set (duplicates dropped).
        let set = [
            acl(63, "world", "anyone"),
            acl(-1, "ip", "127.0.0.1"),
            acl(63, "world", "anyone"),
        ];
        assert_eq!(fix_acl(&set, &[]).unwrap(), set[..2].to_vec());
        // `auth` expands after the duplicates went: an identity may then appear twice.
        let alice = Id {
            scheme: "digest".into(),
            id: "alice:x".into(),
        };
        let bob = Id {
            scheme: "digest".into(),
            id: "bob:y".into(),
        };
        let set = [acl(31, "auth", ""), acl(31, "digest", "alice:x")];
        let got = fix_acl(&set, &[alice.clone(), bob.clone()]).unwrap();
        let ids: Vec<&Id> = got.iter().map(|a| &a.id).collect();
        assert_eq!(ids, vec![&alice, &bob, &alice]);
    }
}

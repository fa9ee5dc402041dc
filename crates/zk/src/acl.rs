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
    let mut out = Vec::new();
    for a in acl {
        if a.perms & !perms::ALL != 0 {
            return Err(err::INVALID_ACL);
        }
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
            "ip" if !a.id.id.is_empty() => out.push(a.clone()),
            _ => return Err(err::INVALID_ACL),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

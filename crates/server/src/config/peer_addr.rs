//! A peer's address as configured: `host:port`, where the host is an IP address or a DNS name
//! (a StatefulSet's stable pod names). Names are resolved at each connection attempt, so a
//! peer that comes back with another address is found again.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    host: String,
    port: u16,
}

impl PeerAddr {
    /// Parse `host:port` (`[v6]:port` for IPv6 literals).
    pub fn parse(s: &str) -> Result<PeerAddr, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(a.into());
        }
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("'{s}' is not host:port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{s}': '{port}' is not a port number"))?;
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if host.is_empty()
            || host.len() > 253
            || !host.trim_end_matches('.').split('.').all(label_ok)
        {
            return Err(format!(
                "'{s}': '{host}' is neither an IP address nor a DNS name"
            ));
        }
        Ok(PeerAddr {
            host: host.to_string(),
            port,
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address itself when the host is an IP address (no resolution needed).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.host
            .parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, self.port))
    }

    /// Resolve the address now (DNS names may map to a new address after a restart).
    pub async fn resolve(&self) -> std::io::Result<SocketAddr> {
        if let Some(a) = self.socket_addr() {
            return Ok(a);
        }
        tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .next()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{} resolves to no address", self.host),
                )
            })
    }
}

impl From<SocketAddr> for PeerAddr {
    fn from(a: SocketAddr) -> Self {
        PeerAddr {
            host: a.ip().to_string(),
            port: a.port(),
        }
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl schemars::JsonSchema for PeerAddr {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PeerAddr".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "host:port" })
    }
}

impl Serialize for PeerAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PeerAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PeerAddr::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::PeerAddr;

    #[test]
    fn addresses_and_names_parse_and_junk_is_refused() {
        let a = PeerAddr::parse("127.0.0.1:2888").unwrap();
        assert_eq!(a.socket_addr().unwrap().to_string(), "127.0.0.1:2888");
        let v6 = PeerAddr::parse("[::1]:2888").unwrap();
        assert_eq!(v6.to_string(), "[::1]:2888");
        let n = PeerAddr::parse("synod-1.synod-peers.default.svc.cluster.local:2888").unwrap();
        assert_eq!(n.host(), "synod-1.synod-peers.default.svc.cluster.local");
        assert!(n.socket_addr().is_none());
        for bad in [
            "",
            "host",
            "host:",
            "host:99999",
            "-bad:1",
            "a b:1",
            "x..y:1",
            ":80",
        ] {
            assert!(PeerAddr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_resolve_at_connection_time() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let a = rt
            .block_on(PeerAddr::parse("localhost:2888").unwrap().resolve())
            .unwrap();
        assert!(a.ip().is_loopback());
        assert_eq!(a.port(), 2888);
    }
}

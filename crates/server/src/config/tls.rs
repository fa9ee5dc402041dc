//! The `[tls]` section: the cluster's CA, this node's certificate and key, and what the client
//! ports ask of clients. See crate::tls for what each port does with them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[tls]`: the cluster CA, this node's certificate and key, and what the ports ask of
/// clients.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The cluster's CA certificate(s), PEM. Peers must present a certificate it signed, and so
    /// must clients when `client_auth` asks for one. Several CAs may be listed in the file
    /// while one is rotated out.
    pub ca_file: PathBuf,
    /// This node's certificate (PEM, chain allowed), made by `synod certs node`: it names the
    /// node (`node-<id>.<cluster>.synod`) and is used on every port.
    pub cert_file: PathBuf,
    /// The private key of `cert_file` (PEM).
    pub key_file: PathBuf,
    /// Client certificates on the ZooKeeper secure port and the KV gRPC port (ZooKeeper's
    /// `ssl.clientAuth`): `none`, `want` (asked for and checked when sent; an x509 ACL id
    /// when valid) or `need`. The admin port always asks (`want`): /health, /metrics and
    /// /v1/status are open, everything else needs a certificate from the cluster CA.
    #[serde(default)]
    pub client_auth: ClientAuth,
    /// Serve the admin port over HTTPS (default true).
    #[serde(default = "yes")]
    pub admin: bool,
    /// The client certificates (their subjects, RFC 2253 as x509 ACL ids are written) allowed
    /// the admin port's data endpoints (the key-value API, which bypasses ACLs; backups;
    /// fault injection). Default: `CN=root,O=synod` (`synod certs client --name root`). Other
    /// certificates of the CA, which ZooKeeper clients use for x509 ACLs, get 403 there.
    #[serde(default = "admin_subjects")]
    pub admin_subjects: Vec<String>,
    /// Serve the SconeKV gRPC port over TLS (default true).
    #[serde(default = "yes")]
    pub kv: bool,
}

fn yes() -> bool {
    true
}

fn admin_subjects() -> Vec<String> {
    vec!["CN=root,O=synod".into()]
}

/// What a TLS client port asks of clients.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    None,
    #[default]
    Want,
    Need,
}

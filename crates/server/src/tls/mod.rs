//! TLS on every port, and mutual TLS between peers.
//!
//! One cluster CA signs a certificate per node (`synod certs`, [`certs`]). A node certificate
//! names its node as the DNS name `node-<id>.<cluster>.synod` ([`node_name`]) and serves both
//! ends of a peer connection and the client ports:
//!
//! * **Peers.** An inbound peer must present a certificate from the cluster CA (the handshake
//!   fails otherwise, before any frame is read), the certificate must name a member of the
//!   cluster, and the hello that follows must claim that same node. An outbound connection
//!   checks that the peer's certificate comes from the CA and names the node dialled.
//! * **Clients** (the ZooKeeper secure port, SconeKV's gRPC, the admin port): the node's
//!   certificate; client certificates are asked for as `[tls] client_auth` says, checked
//!   against the same CA, and their subject becomes an `x509` ACL id ([`x509_subject`]).
//!
//! Everything is reloaded from the files on SIGHUP ([`Tls::reload`]): connections opened after
//! that use the new certificates; a reload that fails keeps the old ones and says why.

pub mod certs;
mod incoming;
mod names;

pub use incoming::{grpc_incoming, TlsConn};

pub use names::{cert_node_ids, cluster_label, node_name, x509_subject};

use crate::config::{ClientAuth, TlsConfig};
use anyhow::{bail, Context, Result};
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use std::path::Path;
use std::sync::{Arc, RwLock};
use synod_core::NodeId;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// TLS state of a node: the configurations built from the files, swapped whole on reload.
pub struct Tls {
    cfg: TlsConfig,
    cluster_id: String,
    me: NodeId,
    loaded: RwLock<Arc<Loaded>>,
}

struct Loaded {
    peer_server: Arc<ServerConfig>,
    peer_client: Arc<ClientConfig>,
    zookeeper: Arc<ServerConfig>,
    grpc: Arc<ServerConfig>,
    admin: Arc<ServerConfig>,
    not_after_unix: i64,
    serial: String,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// Load the files of `cfg` for node `me` of `cluster_id`: the certificate must come from
    /// the CA and name this node.
    pub fn load(cfg: &TlsConfig, cluster_id: &str, me: NodeId) -> Result<Arc<Tls>> {
        let loaded = load(cfg, cluster_id, me)?;
        Ok(Arc::new(Tls {
            cfg: cfg.clone(),
            cluster_id: cluster_id.to_string(),
            me,
            loaded: RwLock::new(Arc::new(loaded)),
        }))
    }

    /// Read the files again (SIGHUP). On error the certificates in use stay.
    pub fn reload(&self) -> Result<()> {
        let fresh = load(&self.cfg, &self.cluster_id, self.me)?;
        *self.loaded.write().expect("tls") = Arc::new(fresh);
        Ok(())
    }

    fn now(&self) -> Arc<Loaded> {
        self.loaded.read().expect("tls").clone()
    }

    /// Accepts peers: a certificate from the CA is required.
    pub fn peer_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.now().peer_server.clone())
    }

    /// Dials peers with this node's certificate.
    pub fn peer_connector(&self) -> TlsConnector {
        TlsConnector::from(self.now().peer_client.clone())
    }

    /// The name a peer's certificate must carry.
    pub fn peer_server_name(&self, peer: NodeId) -> ServerName<'static> {
        ServerName::try_from(node_name(&self.cluster_id, peer)).expect("node names are DNS names")
    }

    /// The ZooKeeper secure client port.
    pub fn client_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.now().zookeeper.clone())
    }

    /// The SconeKV gRPC port (ALPN h2, which gRPC clients require).
    pub fn grpc_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.now().grpc.clone())
    }

    /// The admin port (ALPN http/1.1).
    pub fn admin_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.now().admin.clone())
    }

    /// Which nodes a peer certificate names (parsed from its SAN DNS names).
    pub fn peer_ids(&self, der: &CertificateDer<'_>) -> Vec<NodeId> {
        cert_node_ids(der, &self.cluster_id)
    }

    /// When this node's certificate expires (Unix seconds), for the metrics.
    pub fn not_after_unix(&self) -> i64 {
        self.now().not_after_unix
    }

    /// The serial number of the certificate in use (hex), as [`serial_of`] reads it.
    pub fn serial(&self) -> String {
        self.now().serial.clone()
    }

    /// May a client certificate with this subject use the admin port's data endpoints?
    pub fn admin_subject(&self, subject: &str) -> bool {
        self.cfg.admin_subjects.iter().any(|s| s == subject)
    }

    pub fn client_auth(&self) -> ClientAuth {
        self.cfg.client_auth
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read the {what} {}", path.display()))
}

fn load_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{} is not a PEM certificate file: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{} holds no certificate", path.display());
    }
    Ok(certs)
}

fn load(cfg: &TlsConfig, cluster_id: &str, me: NodeId) -> Result<Loaded> {
    let cas = load_certs(&cfg.ca_file, "CA file ([tls] ca_file)")?;
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots
            .add(ca)
            .with_context(|| format!("{}: not a usable CA certificate", cfg.ca_file.display()))?;
    }
    let roots = Arc::new(roots);
    let chain = load_certs(&cfg.cert_file, "certificate ([tls] cert_file)")?;
    let key_pem = read(&cfg.key_file, "key ([tls] key_file)")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| anyhow::anyhow!("{} is not a PEM private key: {e}", cfg.key_file.display()))?;
    // The certificate must be this node's and come from the CA: a node started with another
    // node's files, or with a CA that did not sign them, says so now rather than being refused
    // by every peer.
    let names = cert_node_ids(&chain[0], cluster_id);
    if !names.contains(&me) {
        bail!(
            "{} names node(s) {names:?} of cluster '{cluster_id}' ({}), but this is node {me}; \
             make this node's certificate with `synod certs node --node-id {me}`",
            cfg.cert_file.display(),
            node_name(cluster_id, me)
        );
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .context("cannot build a certificate verifier from the CA")?;
    verifier
        .verify_server_cert(
            &chain[0],
            &chain[1..],
            &ServerName::try_from(node_name(cluster_id, me)).expect("a DNS name"),
            &[],
            UnixTime::now(),
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "{} does not verify against {}: {e}",
                cfg.cert_file.display(),
                cfg.ca_file.display()
            )
        })?;
    let (not_after_unix, serial) = names::validity(&chain[0]);
    let server = |auth: ClientAuth, alpn: &[&[u8]]| -> Result<Arc<ServerConfig>> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = match auth {
            ClientAuth::None => builder.with_no_client_auth(),
            ClientAuth::Want => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                    .allow_unauthenticated()
                    .build()
                    .context("client certificate verifier")?,
            ),
            ClientAuth::Need => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                    .build()
                    .context("client certificate verifier")?,
            ),
        };
        let mut c = builder
            .with_single_cert(chain.clone(), key.clone_key())
            .with_context(|| format!("{} does not match its key", cfg.cert_file.display()))?;
        c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(c))
    };
    let peer_client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots.clone())
        .with_client_auth_cert(chain.clone(), key.clone_key())
        .with_context(|| format!("{} does not match its key", cfg.cert_file.display()))?;
    Ok(Loaded {
        peer_server: server(ClientAuth::Need, &[])?,
        peer_client: Arc::new(peer_client),
        zookeeper: server(cfg.client_auth, &[])?,
        grpc: server(cfg.client_auth, &[b"h2"])?,
        // Always `want` on the admin port: probes and scrapers of /health and /metrics show no
        // certificate, and every other endpoint needs one (crate::admin::serve).
        admin: server(ClientAuth::Want, &[b"http/1.1"])?,
        not_after_unix,
        serial,
    })
}

/// A certificate's serial number (hex).
pub fn serial_of(der: &CertificateDer<'_>) -> String {
    names::validity(der).1
}

#[cfg(test)]
pub(crate) mod tests;

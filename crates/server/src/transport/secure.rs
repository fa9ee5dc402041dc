//! The byte stream under a peer connection: plain TCP (`insecure = true`) or mutual TLS.
//!
//! Outbound, [`dial`] resolves the peer's address (DNS names are looked up at each attempt) and,
//! with TLS, checks that the certificate the peer shows comes from the cluster CA and names
//! the node dialled. Inbound, [`accept`] runs the TLS handshake, which refuses a process with
//! no certificate or one from another CA before any frame is read, and returns the nodes the
//! certificate names: the hello that follows must claim one of them.

use super::TransportConfig;
use crate::config::PeerAddr;
use std::io;
use std::time::Duration;
use synod_core::NodeId;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Anything a peer connection can run on.
pub(crate) trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerIo for T {}

/// A peer connection's stream.
pub(crate) type PeerStream = Box<dyn PeerIo>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a connection could not be opened.
pub(crate) enum DialError {
    Io(io::Error),
    /// The peer's TLS certificate was refused (logged as a warning: a misconfiguration or an
    /// impostor, not a peer that is down).
    Tls(String),
}

/// Open a connection to `peer` at `addr`.
pub(crate) async fn dial(
    cfg: &TransportConfig,
    peer: NodeId,
    addr: &PeerAddr,
) -> Result<PeerStream, DialError> {
    let timed = |e: tokio::time::error::Elapsed| {
        let _ = e;
        DialError::Io(io::ErrorKind::TimedOut.into())
    };
    let to = tokio::time::timeout(CONNECT_TIMEOUT, addr.resolve())
        .await
        .map_err(timed)?
        .map_err(DialError::Io)?;
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(to))
        .await
        .map_err(timed)?
        .map_err(DialError::Io)?;
    tcp.set_nodelay(true).map_err(DialError::Io)?;
    let Some(tls) = &cfg.tls else {
        return Ok(Box::new(tcp));
    };
    let name = tls.peer_server_name(peer);
    match tokio::time::timeout(CONNECT_TIMEOUT, tls.peer_connector().connect(name, tcp)).await {
        Ok(Ok(s)) => Ok(Box::new(s)),
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => Err(DialError::Tls(format!(
            "TLS handshake with node {peer} at {addr} failed: {e}"
        ))),
        Ok(Err(e)) => Err(DialError::Io(e)),
        Err(e) => Err(timed(e)),
    }
}

/// Secure an accepted connection. Returns the stream and, with TLS, the nodes its certificate
/// names; `Err` with the reason to log when the peer is refused.
pub(crate) async fn accept<S: PeerIo + 'static>(
    cfg: &TransportConfig,
    tcp: S,
    timeout: Duration,
) -> Result<(PeerStream, Option<Vec<NodeId>>), String> {
    let Some(tls) = &cfg.tls else {
        return Ok((Box::new(tcp), None));
    };
    let s = match tokio::time::timeout(timeout, tls.peer_acceptor().accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("TLS handshake failed: {e}")),
        Err(_) => return Err(format!("no TLS handshake within {} s", timeout.as_secs())),
    };
    let ids = s
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| tls.peer_ids(c))
        .unwrap_or_default();
    let members: Vec<NodeId> = ids
        .iter()
        .copied()
        .filter(|id| *id != cfg.me && cfg.members.contains_key(id))
        .collect();
    if members.is_empty() {
        return Err(format!(
            "its certificate (from the cluster CA) names no other member of this cluster \
             (it names nodes {ids:?})"
        ));
    }
    Ok((Box::new(s), Some(members)))
}

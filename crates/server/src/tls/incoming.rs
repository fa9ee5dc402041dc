//! Accepted TLS connections as a stream, for servers that take one (tonic's gRPC server):
//! handshakes run concurrently, each under a deadline, at most `MAX_HANDSHAKES` at once and
//! `MAX_HANDSHAKES_PER_ADDRESS` from one client address, so clients that never finish their
//! handshakes hold up nobody else.

use super::Tls;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tracing::debug;

const MAX_HANDSHAKES: usize = 64;
const MAX_HANDSHAKES_PER_ADDRESS: usize = 8;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A client connection after its TLS handshake.
pub struct TlsConn {
    inner: TlsStream<TcpStream>,
    remote: SocketAddr,
}

impl TlsConn {
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }
}

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Accept TLS connections on `listener` with the gRPC configuration of `tls` (reloaded
/// certificates apply to later handshakes).
pub fn grpc_incoming(
    listener: TcpListener,
    tls: Arc<Tls>,
) -> ReceiverStream<std::io::Result<TlsConn>> {
    let (tx, rx) = mpsc::channel(MAX_HANDSHAKES);
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let by_address: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>> =
        Arc::default();
    tokio::spawn(async move {
        loop {
            let (tcp, remote) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    debug!("KV listener: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            {
                let mut m = by_address.lock().expect("handshakes");
                let n = m.entry(remote.ip()).or_default();
                if *n >= MAX_HANDSHAKES_PER_ADDRESS {
                    debug!(%remote, "refusing a KV connection: too many TLS handshakes from its address");
                    continue;
                }
                *n += 1;
            }
            let release = {
                let by_address = by_address.clone();
                move || {
                    let mut m = by_address.lock().expect("handshakes");
                    if let Some(n) = m.get_mut(&remote.ip()) {
                        *n -= 1;
                        if *n == 0 {
                            m.remove(&remote.ip());
                        }
                    }
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                release();
                debug!(%remote, "refusing a KV connection: too many TLS handshakes at once");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            if tx.is_closed() {
                return;
            }
            let acceptor = tls.grpc_acceptor();
            let tx = tx.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
                release();
                match done {
                    Ok(Ok(inner)) => {
                        let _ = tx.send(Ok(TlsConn { inner, remote })).await;
                    }
                    Ok(Err(e)) => debug!(%remote, "KV TLS handshake failed: {e}"),
                    Err(_) => debug!(%remote, "KV TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

//! Request and reply frames of the client port: a 4-byte length, then the body. Memory grows
//! with the bytes that arrive, never with the length a frame claims.

use super::ConnEvent;
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use synod_zk::jute::{err, event, perms, xid, Id, JuteWrite};
use synod_zk::machine::Reply;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Budget overhead counted per request besides its bytes.
pub(super) const REQUEST_OVERHEAD: usize = 64;

/// The length of a request frame from its 4-byte prefix, checked against jute.maxbuffer.
fn request_len(head: [u8; 4], max_buffer: usize) -> Result<usize, String> {
    let len = i32::from_be_bytes(head);
    if len < 0 || len as usize > max_buffer {
        return Err(format!(
            "request length {len} is out of range (jute.maxbuffer is {max_buffer})"
        ));
    }
    Ok(len as usize)
}

/// Read one request frame (its length prefix already read when `head` is given). Memory
/// grows with the bytes that arrive, not with the length the prefix claims.
pub async fn read_request<R: AsyncRead + Unpin>(
    r: &mut R,
    head: Option<[u8; 4]>,
    max_buffer: usize,
) -> Result<Bytes, String> {
    let head = match head {
        Some(h) => h,
        None => {
            let mut h = [0u8; 4];
            r.read_exact(&mut h).await.map_err(|e| e.to_string())?;
            h
        }
    };
    let len = request_len(head, max_buffer)?;
    let body = crate::read_body(r, len).await.map_err(|e| e.to_string())?;
    Ok(Bytes::from(body))
}

/// The next request of an established connection, once this connection's byte budget has
/// room for it; its body must arrive within `frame_timeout` of its length prefix.
/// `on_full` is called when the budget has no room for the request (reading pauses).
pub(super) async fn next_request<R: AsyncRead + Unpin>(
    r: &mut R,
    budget: &Arc<Semaphore>,
    max_buffer: usize,
    frame_timeout: Duration,
    on_full: &mut (dyn FnMut() + Send),
) -> Result<(Bytes, OwnedSemaphorePermit), String> {
    let mut head = [0u8; 4];
    r.read_exact(&mut head).await.map_err(|e| e.to_string())?;
    let len = request_len(head, max_buffer)?;
    if budget.available_permits() < len + REQUEST_OVERHEAD {
        on_full();
    }
    let permit = budget
        .clone()
        .acquire_many_owned((len + REQUEST_OVERHEAD) as u32)
        .await
        .map_err(|_| "connection budget closed".to_string())?;
    let body = tokio::time::timeout(frame_timeout, crate::read_body(r, len))
        .await
        .map_err(|_| {
            format!(
                "a request of {len} bytes did not arrive within the session timeout ({} ms)",
                frame_timeout.as_millis()
            )
        })?
        .map_err(|e| e.to_string())?;
    Ok((Bytes::from(body), permit))
}

pub(super) fn drain_events(
    events: &mut mpsc::Receiver<ConnEvent>,
    auth: &[Id],
    out: &mut BytesMut,
) {
    while let Ok(ev) = events.try_recv() {
        encode_event(out, ev, auth);
    }
}

pub(super) fn encode_reply(out: &mut BytesMut, xid: i32, zxid: i64, reply: &Reply) {
    let body_len = if reply.err == err::OK {
        reply.body.len()
    } else {
        0
    };
    out.put_i32((16 + body_len) as i32);
    out.int(xid);
    out.long(zxid);
    out.int(reply.err);
    if reply.err == err::OK {
        out.put_slice(&reply.body);
    }
}

/// Encode a watch event, unless the connection's identities may not READ the node (ZooKeeper
/// then drops the event for that connection).
pub(super) fn encode_event(out: &mut BytesMut, ConnEvent(ty, path, acl): ConnEvent, auth: &[Id]) {
    if let Some(acl) = acl {
        if !synod_zk::acl::allowed(&acl, perms::READ, auth) {
            return;
        }
    }
    let mut b = BytesMut::new();
    b.int(xid::NOTIFICATION);
    b.long(-1);
    b.int(err::OK);
    b.int(ty);
    b.int(event::STATE_SYNC_CONNECTED);
    b.string(&path);
    out.put_i32(b.len() as i32);
    out.put_slice(&b);
}

pub(super) async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    body: &[u8],
) -> std::io::Result<()> {
    let mut b = BytesMut::with_capacity(4 + body.len());
    b.put_i32(body.len() as i32);
    b.put_slice(body);
    w.write_all(&b).await?;
    w.flush().await
}

/// The writing half of a client connection: plain TCP or TLS.
pub(super) trait ClientWrite: AsyncWrite + Unpin + Send + 'static {
    /// Make the close a reset rather than a FIN, for a client that does not read its replies
    /// (a FIN would wait behind them). Only a plain TCP connection can; on TLS it is a no-op.
    fn reset_on_close(&self) {}
}

impl ClientWrite for tokio::net::tcp::OwnedWriteHalf {
    fn reset_on_close(&self) {
        let _ = self.as_ref().set_zero_linger();
    }
}

impl<S: AsyncRead + AsyncWrite + Send + 'static> ClientWrite for tokio::io::WriteHalf<S> {}

pub(super) async fn flush<W: AsyncWrite + Unpin>(
    w: &mut W,
    out: &mut BytesMut,
    timeout: Duration,
) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let r = tokio::time::timeout(timeout, async {
        w.write_all(out).await?;
        // A TLS stream holds written records until flushed (a no-op on TCP).
        w.flush().await
    })
    .await;
    out.clear();
    match r {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

//! Peer frames and the hello that opens a connection.
//!
//! ```text
//! frame:  [u32 length][u32 CRC32C of body][body]
//! body:   u8 kind, then
//!         kind 0 whole message, 1 chunk (more follow), 2 last chunk, 5 group submission,
//!         6 submission chunk (more follow), 7 last submission chunk:
//!                u32 group, data
//!         kind 3 hello, 4 hello reply (u8 ok, reason): data
//! hello:  u32 magic "SYND", u16 peer protocol version, cluster id, u32 node id,
//!         u32 number of groups, then (u32 group, protocol name) each
//! ```
//!
//! Versions: a node accepts a hello of any version in [`MIN_PEER_VERSION`]..=[`PEER_VERSION`]
//! and sends [`HELLO_VERSION`], one the previous release accepts (the two-release rule, see
//! there), so that old and new nodes talk both ways during a rolling upgrade. A hello of another
//! version is refused with a reason that names both versions.
//!
//! A message larger than the chunk size (a snapshot) travels as chunks of one group, reassembled
//! up to `max_message_bytes`. A group submission carries a command for a group that this node
//! cannot order itself (a state machine's message to another group, see `crate::host`).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io;
use synod_core::wire::{get_string, get_u16, get_u32, get_u8, put_str, WireError};
use synod_core::{GroupId, NodeId};
use tokio::io::{AsyncRead, AsyncReadExt};

pub(crate) const MAGIC: u32 = 0x5359_4E44; // "SYND"
/// The newest peer protocol version this build understands. Version 2 (v0.1.0): frames carry a
/// group id; the hello lists the sender's groups.
pub(crate) const PEER_VERSION: u16 = 2;
/// The oldest peer protocol version this build accepts in a hello.
pub(crate) const MIN_PEER_VERSION: u16 = 2;
/// The version this build puts in its hello, and so speaks on its outbound connections (the
/// only direction messages flow on a connection). It is the version the peers of the previous
/// release understand, so that a cluster upgraded one node at a time keeps every link up.
///
/// The two-release rule: a release that raises `HELLO_VERSION` must follow one whose
/// `PEER_VERSION` (the range it accepts) already includes the new version; and a release that
/// raises `MIN_PEER_VERSION` must follow one that no longer sends anything older. Raising the
/// version is therefore done in two releases: N accepts it, N+1 sends it. The test
/// `the_hello_is_understood_by_the_previous_release` keeps this release honest.
pub(crate) const HELLO_VERSION: u16 = 2;
const _: () = assert!(MIN_PEER_VERSION <= HELLO_VERSION && HELLO_VERSION <= PEER_VERSION);
pub(crate) const K_WHOLE: u8 = 0;
pub(crate) const K_CHUNK: u8 = 1;
pub(crate) const K_LAST: u8 = 2;
pub(crate) const K_HELLO: u8 = 3;
pub(crate) const K_REPLY: u8 = 4;
pub(crate) const K_SUBMIT: u8 = 5;
/// Chunks of a large group submission (more follow / the last).
pub(crate) const K_SUBMIT_CHUNK: u8 = 6;
pub(crate) const K_SUBMIT_LAST: u8 = 7;
/// Largest hello or hello reply: a connection that has not identified itself gets no more.
pub(crate) const HELLO_MAX_FRAME: usize = 16 << 10;
/// Groups a hello may list.
const MAX_HELLO_GROUPS: usize = 1024;

pub(crate) fn frame(out: &mut BytesMut, kind: u8, data: &[u8]) {
    let mut body = BytesMut::with_capacity(1 + data.len());
    body.put_u8(kind);
    body.put_slice(data);
    out.put_u32(body.len() as u32);
    out.put_u32(crc32c::crc32c(&body));
    out.put_slice(&body);
}

/// A frame of a group: `kind`, the group id, then `data`, written without an intermediate copy
/// of `data`.
pub(crate) fn group_frame(out: &mut BytesMut, kind: u8, group: GroupId, data: &[u8]) {
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&group.to_be_bytes());
    let mut crc = crc32c::crc32c(&head);
    crc = crc32c::crc32c_append(crc, data);
    out.put_u32((head.len() + data.len()) as u32);
    out.put_u32(crc);
    out.put_slice(&head);
    out.put_slice(data);
}

/// Encode one message (`K_WHOLE`) or submission (`K_SUBMIT`) of `group` as one or more frames.
pub(crate) fn encode_message(
    out: &mut BytesMut,
    kind: u8,
    group: GroupId,
    data: &[u8],
    chunk: usize,
) {
    if data.len() <= chunk {
        group_frame(out, kind, group, data);
        return;
    }
    let (more, last) = if kind == K_SUBMIT {
        (K_SUBMIT_CHUNK, K_SUBMIT_LAST)
    } else {
        (K_CHUNK, K_LAST)
    };
    let mut rest = data;
    while rest.len() > chunk {
        group_frame(out, more, group, &rest[..chunk]);
        rest = &rest[chunk..];
    }
    group_frame(out, last, group, rest);
}

#[derive(Debug)]
pub(crate) enum FrameError {
    Io(io::Error),
    Bad(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::Bad(s) => write!(f, "{s}"),
        }
    }
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Read one frame of at most `max_frame` bytes. Memory grows with the bytes that arrive, not
/// with the length the frame claims. `Ok(None)` at a clean end of stream.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    s: &mut R,
    max_frame: usize,
) -> Result<Option<(u8, Bytes)>, FrameError> {
    let mut head = [0u8; 8];
    match s.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(head[..4].try_into().expect("4")) as usize;
    let crc = u32::from_be_bytes(head[4..].try_into().expect("4"));
    if len == 0 || len > max_frame {
        return Err(FrameError::Bad(format!(
            "frame length {len} outside 1..={max_frame}"
        )));
    }
    let body = crate::read_body(s, len).await?;
    if crc32c::crc32c(&body) != crc {
        return Err(FrameError::Bad("frame checksum mismatch".into()));
    }
    let mut body = Bytes::from(body);
    let kind = body.get_u8();
    Ok(Some((kind, body)))
}

/// The group id that starts the data of a group frame.
pub(crate) fn split_group(mut data: Bytes) -> Result<(GroupId, Bytes), FrameError> {
    let group = get_u32(&mut data).map_err(|e| FrameError::Bad(format!("group frame: {e}")))?;
    Ok((group, data))
}

/// Who is connecting, and which protocol each of its groups runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub cluster_id: String,
    pub node_id: NodeId,
    pub groups: Vec<(GroupId, String)>,
}

pub(crate) fn encode_hello(h: &Hello) -> BytesMut {
    let mut d = BytesMut::new();
    d.put_u32(MAGIC);
    d.put_u16(HELLO_VERSION);
    put_str(&mut d, &h.cluster_id);
    d.put_u32(h.node_id);
    d.put_u32(h.groups.len() as u32);
    for (g, p) in &h.groups {
        d.put_u32(*g);
        put_str(&mut d, p);
    }
    let mut out = BytesMut::new();
    frame(&mut out, K_HELLO, &d);
    out
}

pub(crate) fn decode_hello(mut b: Bytes) -> Result<Hello, String> {
    let e = |e: WireError| e.to_string();
    let magic = get_u32(&mut b).map_err(e)?;
    if magic != MAGIC {
        return Err("not a synod peer (bad magic)".into());
    }
    check_version(get_u16(&mut b).map_err(e)?)?;
    let cluster_id = get_string(&mut b, "cluster id", 256).map_err(e)?;
    let node_id = get_u32(&mut b).map_err(e)?;
    let n = get_u32(&mut b).map_err(e)? as usize;
    if n > MAX_HELLO_GROUPS {
        return Err(format!(
            "hello lists {n} groups (at most {MAX_HELLO_GROUPS})"
        ));
    }
    let mut groups = Vec::with_capacity(n.min(b.remaining() / 8));
    for _ in 0..n {
        let g = get_u32(&mut b).map_err(e)?;
        groups.push((g, get_string(&mut b, "protocol", 64).map_err(e)?));
    }
    if b.has_remaining() {
        return Err(format!("{} bytes after the hello", b.remaining()));
    }
    Ok(Hello {
        cluster_id,
        node_id,
        groups,
    })
}

/// Accept a hello of peer protocol version `theirs`, or say why not, naming both versions. The
/// reason is logged where the hello arrives and sent back in the refusal, which the connecting
/// node logs too.
pub(crate) fn check_version(theirs: u16) -> Result<(), String> {
    if theirs > PEER_VERSION {
        return Err(format!(
            "peer speaks peer protocol version {theirs}, newer than this node understands \
             (it accepts {MIN_PEER_VERSION}..={PEER_VERSION}): upgrade this node; upgrade a \
             cluster one release at a time"
        ));
    }
    if theirs < MIN_PEER_VERSION {
        return Err(format!(
            "peer speaks peer protocol version {theirs}, older than this node accepts \
             (it accepts {MIN_PEER_VERSION}..={PEER_VERSION}): upgrade the peer; upgrade a \
             cluster one release at a time"
        ));
    }
    Ok(())
}

pub(crate) fn reply(ok: bool, reason: &str) -> BytesMut {
    let mut d = BytesMut::new();
    d.put_u8(ok as u8);
    put_str(&mut d, reason);
    let mut out = BytesMut::new();
    frame(&mut out, K_REPLY, &d);
    out
}

pub(crate) fn decode_reply(mut b: Bytes) -> Result<(bool, String), String> {
    let ok = get_u8(&mut b).map_err(|e| e.to_string())?;
    let reason = get_string(&mut b, "reason", 1024).unwrap_or_default();
    Ok((ok == 1, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hello node 1 of a v0.1.0 cluster `upgrade-fixture` (groups 0 zab) sent, recorded from
    /// the v0.1.0 binary (tests/fixtures/v0.1.0/README.md).
    const V0_1_0_HELLO: &[u8] = include_bytes!("../../../../tests/fixtures/v0.1.0/hello.bin");
    /// The peer protocol versions v0.1.0 (the previous release) accepts: exactly 2.
    const PREVIOUS_RELEASE_ACCEPTS: std::ops::RangeInclusive<u16> = 2..=2;

    fn hello_body(version: u16) -> Bytes {
        let mut d = BytesMut::new();
        d.put_u32(MAGIC);
        d.put_u16(version);
        put_str(&mut d, "c");
        d.put_u32(2);
        d.put_u32(1);
        d.put_u32(0);
        put_str(&mut d, "zab");
        d.freeze()
    }

    async fn read_hello(wire: &[u8]) -> Result<Hello, String> {
        let mut r = wire;
        match read_frame(&mut r, HELLO_MAX_FRAME).await {
            Ok(Some((K_HELLO, b))) => decode_hello(b),
            Ok(other) => panic!("not a hello frame: {other:?}"),
            Err(e) => panic!("bad frame: {e}"),
        }
    }

    #[tokio::test]
    async fn a_hello_of_the_previous_release_is_accepted() {
        let h = read_hello(V0_1_0_HELLO).await.expect("v0.1.0 hello");
        assert_eq!(h.cluster_id, "upgrade-fixture");
        assert_eq!(h.node_id, 1);
        assert_eq!(h.groups, vec![(0, "zab".to_string())]);
    }

    #[tokio::test]
    async fn the_hello_is_understood_by_the_previous_release() {
        let h = Hello {
            cluster_id: "upgrade-fixture".into(),
            node_id: 1,
            groups: vec![(0, "zab".into())],
        };
        let wire = encode_hello(&h);
        // Byte for byte what v0.1.0 sends (the format did not change), and a version it takes.
        assert_eq!(&wire[..], V0_1_0_HELLO);
        let version = u16::from_be_bytes([wire[13], wire[14]]);
        assert_eq!(version, HELLO_VERSION);
        assert!(
            PREVIOUS_RELEASE_ACCEPTS.contains(&version),
            "this release sends peer protocol version {version}, which the previous release \
             refuses (it accepts {PREVIOUS_RELEASE_ACCEPTS:?}): see the two-release rule"
        );
        assert_eq!(read_hello(&wire).await, Ok(h));
    }

    #[test]
    fn every_version_in_the_range_is_accepted() {
        for v in MIN_PEER_VERSION..=PEER_VERSION {
            assert_eq!(check_version(v), Ok(()));
            assert!(decode_hello(hello_body(v)).is_ok(), "version {v}");
        }
    }

    #[test]
    fn a_newer_peer_is_refused_naming_both_versions() {
        let newer = PEER_VERSION + 1;
        let why = decode_hello(hello_body(newer)).unwrap_err();
        assert!(why.contains(&format!("version {newer}, newer")), "{why}");
        assert!(
            why.contains(&format!("{MIN_PEER_VERSION}..={PEER_VERSION}")),
            "{why}"
        );
        assert!(why.contains("upgrade this node"), "{why}");
        assert!(check_version(u16::MAX).is_err());
    }

    #[test]
    fn an_older_peer_is_refused_naming_both_versions() {
        let older = MIN_PEER_VERSION - 1;
        let why = decode_hello(hello_body(older)).unwrap_err();
        assert!(why.contains(&format!("version {older}, older")), "{why}");
        assert!(
            why.contains(&format!("{MIN_PEER_VERSION}..={PEER_VERSION}")),
            "{why}"
        );
        assert!(why.contains("upgrade the peer"), "{why}");
        assert!(check_version(0).is_err());
    }

    #[test]
    fn a_hello_that_is_not_synod_is_refused() {
        let mut b = BytesMut::from(&hello_body(PEER_VERSION)[..]);
        b[0] ^= 0xff;
        assert!(decode_hello(b.freeze()).unwrap_err().contains("bad magic"));
        let mut b = BytesMut::from(&hello_body(PEER_VERSION)[..]);
        b.put_u8(0);
        assert!(decode_hello(b.freeze())
            .unwrap_err()
            .contains("after the hello"));
    }
}

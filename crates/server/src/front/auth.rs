//! Client authentication beyond `addauth`, and the per-session watch limit:
//!
//! * **SASL DIGEST-MD5** (request 102), as Apache ZooKeeper 3.8 serves it with a JAAS `Server`
//!   section of DigestLoginModule users: the exchange of [`synod_zk::sasl`], one per
//!   connection, adding `sasl:<user>` to the connection's identities (and `super` for
//!   `sasl_super_user`). A failed exchange is answered AUTHFAILED (SESSIONCLOSEDREQUIRESASLAUTH
//!   when `require_auth` names sasl) and the connection is closed, as ZooKeeper does. Without
//!   users, SASL is answered OK with an empty token, as by a ZooKeeper without SASL.
//! * **Required authentication** (`require_auth`, ZooKeeper's `enforce.auth.schemes`): until
//!   the connection holds an identity of one of those schemes, any request but auth and SASL
//!   is answered SESSIONCLOSEDREQUIRESASLAUTH and the connection closed.
//! * **Watches per session** (`max_watches_per_session`): a request that would add a watch to
//!   a session at the limit fails with QUOTAEXCEEDED and registers nothing; the connection
//!   stays. (Closing it would make the client reconnect and re-register its watches with
//!   setWatches, only to hit the limit again.)

use super::frames::drain_events;
use super::{ConnEvent, Front};
use crate::metrics::zk_front;
use bytes::{BufMut, Bytes, BytesMut};
use std::net::SocketAddr;
use synod_zk::jute::{op, Id, JuteWrite, Reader};
use synod_zk::sasl::{DigestMd5Server, Step};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// KeeperException.Code.SESSIONCLOSEDREQUIRESASLAUTH.
pub(super) const SESSION_CLOSED_REQUIRE_SASL_AUTH: i32 = -124;
/// KeeperException.Code.QUOTAEXCEEDED.
pub(super) const QUOTA_EXCEEDED: i32 = -125;
const AUTH_FAILED: i32 = synod_zk::jute::err::AUTH_FAILED;

/// Outcome of a SASL request: keep the connection, or close it after the reply.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum SaslOutcome {
    Continue,
    Close(String),
}

impl Front {
    /// Answer a SASL request (its reply encoded into `out` after any pending watch events).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sasl(
        &self,
        session: i64,
        auth: &mut Vec<Id>,
        exchange: &mut Option<DigestMd5Server>,
        addr: SocketAddr,
        (xid, body): (i32, Bytes),
        events: &mut mpsc::Receiver<ConnEvent>,
        out: &mut BytesMut,
    ) -> SaslOutcome {
        drain_events(events, auth, out);
        let Some(users) = &self.sasl_users else {
            // No SASL users: as a ZooKeeper without SASL, OK with a null token.
            sasl_reply(out, xid, synod_zk::jute::err::OK, None);
            return SaslOutcome::Continue;
        };
        let ex = exchange.get_or_insert_with(|| DigestMd5Server::new(new_nonce()));
        let result = match Reader::new(body).opt_buffer() {
            Ok(token) => ex.step(&token.unwrap_or_default(), |u| users.get(u).cloned()),
            Err(_) => Err(synod_zk::sasl::SaslError("malformed SASL request".into())),
        };
        match result {
            Ok(Step::Challenge(c)) => {
                sasl_reply(out, xid, synod_zk::jute::err::OK, Some(&c));
                SaslOutcome::Continue
            }
            Ok(Step::Success { user, rspauth }) => {
                zk_front().sasl(true);
                info!(%addr, session = format!("{session:#x}"), "SASL: authenticated as sasl:{user}");
                add_identity(auth, "sasl", &user);
                if self.cfg.tuning.sasl_super_user.as_deref() == Some(user.as_str()) {
                    add_identity(auth, "super", "");
                }
                sasl_reply(out, xid, synod_zk::jute::err::OK, Some(&rspauth));
                SaslOutcome::Continue
            }
            Err(e) => {
                zk_front().sasl(false);
                if let Some(more) = self.auth_failures.check() {
                    warn!(%addr, "SASL authentication failed, closing the connection: {e} ({more} more failures since the last message)");
                }
                let code = if self.cfg.tuning.require_auth.iter().any(|s| s == "sasl") {
                    SESSION_CLOSED_REQUIRE_SASL_AUTH
                } else {
                    AUTH_FAILED
                };
                sasl_reply(out, xid, code, None);
                SaslOutcome::Close(format!("SASL authentication failed: {e}"))
            }
        }
    }

    /// Does this request need an authentication the connection lacks (`require_auth`)?
    pub(super) fn auth_missing(&self, code: i32, auth: &[Id]) -> bool {
        let required = &self.cfg.tuning.require_auth;
        !required.is_empty()
            && code != op::AUTH
            && code != op::SASL
            && !auth.iter().any(|i| required.contains(&i.scheme))
    }

    /// Log and count a connection closed for `require_auth`.
    pub(super) fn refused_unauthenticated(&self, addr: SocketAddr, auth: &[Id]) {
        zk_front().limited("require_auth");
        if let Some(more) = self.auth_failures.check() {
            let has: Vec<&str> = auth.iter().map(|i| i.scheme.as_str()).collect();
            warn!(
                %addr,
                "closing a client that has not authenticated with any of {:?} (zookeeper.require_auth; it has {has:?}); {more} more since the last message",
                self.cfg.tuning.require_auth
            );
        }
    }

    /// Would this request take its session past `max_watches_per_session`? Logged and
    /// counted when it would.
    pub(super) fn watch_limited(
        &self,
        watches_held: usize,
        code: i32,
        body: &Bytes,
        addr: SocketAddr,
    ) -> bool {
        let limit = self.cfg.tuning.max_watches_per_session;
        if limit == 0 {
            return false;
        }
        let adding = watches_added(code, body);
        if adding == 0 || watches_held.saturating_add(adding) <= limit {
            return false;
        }
        zk_front().limited("max_watches_per_session");
        if let Some(more) = self.limited_watches.check() {
            warn!(%addr, "a request for {adding} more watches fails with QUOTAEXCEEDED: its session holds {watches_held} (zookeeper.max_watches_per_session is {limit}); {more} more limited since the last message");
        }
        true
    }
}

/// Watches a request would add (0 if it adds none or is malformed: it fails elsewhere).
pub(super) fn watches_added(code: i32, body: &Bytes) -> usize {
    let mut r = Reader::new(body.clone());
    match code {
        op::EXISTS | op::GET_DATA | op::GET_CHILDREN | op::GET_CHILDREN2 => {
            let watch = r.string().and_then(|_| r.boolean());
            usize::from(watch == Ok(true))
        }
        // A persistent or recursive watch has a data and a child half, each counted by the
        // session's watch table (synod_zk::watch), so it counts two here too.
        op::ADD_WATCH => 2,
        op::SET_WATCHES | op::SET_WATCHES2 => {
            let lists = if code == op::SET_WATCHES { 3 } else { 5 };
            if r.long().is_err() {
                return 0;
            }
            let mut n = 0usize;
            for list in 0..lists {
                match r.strings() {
                    Ok(l) => n += l.len() * if list >= 3 { 2 } else { 1 },
                    Err(_) => return n,
                }
            }
            n
        }
        _ => 0,
    }
}

/// A SASL reply as ZooKeeper sends it: the header (zxid 0), then a SetSASLResponse whatever
/// the error (a null token on failure).
fn sasl_reply(out: &mut BytesMut, xid: i32, code: i32, token: Option<&[u8]>) {
    let mut b = BytesMut::new();
    b.int(xid);
    b.long(0);
    b.int(code);
    b.opt_buffer(token);
    out.put_i32(b.len() as i32);
    out.put_slice(&b);
}

/// 30 bytes of the OS's random generator, base64 (40 characters, as the nonce of ZooKeeper's
/// DIGEST-MD5 server).
fn new_nonce() -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut b = [0u8; 30];
    rand::rngs::OsRng.fill_bytes(&mut b);
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Identities one connection may hold: ZooKeeper sets no bound, but a client that adds a new
/// digest credential per request would otherwise grow the list (and every ACL check) forever.
/// Past it, more are ignored: fails closed, the connection keeps the rights it had.
pub(super) const MAX_IDENTITIES: usize = 64;

/// Add an identity to a connection's list once (ServerCnxn.addAuthInfo).
pub(super) fn add_identity(auth: &mut Vec<Id>, scheme: &str, id: &str) {
    let id = Id {
        scheme: scheme.into(),
        id: id.into(),
    };
    if !auth.contains(&id) && auth.len() < MAX_IDENTITIES {
        auth.push(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_added_once_and_bounded() {
        let mut auth = Vec::new();
        add_identity(&mut auth, "digest", "bob:x");
        add_identity(&mut auth, "digest", "bob:x");
        assert_eq!(auth.len(), 1);
        for i in 0..1000 {
            add_identity(&mut auth, "digest", &format!("u{i}:x"));
        }
        assert_eq!(auth.len(), MAX_IDENTITIES);
        assert_eq!(auth[0].id, "bob:x", "the first identities stay");
    }

    #[test]
    fn watches_added_by_requests() {
        let mut b = BytesMut::new();
        b.string("/a");
        b.boolean(true);
        let with = b.freeze();
        let mut b = BytesMut::new();
        b.string("/a");
        b.boolean(false);
        let without = b.freeze();
        assert_eq!(watches_added(op::GET_DATA, &with), 1);
        assert_eq!(watches_added(op::EXISTS, &without), 0);
        assert_eq!(watches_added(op::CREATE, &with), 0);
        let mut b = BytesMut::new();
        b.long(0);
        for list in [vec!["/a", "/b"], vec![], vec!["/c"]] {
            b.int(list.len() as i32);
            for p in list {
                b.string(p);
            }
        }
        assert_eq!(watches_added(op::SET_WATCHES, &b.freeze()), 3);
        // setWatches2: two more lists, persistent and recursive, whose watches count two.
        let mut b = BytesMut::new();
        b.long(0);
        for list in [vec!["/a"], vec![], vec![], vec!["/p"], vec!["/r", "/s"]] {
            b.int(list.len() as i32);
            for p in list {
                b.string(p);
            }
        }
        assert_eq!(watches_added(op::SET_WATCHES2, &b.freeze()), 7);
        assert_eq!(watches_added(op::ADD_WATCH, &with), 2);
        assert_eq!(
            watches_added(op::SET_WATCHES, &Bytes::from_static(b"\x01")),
            0
        );
    }

    #[test]
    fn sasl_replies_carry_a_token_even_when_failing() {
        let mut out = BytesMut::new();
        sasl_reply(&mut out, 7, AUTH_FAILED, None);
        assert_eq!(
            &out[..],
            &[
                0, 0, 0, 20, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x8d, 0xff,
                0xff, 0xff, 0xff
            ]
        );
        assert_eq!(new_nonce().len(), 40);
        assert_ne!(new_nonce(), new_nonce());
    }
}

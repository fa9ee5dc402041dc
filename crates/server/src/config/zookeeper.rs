//! The `[zookeeper]` section: limits, timeouts, four-letter words and client authentication of
//! the ZooKeeper client port (checked with the rest in `Config::validate`).

use anyhow::{bail, Context, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `[zookeeper]`: the ZooKeeper front end.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ZkTuning {
    /// jute.maxbuffer: largest client request in bytes; a larger one closes the connection.
    pub max_buffer: usize,
    /// Shortest session timeout granted, in milliseconds: a client asking for less gets this
    /// (ZooKeeper: 2 ticks of 2 s).
    pub min_session_timeout_ms: i32,
    /// Longest session timeout granted, in milliseconds: a client asking for more gets this
    /// (ZooKeeper: 20 ticks of 2 s). At least `min_session_timeout_ms`.
    pub max_session_timeout_ms: i32,
    /// Open client connections, a count, those still in their handshake included; more are closed as
    /// soon as they are accepted. Lowered at start-up to fit the file-descriptor limit
    /// (RLIMIT_NOFILE, whose soft limit the server raises to the hard limit).
    pub max_connections: usize,
    /// Requests of one connection in flight before the server stops reading it, a count.
    pub max_outstanding: usize,
    /// Bytes of requests of one connection read but not yet answered before the server stops
    /// reading it (at least `max_buffer`): bounds the memory one connection can pin.
    pub max_outstanding_bytes: usize,
    /// Watch events queued for one connection before it is closed as too slow, a count.
    pub max_queued_events: usize,
    /// A new connection that has not sent its whole ConnectRequest (or a four-letter word)
    /// within this time is closed. After the handshake, a request frame must arrive whole
    /// within the session timeout once its first byte has. In milliseconds.
    pub handshake_timeout_ms: u64,
    /// A connection whose replies cannot be written for this long (a client that does not
    /// read) is closed, in milliseconds. At most about 1 MiB of replies is buffered per
    /// connection meanwhile.
    pub write_timeout_ms: u64,
    /// Four-letter words answered on the client port: "*" or a list (ruok, srvr, stat, mntr,
    /// conf, cons, envi, wchs, dump, isro).
    pub four_letter_words: Vec<String>,
    /// ZooKeeper's super user (`zookeeper.DigestAuthenticationProvider.superDigest`):
    /// `user:base64(sha1(user:password))`, as `synod digest user:password` prints. A session
    /// that authenticates with that digest bypasses every ACL. None by default.
    pub super_digest: Option<String>,
    /// ZooKeeper's `zookeeper.enforceQuota`: a create or setData that would take a quota'd
    /// subtree past a hard limit (`setquota -N`/`-B`) fails with QUOTAEXCEEDED, and limits
    /// passed are logged. Off by default, as in ZooKeeper (usage is tracked either way).
    /// Every replica decides each write itself: all nodes of the cluster must agree.
    pub enforce_quota: bool,
    /// Read-only mode (ZooKeeper's `readonlymode.enabled`): while this server is cut off from
    /// its quorum, clients that ask for a read-only session get one, with reads of the state
    /// the server last had. Clients must ask for it, so it is on by default.
    pub read_only_mode: bool,
    /// SASL DIGEST-MD5 users from a JAAS login configuration, as ZooKeeper reads them
    /// (`java.security.auth.login.config`): the `Server` section's
    /// `org.apache.zookeeper.server.auth.DigestLoginModule` with `user_<name>="<password>"`
    /// options. With users (here or in `sasl_users`) a client's SASL exchange authenticates it
    /// as `sasl:<name>`; without, SASL requests are answered OK with an empty token.
    pub jaas_file: Option<PathBuf>,
    /// SASL DIGEST-MD5 users given inline, name = password (added to those of `jaas_file`).
    pub sasl_users: SaslUsers,
    /// ZooKeeper's `zookeeper.superUser`: a SASL user that also gets the `super` identity.
    pub sasl_super_user: Option<String>,
    /// ZooKeeper's `zookeeper.enforce.auth.schemes` (with `enforce.auth.enabled`): a connection
    /// must authenticate with one of these schemes (sasl, digest, x509) before any other
    /// request; one that does not is answered SESSIONCLOSEDREQUIRESASLAUTH and closed. Empty
    /// (the default): no requirement.
    pub require_auth: Vec<String>,
    /// ZooKeeper's maxClientCnxns: open client connections from one IP address, a count; more are
    /// closed as soon as they are accepted. 0: no limit.
    pub max_client_cnxns: usize,
    /// Watches one session may hold, a count; a request that would add one more fails with
    /// QUOTAEXCEEDED (the connection stays). 0: no limit.
    pub max_watches_per_session: usize,
    /// Bytes per second the server reads from one client connection (a token bucket holding
    /// one second's worth); a faster client is read more slowly, not closed. 0: no limit.
    pub max_read_bytes_per_second: u64,
}

/// SASL users, name → password: never printed (the Debug form names the users only).
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct SaslUsers(pub BTreeMap<String, String>);

impl std::fmt::Debug for SaslUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl ZkTuning {
    /// The SASL users of `jaas_file` and `sasl_users` (None when there are none: SASL is then
    /// answered as by a ZooKeeper without SASL). Errors name the file and line.
    pub fn sasl_users(&self) -> Result<Option<BTreeMap<String, String>>> {
        let mut users = BTreeMap::new();
        if let Some(path) = &self.jaas_file {
            let text = std::fs::read(path).with_context(|| {
                format!(
                    "config key zookeeper.jaas_file: cannot read {}",
                    path.display()
                )
            })?;
            if text.len() > synod_zk::jaas::MAX_FILE_BYTES {
                bail!(
                    "config key zookeeper.jaas_file: {} is larger than 1 MiB",
                    path.display()
                );
            }
            let text = String::from_utf8(text).map_err(|_| {
                anyhow::anyhow!(
                    "config key zookeeper.jaas_file: {} is not UTF-8",
                    path.display()
                )
            })?;
            users = synod_zk::jaas::server_users(&text).map_err(|e| {
                anyhow::anyhow!("config key zookeeper.jaas_file: {}: {e}", path.display())
            })?;
        }
        for (name, password) in &self.sasl_users.0 {
            if name.is_empty() {
                bail!("config key zookeeper.sasl_users: a user with an empty name");
            }
            users.insert(name.clone(), password.clone());
        }
        Ok((!users.is_empty()).then_some(users))
    }

    pub(super) fn validate(&self) -> Result<()> {
        let users = self.sasl_users()?;
        for scheme in &self.require_auth {
            match scheme.as_str() {
                "sasl" if users.is_none() => bail!(
                    "config key zookeeper.require_auth: sasl needs SASL users (jaas_file or sasl_users)"
                ),
                "sasl" | "digest" | "x509" => {}
                other => bail!(
                    "config key zookeeper.require_auth: unknown scheme {other:?} (expected sasl, digest or x509)"
                ),
            }
        }
        if self.sasl_super_user.is_some() && users.is_none() {
            bail!(
                "config key zookeeper.sasl_super_user: needs SASL users (jaas_file or sasl_users)"
            );
        }
        Ok(())
    }
}

impl Default for ZkTuning {
    fn default() -> Self {
        Self {
            max_buffer: 0xfffff,
            min_session_timeout_ms: 4_000,
            max_session_timeout_ms: 40_000,
            max_connections: 10_000,
            max_outstanding: 1_000,
            max_outstanding_bytes: 4 << 20,
            max_queued_events: 10_000,
            handshake_timeout_ms: 10_000,
            write_timeout_ms: 30_000,
            four_letter_words: vec!["*".into()],
            super_digest: None,
            enforce_quota: false,
            read_only_mode: true,
            jaas_file: None,
            sasl_users: SaslUsers::default(),
            sasl_super_user: None,
            require_auth: Vec::new(),
            max_client_cnxns: 60,
            max_watches_per_session: 100_000,
            max_read_bytes_per_second: 64 << 20,
        }
    }
}

//! The history format: one [`Op`] per client operation, collected in a [`History`].
//!
//! Everything here is plain data that serialises to JSON with serde, so a chaos harness can dump
//! a run with [`History::to_json_file`] and a human (or a later checker run) can load it again
//! with [`History::from_json_file`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::Path;

/// The state of one znode as the register model sees it: its data, read as an `i64`, and its
/// `Stat.version` (the data version, bumped by every successful `setData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ZnodeState {
    /// The znode's data, interpreted as an integer.
    pub value: i64,
    /// The znode's data version (`Stat.version`).
    pub version: i32,
}

impl ZnodeState {
    /// A state with the given value and version.
    pub const fn new(value: i64, version: i32) -> Self {
        ZnodeState { value, version }
    }

    /// The register model's transition function.
    ///
    /// Applies `call` to this state, given what the client saw: `Some(ret)` for an operation that
    /// completed with [`Outcome::Ok`], `None` for one whose result is unknown. Returns the state
    /// after the operation if the operation, linearized at a moment when the znode is in this
    /// state, could have produced `ret`; `None` if it could not (the result contradicts the state,
    /// or `ret` is not a possible reply to `call` at all).
    ///
    /// With `ret == None` the operation is applied as the server would apply it: a read changes
    /// nothing, a write always applies, and a cas applies only if its expected version matches
    /// (otherwise the state is returned unchanged). Versions wrap like Java's `int`.
    pub fn apply(self, call: &Call, ret: Option<&Ret>) -> Option<ZnodeState> {
        let bumped = |value: i64| ZnodeState::new(value, self.version.wrapping_add(1));
        match (call, ret) {
            (Call::Read, None) => Some(self),
            (Call::Read, Some(Ret::Read { value, version })) => {
                (*value == self.value && *version == self.version).then_some(self)
            }
            (Call::Write { value }, None) => Some(bumped(*value)),
            (Call::Write { value }, Some(Ret::Written { version })) => {
                let next = bumped(*value);
                (next.version == *version).then_some(next)
            }
            (
                Call::Cas {
                    expect_version,
                    value,
                },
                None,
            ) => Some(if self.version == *expect_version {
                bumped(*value)
            } else {
                self
            }),
            (
                Call::Cas {
                    expect_version,
                    value,
                },
                Some(Ret::Written { version }),
            ) => {
                let next = bumped(*value);
                (self.version == *expect_version && next.version == *version).then_some(next)
            }
            (Call::Cas { expect_version, .. }, Some(Ret::BadVersion)) => {
                (self.version != *expect_version).then_some(self)
            }
            _ => None,
        }
    }
}

impl fmt::Display for ZnodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(value={}, version={})", self.value, self.version)
    }
}

/// What a client asked the server to do to a znode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Call {
    /// `getData`: returns the value and `Stat.version`.
    Read,
    /// `setData` with version `-1`: always applies, bumps the version, returns the new version.
    Write {
        /// The value written.
        value: i64,
    },
    /// `setData` with an expected version: applies (and bumps the version) only if the current
    /// version equals `expect_version`, otherwise fails with `BadVersion`.
    Cas {
        /// The version the znode must have for the write to apply.
        expect_version: i32,
        /// The value written if it applies.
        value: i64,
    },
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Read => write!(f, "read"),
            Call::Write { value } => write!(f, "write({value})"),
            Call::Cas {
                expect_version,
                value,
            } => write!(f, "cas(v{expect_version} -> {value})"),
        }
    }
}

/// The data in a successful reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Ret {
    /// The reply to a [`Call::Read`]: the value and version read.
    Read {
        /// The value read.
        value: i64,
        /// The `Stat.version` read.
        version: i32,
    },
    /// The reply to a [`Call::Write`] or an applied [`Call::Cas`]: the znode's new version.
    Written {
        /// The version the znode has after this write.
        version: i32,
    },
    /// The reply to a [`Call::Cas`] whose expected version did not match: nothing changed.
    BadVersion,
}

impl fmt::Display for Ret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ret::Read { value, version } => write!(f, "(value={value}, version={version})"),
            Ret::Written { version } => write!(f, "version {version}"),
            Ret::BadVersion => write!(f, "BadVersion"),
        }
    }
}

/// How an operation ended, as far as the client knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "status", content = "ret", rename_all = "snake_case")]
pub enum Outcome {
    /// The server replied; the reply is an observation the history must explain. A cas rejected
    /// with `BadVersion` is `Ok(Ret::BadVersion)`: it too is an observation.
    Ok(Ret),
    /// The operation definitely did not take effect (rejected before being sent, or an error that
    /// proves it was not applied). The checkers ignore it.
    Failed,
    /// Indeterminate (timeout, connection loss): it may or may not have taken effect, at any time
    /// after its invocation. Its completion time is ignored (taken as +infinity) and its result
    /// is unconstrained.
    Unknown,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(ret) => write!(f, "ok {ret}"),
            Outcome::Failed => write!(f, "failed"),
            Outcome::Unknown => write!(f, "unknown"),
        }
    }
}

/// One client operation on one znode, from invocation to (possibly unknown) completion.
///
/// Times are nanoseconds on one clock shared by every client of the run (e.g. a monotonic clock
/// of the harness process); only their order matters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Unique id of the operation within the history (used in reports).
    pub id: u64,
    /// The logical client process that issued it (a process issues one operation at a time).
    pub process: u64,
    /// The ZooKeeper session id the request was sent on.
    pub session: i64,
    /// The znode (key) operated on.
    pub key: String,
    /// What was asked.
    pub call: Call,
    /// When the client invoked the operation.
    pub invoke_ns: u64,
    /// When the client saw the reply or gave up; `None` if never. Ignored for
    /// [`Outcome::Unknown`]; an `Ok` op without it is treated as completing at +infinity.
    pub complete_ns: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
    /// The zxid in the reply header, if a reply arrived.
    #[serde(default)]
    pub zxid: Option<i64>,
    /// The server the client was connected to, if known.
    #[serde(default)]
    pub node: Option<u8>,
}

impl Op {
    /// The reply data if the operation completed with [`Outcome::Ok`].
    pub fn ret(&self) -> Option<&Ret> {
        match &self.outcome {
            Outcome::Ok(ret) => Some(ret),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} p{} {:?} {} -> {} [{}, ",
            self.id, self.process, self.key, self.call, self.outcome, self.invoke_ns
        )?;
        match (self.outcome, self.complete_ns) {
            (Outcome::Unknown, _) | (_, None) => write!(f, "inf)")?,
            (_, Some(c)) => write!(f, "{c}]")?,
        }
        if let Some(zxid) = self.zxid {
            write!(f, " zxid={zxid:#x}")?;
        }
        if let Some(node) = self.node {
            write!(f, " node={node}")?;
        }
        Ok(())
    }
}

/// A recorded run: every operation, the initial state of each key, and free-form metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// The operations, in any order (the checkers sort by time themselves).
    pub ops: Vec<Op>,
    /// The state of each key before the run; a key missing here starts as
    /// [`ZnodeState::default()`] (value 0, version 0).
    #[serde(default)]
    pub initial: BTreeMap<String, ZnodeState>,
    /// Free-form description of the run (seed, nemesis schedule, cluster config, ...).
    #[serde(default)]
    pub meta: BTreeMap<String, serde_json::Value>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// The state `key` had before the run.
    pub fn initial_state(&self, key: &str) -> ZnodeState {
        self.initial.get(key).copied().unwrap_or_default()
    }

    /// The history as pretty-printed JSON.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(self).expect("a History always serialises")
    }

    /// Parses a history from JSON.
    pub fn from_json_str(json: &str) -> Result<History, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// Writes the history as JSON to `path` (created or truncated).
    pub fn to_json_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let mut out = BufWriter::new(File::create(path)?);
        serde_json::to_writer(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// Reads a history written by [`History::to_json_file`] (or any equivalent JSON).
    pub fn from_json_file(path: impl AsRef<Path>) -> io::Result<History> {
        let reader = BufReader::new(File::open(path)?);
        Ok(serde_json::from_reader(reader)?)
    }
}

/// One read of a key's final state from one server, taken after the cluster healed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FinalRead {
    /// The server read from.
    pub node: u8,
    /// The value it returned.
    pub value: i64,
    /// The `Stat.version` it returned.
    pub version: i32,
}

/// Final reads per key: key → one [`FinalRead`] per server.
pub type FinalReads = BTreeMap<String, Vec<FinalRead>>;

//! etcd's errors, with its gRPC codes and exact messages (etcd's api/v3rpc/rpctypes/error.go):
//! clients match them by text (clientv3 turns the text back into its error values).

use crate::synod::etcd::v1 as log;

/// gRPC status codes used here.
pub mod code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const NOT_FOUND: i32 = 5;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const OUT_OF_RANGE: i32 = 11;
    pub const UNAVAILABLE: i32 = 14;
}

/// An etcd error: a gRPC code and etcd's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub code: i32,
    pub message: &'static str,
}

const fn f(code: i32, message: &'static str) -> Failure {
    Failure { code, message }
}

pub const EMPTY_KEY: Failure = f(code::INVALID_ARGUMENT, "etcdserver: key is not provided");
pub const KEY_NOT_FOUND: Failure = f(code::INVALID_ARGUMENT, "etcdserver: key not found");
pub const VALUE_PROVIDED: Failure = f(code::INVALID_ARGUMENT, "etcdserver: value is provided");
pub const LEASE_PROVIDED: Failure = f(code::INVALID_ARGUMENT, "etcdserver: lease is provided");
pub const TOO_MANY_OPS: Failure = f(
    code::INVALID_ARGUMENT,
    "etcdserver: too many operations in txn request",
);
pub const DUPLICATE_KEY: Failure = f(
    code::INVALID_ARGUMENT,
    "etcdserver: duplicate key given in txn request",
);
pub const REQUEST_TOO_LARGE: Failure =
    f(code::INVALID_ARGUMENT, "etcdserver: request is too large");
pub const COMPACTED: Failure = f(
    code::OUT_OF_RANGE,
    "etcdserver: mvcc: required revision has been compacted",
);
pub const FUTURE_REV: Failure = f(
    code::OUT_OF_RANGE,
    "etcdserver: mvcc: required revision is a future revision",
);
pub const LEASE_NOT_FOUND: Failure = f(code::NOT_FOUND, "etcdserver: requested lease not found");
pub const LEASE_EXIST: Failure = f(
    code::FAILED_PRECONDITION,
    "etcdserver: lease already exists",
);
pub const LEASE_TTL_TOO_LARGE: Failure = f(code::OUT_OF_RANGE, "etcdserver: too large lease TTL");
pub const NO_LEADER: Failure = f(code::UNAVAILABLE, "etcdserver: no leader");
pub const TIMEOUT: Failure = f(code::UNAVAILABLE, "etcdserver: request timed out");
pub const STOPPED: Failure = f(code::UNAVAILABLE, "etcdserver: server stopped");
pub const TOO_MANY_REQUESTS: Failure = f(code::RESOURCE_EXHAUSTED, "etcdserver: too many requests");
pub const MEMBER_NOT_FOUND: Failure = f(code::NOT_FOUND, "etcdserver: member not found");
pub const NOT_CAPABLE: Failure = f(code::UNAVAILABLE, "etcdserver: not capable");

/// Every failure the state machine can give, by message (a reply read back from the log).
const ALL: &[Failure] = &[
    EMPTY_KEY,
    KEY_NOT_FOUND,
    VALUE_PROVIDED,
    LEASE_PROVIDED,
    TOO_MANY_OPS,
    DUPLICATE_KEY,
    REQUEST_TOO_LARGE,
    COMPACTED,
    FUTURE_REV,
    LEASE_NOT_FOUND,
    LEASE_EXIST,
    LEASE_TTL_TOO_LARGE,
];

impl Failure {
    pub fn to_log(&self) -> log::Failure {
        log::Failure {
            code: self.code,
            message: self.message.to_string(),
        }
    }

    /// The failure a reply carries; `None` for a message this build does not know.
    pub fn from_log(f: &log::Failure) -> Option<Failure> {
        ALL.iter()
            .find(|k| k.code == f.code && k.message == f.message)
            .cloned()
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for Failure {}

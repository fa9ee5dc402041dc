//! ZooKeeper compatibility for synod: the jute codec of ZooKeeper's client protocol, the
//! replicated data tree with ZooKeeper's semantics, the transactions that change it, and the
//! watch registry, and the tree as a replication group's state machine ([`group`]). The server
//! crate puts a network front end on it.

pub mod acl;
pub mod backup;
pub mod group;
pub mod import;
pub mod jaas;
pub mod jute;
pub mod machine;
pub mod path;
pub mod quota;
pub mod ratelimit;
pub mod sasl;
pub mod tree;
pub mod watch;

//! Unit tests on a hand-driven cluster: every message delivered in order, storage durable at
//! once.

use super::*;

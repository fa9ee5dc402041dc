"""Python client of synod's native key-value API (SconeKV): serializable multi-key
transactions over a sharded store, over gRPC (``proto/synod_kv.proto``).

    from synod_kv import Client
    client = Client(["127.0.0.1:2479"])
    with client.begin() as txn:
        balance = txn.get("alice")      # one Read at the key's bucket master
        txn.put("alice", "90")          # coalesced: keeps the version read, no request
        txn.put("bob", "110")           # one Read for bob's version; the value stays buffered
        outcome = txn.commit()          # one CommitRequest to the coordinator bucket's master
    client.put("counter", "1")          # single-key fast path, returns the new version

See README.md for the API and the retry rules.
"""

from synod_kv.client import (
    MAX_KEY_BYTES,
    MAX_TXN_OPS,
    MAX_VALUE_BYTES,
    Client,
    Routing,
    Versioned,
)
from synod_kv.errors import (
    InvalidArgument,
    KvError,
    OutcomeUnknown,
    Rejected,
    TxnStateError,
    Unavailable,
)
from synod_kv.route import bucket_of, fnv1a_64, jump
from synod_kv.txn import Outcome, RecordedOp, Txn, TxnId, TxnRecord

__all__ = [
    "Client",
    "Routing",
    "Versioned",
    "Txn",
    "TxnId",
    "Outcome",
    "TxnRecord",
    "RecordedOp",
    "KvError",
    "InvalidArgument",
    "Rejected",
    "Unavailable",
    "OutcomeUnknown",
    "TxnStateError",
    "bucket_of",
    "fnv1a_64",
    "jump",
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "MAX_TXN_OPS",
]

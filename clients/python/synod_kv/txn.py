"""``Txn``: a transaction's read/write set, buffered at the client until commit.

* ``get`` answers from the buffer if the key is already in the set (read-your-writes);
  otherwise one Read at the key's bucket master, recorded as ``READ(key, version)``.
* ``put`` and ``delete`` of a key already in the set replace its entry with a WRITE or DELETE
  that keeps the version observed earlier (coalescing: no request); otherwise one Read fetches
  the version. The value stays in the buffer.
* ``put_blind`` and ``delete_blind`` of a key new to the set send nothing: the op is marked
  ``blind``, so the store validates no version for it (it only waits for the key's lock). The
  commit's answer tells the version each op left (``committed_version``).
* ``commit`` sends one CommitRequest with every op to the master of the coordinator bucket (the
  lowest bucket index among the keys' buckets). The store commits only if every observed
  version is still current. Read-only transactions commit too: that validates their reads.

Each finished transaction is handed to the client's ``recorder`` (a callable) once, as a
``TxnRecord``: when decided, aborted locally, or closed undecided (``with`` block exit or
garbage collection): ``"aborted"`` if its commit was never sent, ``"unknown"`` if it was.
"""

import time
from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional

from synod_kv._stubs import pb
from synod_kv.client import MAX_TXN_OPS, Data, _Stop, as_bytes, check_key, check_value
from synod_kv.errors import InvalidArgument, OutcomeUnknown, Rejected, TxnStateError, Unavailable

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


class TxnId(NamedTuple):
    """Unique in the cluster, ordered by age (``time``, then ``node``)."""

    time: int
    node: int

    def __str__(self) -> str:
        return f"{self.time}@n{self.node >> 32}.{self.node & 0xFFFFFFFF}"


@dataclass(frozen=True)
class Outcome:
    """A decided transaction; ``reason`` says why it aborted."""

    committed: bool
    reason: str = ""


@dataclass(frozen=True)
class RecordedOp:
    """One op of a recorded transaction. A key read and then written appears twice: READ (the
    value read) then WRITE or DELETE, with the version observed by the read. ``kind`` is
    ``"READ"``, ``"WRITE"`` or ``"DELETE"``; ``blind``: a write without a version to validate
    (``version`` is then 0); ``installed``: for a committed write, the version it installed
    (when the server reported it)."""

    key: bytes
    kind: str
    version: int
    value: Optional[bytes]
    blind: bool = False
    installed: Optional[int] = None


@dataclass(frozen=True)
class TxnRecord:
    """A finished transaction: ``outcome`` is ``"committed"``, ``"aborted"`` or ``"unknown"``;
    ``begun`` and ``finished`` are ``time.monotonic()`` readings."""

    id: TxnId
    outcome: str
    ops: List[RecordedOp]
    begun: float
    finished: float


_PUT, _DELETE = "put", "delete"


@dataclass
class _Entry:
    key: bytes
    version: int
    read: bool = False  # the transaction read the key from the store
    read_value: Optional[bytes] = None
    write: Optional[str] = None  # _PUT or _DELETE
    value: bytes = b""
    blind: bool = False  # entered the set by a blind write: no version to validate
    committed: Optional[int] = None  # the version the commit left

    def op(self):
        kind = {None: pb.READ, _PUT: pb.WRITE, _DELETE: pb.DELETE}[self.write]
        value = self.value if self.write == _PUT else b""
        blind = self.blind and self.write is not None
        return pb.Op(key=self.key, kind=kind, version=self.version, value=value, blind=blind)


class Txn:
    """A transaction. Begin one with ``Client.begin()``; usable as a context manager (an
    undecided transaction is aborted locally at the end of the block)."""

    def __init__(self, client, txn_id: TxnId):
        self.client = client
        self.id = txn_id
        self._entries = {}  # key -> _Entry, in the order keys entered the set
        self._state = "active"  # active | unknown | done
        self._outcome: Optional[Outcome] = None
        self._begun = time.monotonic()
        self._recorded = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._state == "active":
            self.abort()
        self._record()

    def __del__(self):
        try:
            self._record()
        except Exception:
            pass

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def outcome(self) -> Optional[Outcome]:
        """The outcome, once decided."""
        return self._outcome

    def _check_active(self) -> None:
        if self._state == "unknown":
            raise TxnStateError(f"{self.id} is committing")
        if self._state == "done":
            raise TxnStateError(f"{self.id} is already {self._outcome}")

    def _fetch(self, key: bytes):
        if len(self._entries) + 1 > MAX_TXN_OPS:
            raise InvalidArgument(
                f"a transaction of {len(self._entries) + 1} keys, the limit is {MAX_TXN_OPS}"
            )
        v = self.client._read(key)
        entry = _Entry(key=key, version=v.version)
        self._entries[key] = entry
        return entry, v.value

    def get(self, key: Data) -> Optional[bytes]:
        """The value of ``key`` as this transaction sees it (``None``: absent or deleted)."""
        self._check_active()
        key = as_bytes(key)
        check_key(key)
        e = self._entries.get(key)
        if e is not None:
            if e.write == _PUT:
                return e.value
            if e.write == _DELETE:
                return None
            return e.read_value
        e, value = self._fetch(key)
        e.read, e.read_value = True, value
        return value

    def put(self, key: Data, value: Data) -> None:
        """Buffers a write of ``value`` at ``key``, conditional on the version observed."""
        value = as_bytes(value)
        check_value(value)
        self._set(as_bytes(key), _PUT, value)

    def delete(self, key: Data) -> None:
        """Buffers a delete of ``key``, conditional on the version observed."""
        self._set(as_bytes(key), _DELETE, b"")

    def put_blind(self, key: Data, value: Data) -> None:
        """Buffers a write without fetching the key's version: if the key is new to the
        transaction nothing is sent, and the store validates no version for it. A key already
        in the set is written as by ``put``."""
        value = as_bytes(value)
        check_value(value)
        self._set(as_bytes(key), _PUT, value, blind=True)

    def delete_blind(self, key: Data) -> None:
        """Buffers a delete without fetching the key's version, like ``put_blind``."""
        self._set(as_bytes(key), _DELETE, b"", blind=True)

    def _set(self, key: bytes, write: str, value: bytes, blind: bool = False) -> None:
        self._check_active()
        check_key(key)
        e = self._entries.get(key)
        if e is None and blind:
            if len(self._entries) + 1 > MAX_TXN_OPS:
                raise InvalidArgument(
                    f"a transaction of {len(self._entries) + 1} keys, the limit is {MAX_TXN_OPS}"
                )
            e = self._entries[key] = _Entry(key=key, version=0, blind=True)
        elif e is None:
            e, _ = self._fetch(key)
        e.write, e.value = write, value

    def committed_version(self, key: Data) -> Optional[int]:
        """After a commit, the version of ``key`` it left (installed by a write, validated by a
        read); None before, for a key not in the set, or if the server did not report it."""
        e = self._entries.get(as_bytes(key))
        return e.committed if e else None

    def _coordinator(self, routing) -> int:
        return min(routing.bucket_of(k) for k in self._entries)

    def commit(self) -> Outcome:
        """Commits: one CommitRequest to the coordinator bucket's master, retried with the same
        id (idempotent). Raises ``OutcomeUnknown`` if every attempt that may have arrived went
        unanswered: call ``commit()`` again, or ``abort()`` to have the coordinator decide."""
        if self._state == "done":
            raise TxnStateError(f"{self.id} is already {self._outcome}")
        if not self._entries:
            return self._finish(Outcome(True))
        ops = [e.op() for e in self._entries.values()]
        tid = pb.TxnId(time=self.id.time, node=self.id.node)
        return self._decide(
            "Commit",
            lambda r: pb.CommitRequest(view_version=r.version, id=tid, ops=ops),
        )

    def abort(self) -> Outcome:
        """Aborts. Before a commit was sent this is local (nothing is sent). After a commit
        whose outcome is unknown it asks the coordinator to abort, which it does unless it had
        already decided commit: the returned outcome says which."""
        if self._state == "active":
            return self._finish(Outcome(False, "aborted by client"))
        if self._state == "done":
            return self._outcome
        tid = pb.TxnId(time=self.id.time, node=self.id.node)
        return self._decide(
            "Abort",
            lambda r: pb.AbortRequest(
                view_version=r.version,
                id=tid,
                buckets=sorted({r.bucket_of(k) for k in self._entries}),
            ),
        )

    def _decide(self, method: str, build) -> Outcome:
        was_unknown = self._state == "unknown"
        try:
            resp = self.client._request(
                lambda r: ("master", self._coordinator(r)), method, build
            )
        except _Stop as s:
            if not was_unknown and s.refused:
                self._finish(Outcome(False, f"refused: {s.refused[1]}"))
                raise Rejected(*s.refused) from None
            if not was_unknown and not s.ambiguous:
                self._finish(Outcome(False, f"commit never delivered: {s.why}"))
                raise Unavailable(s.why) from None
            self._state = "unknown"
            raise OutcomeUnknown(s.why, self.id) from None
        if resp.outcome == pb.COMMITTED:
            if len(resp.versions) == len(self._entries):
                for e, v in zip(self._entries.values(), resp.versions):
                    e.committed = v
            return self._finish(Outcome(True))
        if resp.outcome == pb.ABORTED:
            return self._finish(Outcome(False, resp.reason))
        self._state = "unknown"
        raise OutcomeUnknown(f"{method} answered without a decision", self.id)

    def _finish(self, outcome: Outcome) -> Outcome:
        self._state, self._outcome = "done", outcome
        self._record()
        return outcome

    def _record(self) -> None:
        if self._recorded:
            return
        self._recorded = True
        recorder = self.client.recorder
        if recorder is None:
            return
        if self._state == "done":
            outcome = COMMITTED if self._outcome.committed else ABORTED
        else:
            outcome = UNKNOWN if self._state == "unknown" else ABORTED
        ops = []
        for e in self._entries.values():
            if e.read:
                ops.append(RecordedOp(e.key, "READ", e.version, e.read_value))
            if e.write == _PUT:
                ops.append(RecordedOp(e.key, "WRITE", e.version, e.value, e.blind, e.committed))
            elif e.write == _DELETE:
                ops.append(RecordedOp(e.key, "DELETE", e.version, None, e.blind, e.committed))
        recorder(TxnRecord(self.id, outcome, ops, self._begun, time.monotonic()))

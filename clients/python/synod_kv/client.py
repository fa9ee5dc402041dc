"""``Client``: the view, the routing of each request to the right node, the retries, and the
single-key operations. Transactions are in ``synod_kv.txn``.

Every request carries the client's view version. A node that answers ``STALE_VIEW``,
``NOT_MASTER`` or ``WRONG_NODE`` sends its view; the client keeps it if it is newer, or takes
its masters if it has the same version (``Routing.merge``), and retries at once; if it taught
nothing, the client refreshes the view from another node and backs off. Timeouts and
``UNAVAILABLE`` back off and retry within ``retries``. Reads, views and commits (idempotent by
their id) are retried after any failure; single-key writes stop at the first failure after
which they may have been applied (``OutcomeUnknown``): a repeated compare-and-set could report
its own write as a mismatch.
"""

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, Union

import grpc

from synod_kv._stubs import pb, pb_grpc
from synod_kv.errors import InvalidArgument, OutcomeUnknown, Rejected, Unavailable
from synod_kv.route import bucket_of

MAX_KEY_BYTES = 4 << 10
MAX_VALUE_BYTES = 1 << 20
MAX_TXN_OPS = 1024
# The largest response decoded: a value of MAX_VALUE_BYTES, or a large view.
_MAX_RESPONSE_BYTES = 16 << 20

Data = Union[bytes, str]


def as_bytes(data: Data) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


def check_key(key: bytes) -> None:
    if not key:
        raise InvalidArgument("empty key")
    if len(key) > MAX_KEY_BYTES:
        raise InvalidArgument(f"key of {len(key)} bytes, the limit is {MAX_KEY_BYTES}")


def check_value(value: bytes) -> None:
    if len(value) > MAX_VALUE_BYTES:
        raise InvalidArgument(f"value of {len(value)} bytes, the limit is {MAX_VALUE_BYTES}")


@dataclass(frozen=True)
class Versioned:
    """A key's value (``None``: absent or deleted) and version (0: never written)."""

    value: Optional[bytes]
    version: int


class Routing:
    """One version of the cluster's routing, as GetView returned it."""

    def __init__(self, view):
        buckets = sorted(view.buckets, key=lambda b: b.index)
        if not buckets:
            raise Unavailable(f"view {view.version} has no buckets yet")
        for i, b in enumerate(buckets):
            if b.index != i:
                raise Unavailable(f"view {view.version} numbers bucket {i} as {b.index}")
        self.view = view
        self.version = view.version
        self._buckets = buckets
        self._addresses = {n.id: n.address for n in view.nodes}

    @property
    def buckets(self) -> int:
        return len(self._buckets)

    def bucket_of(self, key: bytes) -> int:
        return bucket_of(key, len(self._buckets))

    def master_address(self, bucket: int) -> Optional[str]:
        b = self._buckets[bucket]
        return self._addresses.get(b.master) if b.master else None

    def replica_addresses(self, bucket: int) -> List[str]:
        return [self._addresses[m] for m in self._buckets[bucket].members if m in self._addresses]

    def node_addresses(self) -> List[str]:
        return [n.address for n in self.view.nodes]

    def merge(self, view) -> Optional["Routing"]:
        """What to keep after learning ``view``, ``None`` if it teaches nothing. A newer version
        replaces this one; the same version may still know fresher masters (a master can change
        without a new view version, and a node reports 0 for buckets it does not hold), taken
        bucket by bucket; an older view is ignored."""
        if view.version > self.version:
            try:
                return Routing(view)
            except Unavailable:
                return None
        if view.version < self.version:
            return None
        merged = pb.View()
        merged.CopyFrom(self.view)
        merged.ClearField("buckets")
        merged.buckets.extend(self._buckets)
        changed = False
        for b in view.buckets:
            if b.index < len(merged.buckets):
                mine = merged.buckets[b.index]
                if b.master and b.master != mine.master and b.master in self._addresses:
                    mine.master = b.master
                    changed = True
        return Routing(merged) if changed else None


class _Failure(Exception):
    """A failed attempt; ``ambiguous``: it may have been applied."""

    def __init__(self, why: str, ambiguous: bool):
        super().__init__(why)
        self.why = why
        self.ambiguous = ambiguous


class _Stop(Exception):
    """Why ``Client._request`` gave up."""

    def __init__(self, why: str, ambiguous: bool = False, refused: Optional[Tuple[str, str]] = None):
        super().__init__(why)
        self.why = why
        self.ambiguous = ambiguous
        self.refused = refused


_REDIRECT = {pb.STALE_VIEW, pb.NOT_MASTER, pb.WRONG_NODE}


class Client:
    """A connection to a SconeKV cluster: fetches the view from the first seed
    (``host:port``) that answers. Thread-safe."""

    def __init__(
        self,
        seeds: List[str],
        *,
        timeout: float = 5.0,
        retries: int = 8,
        backoff_initial: float = 0.05,
        backoff_max: float = 1.0,
        replica_reads: bool = False,
        recorder: Optional[Callable] = None,
        ca: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
    ):
        """``ca``: the cluster CA's PEM file, for a cluster that serves TLS (``[tls] kv``, on
        in a secure cluster); ``cert``/``key``: a client certificate to show the nodes."""
        if isinstance(seeds, str):
            seeds = [s.strip() for s in seeds.split(",") if s.strip()]
        if not seeds:
            raise InvalidArgument("no seed address")
        self.seeds = list(seeds)
        self.timeout = timeout
        self.retries = retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.replica_reads = replica_reads
        self.recorder = recorder
        self._credentials = None
        if ca is not None:
            def read(path):
                with open(path, "rb") as f:
                    return f.read()

            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=read(ca),
                private_key=read(key) if key else None,
                certificate_chain=read(cert) if cert else None,
            )
        elif cert is not None:
            raise InvalidArgument("a client certificate needs the cluster CA (ca=...)")
        self._lock = threading.Lock()
        self._channels = {}
        self._turn = itertools.count()
        self._routing = None
        delay, last = backoff_initial, ""
        for attempt in range(retries + 1):
            for seed in self.seeds:
                try:
                    self._routing = self._fetch_view(seed)
                    return
                except _Failure as f:
                    last = f.why
            if attempt < retries:
                time.sleep(delay)
                delay = min(delay * 2, backoff_max)
        self.close()
        raise Unavailable(f"no seed answered GetView: {last}")

    def close(self) -> None:
        with self._lock:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def routing(self) -> Routing:
        """The current view."""
        return self._routing

    # -- transport ---------------------------------------------------------------------------

    def _stub(self, addr: str):
        with self._lock:
            ch = self._channels.get(addr)
            if ch is None:
                options = [
                    ("grpc.max_receive_message_length", _MAX_RESPONSE_BYTES),
                    ("grpc.max_send_message_length", -1),
                ]
                if self._credentials is not None:
                    ch = grpc.secure_channel(addr, self._credentials, options=options)
                else:
                    ch = grpc.insecure_channel(addr, options=options)
                self._channels[addr] = ch
        return pb_grpc.KvStub(ch)

    def _send(self, addr: str, method: str, request):
        try:
            return getattr(self._stub(addr), method)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            details = (e.details() if hasattr(e, "details") else "") or ""
            why = f"{addr}: {code} {details}"
            refused = code == grpc.StatusCode.UNAVAILABLE and "refused" in details.lower()
            not_sent = refused or code == grpc.StatusCode.UNIMPLEMENTED
            raise _Failure(why, ambiguous=not not_sent) from None

    def _fetch_view(self, addr: str) -> Routing:
        view = self._send(addr, "GetView", pb.GetViewRequest())
        try:
            return Routing(view)
        except Unavailable as e:
            raise _Failure(f"{addr}: {e}", ambiguous=False) from None

    def _apply_view(self, view) -> bool:
        """Learns what ``view`` teaches (``Routing.merge``); True if the routing changed."""
        with self._lock:
            merged = self._routing.merge(view)
            if merged is not None:
                self._routing = merged
            return merged is not None

    def refresh_view(self) -> Routing:
        """Fetches the view from a node (of the current view, then the seeds) and learns from
        it (``Routing.merge``). Returns the view in use afterwards."""
        candidates = self._routing.node_addresses()
        candidates += [s for s in self.seeds if s not in candidates]
        start, last = next(self._turn), ""
        for i in range(min(3, len(candidates))):
            addr = candidates[(start + i) % len(candidates)]
            try:
                self._apply_view(self._fetch_view(addr).view)
                return self._routing
            except _Failure as f:
                last = f.why
        raise Unavailable(f"no node answered GetView: {last}")

    def _refresh_quietly(self) -> None:
        try:
            self.refresh_view()
        except Unavailable:
            pass

    def _address(self, routing: Routing, target) -> Optional[str]:
        """Where to send a request for ``target`` now. A bucket without a known master falls
        back to one of its replicas (which forwards commits and writes to the master, and
        redirects reads), and a bucket without known replicas to any node."""
        kind, bucket = target
        turn = next(self._turn)

        def pick(addresses):
            return addresses[turn % len(addresses)] if addresses else None

        def any_node():
            return pick(routing.node_addresses() or self.seeds)

        if kind == "any":
            return any_node()
        if kind == "read" and self.replica_reads:
            return pick(routing.replica_addresses(bucket)) or any_node()
        return (
            routing.master_address(bucket)
            or pick(routing.replica_addresses(bucket))
            or any_node()
        )

    def _request(self, target: Callable, method: str, build: Callable, repeat_ambiguous: bool = True):
        """Sends ``method`` to ``target(routing)`` (``("master"|"read", bucket)`` or
        ``("any", None)``) with the request ``build(routing)``, retrying within the budget.
        Raises ``_Stop`` when it gives up."""
        delay, ambiguous, last = self.backoff_initial, False, ""
        for attempt in range(self.retries + 1):
            routing = self._routing
            wait = True
            addr = self._address(routing, target(routing))
            if addr is None:
                self._refresh_quietly()
                failure = _Failure(f"no node to send to in view {routing.version}", False)
            else:
                try:
                    resp = self._send(addr, method, build(routing))
                    verdict = self._verdict(addr, resp)
                    if verdict is None:
                        return resp
                    failure, wait = verdict
                except _Failure as f:
                    self._refresh_quietly()
                    failure = f
            ambiguous |= failure.ambiguous
            last = failure.why
            if failure.ambiguous and not repeat_ambiguous:
                raise _Stop(last, ambiguous=True)
            if attempt < self.retries and wait:
                time.sleep(delay)
                delay = min(delay * 2, self.backoff_max)
        raise _Stop(f"gave up after {self.retries} retries: {last}", ambiguous=ambiguous)

    def _verdict(self, addr: str, resp) -> Optional[Tuple[_Failure, bool]]:
        """None if served; else the failure and whether to back off before retrying (not after
        a redirect that taught a new master). Raises ``_Stop`` for a refusal."""
        if not resp.HasField("status") or resp.status.error == pb.NONE:
            return None
        s = resp.status
        name = pb.Error.Name(s.error) if s.error in pb.Error.values() else str(s.error)
        why = f"{addr}: {name} {s.detail}"
        if s.error in _REDIRECT:
            if s.HasField("view") and self._apply_view(s.view):
                return _Failure(why, ambiguous=False), False
            self._refresh_quietly()
            return _Failure(why, ambiguous=False), True
        if s.error == pb.BUSY:
            return _Failure(why, ambiguous=False), True
        if s.error in (pb.INVALID, pb.TOO_LARGE):
            raise _Stop(why, refused=(name, s.detail))
        return _Failure(why, ambiguous=True), True

    # -- operations --------------------------------------------------------------------------

    def begin(self):
        """Begins a transaction: asks any node for a transaction id."""
        from synod_kv.txn import Txn, TxnId

        try:
            resp = self._request(lambda r: ("any", None), "Begin", lambda r: pb.BeginRequest())
        except _Stop as s:
            raise _safe_error(s, "begin") from None
        if not resp.HasField("id"):
            raise Unavailable("Begin answered without an id")
        return Txn(self, TxnId(resp.id.time, resp.id.node))

    def get(self, key: Data) -> Optional[bytes]:
        """The latest committed value of ``key`` at its bucket's master (not validated: only a
        transaction's commit certifies what it read)."""
        return self.get_versioned(key).value

    def get_versioned(self, key: Data) -> Versioned:
        key = as_bytes(key)
        check_key(key)
        return self._read(key)

    def _read(self, key: bytes) -> Versioned:
        any_replica = self.replica_reads
        try:
            resp = self._request(
                lambda r: ("read", r.bucket_of(key)),
                "Read",
                lambda r: pb.ReadRequest(view_version=r.version, key=key, any_replica=any_replica),
            )
        except _Stop as s:
            raise _safe_error(s, "read") from None
        return Versioned(resp.value if resp.found else None, resp.version)

    def put(self, key: Data, value: Data) -> int:
        """Writes ``value`` at ``key`` unconditionally; returns the key's new version."""
        key, value = as_bytes(key), as_bytes(value)
        check_key(key)
        check_value(value)
        return self._write(
            key, "Put", lambda r: pb.PutRequest(view_version=r.version, key=key, value=value)
        ).version

    def delete(self, key: Data) -> int:
        """Deletes ``key`` (it keeps a tombstone version); returns the key's new version."""
        key = as_bytes(key)
        check_key(key)
        return self._write(
            key, "Delete", lambda r: pb.DeleteRequest(view_version=r.version, key=key)
        ).version

    def compare_and_set(self, key: Data, expected_version: int, value: Data) -> Tuple[bool, int]:
        """Writes ``value`` if ``key``'s version is ``expected_version`` (0: never written).
        Returns whether it wrote, and the key's version afterwards (the current one if not)."""
        key, value = as_bytes(key), as_bytes(value)
        check_key(key)
        check_value(value)
        resp = self._write(
            key,
            "CompareAndSet",
            lambda r: pb.CompareAndSetRequest(
                view_version=r.version, key=key, expected_version=expected_version, value=value
            ),
        )
        return resp.done, resp.version

    def _write(self, key: bytes, method: str, build: Callable):
        try:
            return self._request(
                lambda r: ("master", r.bucket_of(key)), method, build, repeat_ambiguous=False
            )
        except _Stop as s:
            if s.refused:
                raise Rejected(*s.refused) from None
            if s.ambiguous:
                raise OutcomeUnknown(s.why) from None
            raise Unavailable(s.why) from None


def _safe_error(stop: _Stop, what: str) -> Exception:
    if stop.refused:
        return Rejected(*stop.refused)
    return Unavailable(f"{what}: {stop.why}")

"""An in-process fake SconeKV cluster for the client's tests: ``n`` gRPC servers on 127.0.0.1
sharing one in-memory model (values with versions and tombstones; commits validated by exact
version equality and remembered by id). Each node checks what a real one would: the request's
view version, and that it masters the bucket (for commits, the lowest bucket among the keys).
Calls are logged for the tests, and a commit can be made to answer UNAVAILABLE after deciding
or to answer late."""

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import List, Optional

import grpc

from synod_kv import bucket_of
from synod_kv._stubs import pb, pb_grpc


@dataclass
class Call:
    node: int
    rpc: str
    key: Optional[bytes] = None
    txn: Optional[tuple] = None
    ops: list = field(default_factory=list)


class Model:
    def __init__(self):
        self.lock = threading.Lock()
        self.view = pb.View(version=1)
        self.data = {}  # key -> (value or None, version)
        self.decided = {}  # (time, node) -> (outcome, reason, versions)
        self.calls: List[Call] = []
        self.next_txn = 0
        self.commit_unavailable_after_decide = 0
        self.commit_delay = (0, 0.0)  # (how many commits, seconds)

    def status(self, error):
        return pb.Status(error=error, detail=pb.Error.Name(error), view=self.view)

    def bucket(self, key):
        return bucket_of(key, len(self.view.buckets))

    def master(self, bucket):
        return self.view.buckets[bucket].master

    def check(self, node, view_version, bucket):
        if view_version < self.view.version:
            return self.status(pb.STALE_VIEW)
        if self.master(bucket) != node:
            return self.status(pb.NOT_MASTER)
        return None

    def current(self, key):
        return self.data.get(key, (None, 0))

    def write(self, key, value):
        version = self.current(key)[1] + 1
        self.data[key] = (value, version)
        return version


class Node(pb_grpc.KvServicer):
    def __init__(self, node_id, model):
        self.id = node_id
        self.m = model

    def _log(self, rpc, key=None, txn=None, ops=()):
        self.m.calls.append(Call(self.id, rpc, key, txn, list(ops)))

    def GetView(self, request, context):
        with self.m.lock:
            self._log("GetView")
            return self.m.view

    def Begin(self, request, context):
        with self.m.lock:
            self._log("Begin")
            self.m.next_txn += 1
            n = self.m.next_txn
            return pb.BeginResponse(id=pb.TxnId(time=n, node=(self.id << 32) | n))

    def Read(self, request, context):
        with self.m.lock:
            self._log("Read", key=request.key)
            refused = self.m.check(self.id, request.view_version, self.m.bucket(request.key))
            if refused:
                return pb.ReadResponse(status=refused)
            value, version = self.m.current(request.key)
            return pb.ReadResponse(found=value is not None, value=value or b"", version=version)

    def Commit(self, request, context):
        tid = (request.id.time, request.id.node)
        with self.m.lock:
            self._log("Commit", txn=tid, ops=request.ops)
            coordinator = min(self.m.bucket(o.key) for o in request.ops)
            refused = self.m.check(self.id, request.view_version, coordinator)
            if refused:
                return pb.CommitResponse(status=refused)
            if tid not in self.m.decided:
                stale = [
                    o
                    for o in request.ops
                    if not o.blind and self.m.current(o.key)[1] != o.version
                ]
                if stale:
                    reason = f"version of {stale[0].key!r} changed"
                    self.m.decided[tid] = (pb.ABORTED, reason, [])
                else:
                    versions = []
                    for o in request.ops:
                        if o.kind == pb.WRITE:
                            versions.append(self.m.write(o.key, o.value))
                        elif o.kind == pb.DELETE:
                            versions.append(self.m.write(o.key, None))
                        else:
                            versions.append(self.m.current(o.key)[1])
                    self.m.decided[tid] = (pb.COMMITTED, "", versions)
                if self.m.commit_unavailable_after_decide:
                    self.m.commit_unavailable_after_decide -= 1
                    return pb.CommitResponse(status=pb.Status(error=pb.UNAVAILABLE))
            count, delay = self.m.commit_delay
            if count:
                self.m.commit_delay = (count - 1, delay)
        if count:
            time.sleep(delay)
        with self.m.lock:
            outcome, reason, versions = self.m.decided[tid]
            return pb.CommitResponse(outcome=outcome, reason=reason, versions=versions)

    def Abort(self, request, context):
        tid = (request.id.time, request.id.node)
        with self.m.lock:
            self._log("Abort", txn=tid)
            decision = (pb.ABORTED, "aborted by client", [])
            outcome, reason, versions = self.m.decided.setdefault(tid, decision)
            return pb.CommitResponse(outcome=outcome, reason=reason, versions=versions)

    def _single(self, rpc, request, apply):
        with self.m.lock:
            self._log(rpc, key=request.key)
            refused = self.m.check(self.id, request.view_version, self.m.bucket(request.key))
            if refused:
                return pb.WriteResponse(status=refused)
            return apply()

    def Put(self, request, context):
        return self._single(
            "Put",
            request,
            lambda: pb.WriteResponse(done=True, version=self.m.write(request.key, request.value)),
        )

    def Delete(self, request, context):
        return self._single(
            "Delete",
            request,
            lambda: pb.WriteResponse(done=True, version=self.m.write(request.key, None)),
        )

    def CompareAndSet(self, request, context):
        def apply():
            current = self.m.current(request.key)[1]
            if current != request.expected_version:
                return pb.WriteResponse(done=False, version=current)
            return pb.WriteResponse(done=True, version=self.m.write(request.key, request.value))

        return self._single("CompareAndSet", request, apply)


class Cluster:
    """``nodes`` servers (ids 1..nodes), ``buckets`` buckets; bucket b is mastered by node
    ``b % nodes + 1`` and replicated everywhere. View version 1."""

    def __init__(self, nodes: int, buckets: int):
        self.model = Model()
        self.servers = []
        self.addresses = []
        for node_id in range(1, nodes + 1):
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
            pb_grpc.add_KvServicer_to_server(Node(node_id, self.model), server)
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
            self.servers.append(server)
            self.addresses.append(f"127.0.0.1:{port}")
        self.model.view = pb.View(
            version=1,
            nodes=[pb.Node(id=i + 1, address=a) for i, a in enumerate(self.addresses)],
            buckets=[
                pb.Bucket(index=b, group=b, members=range(1, nodes + 1), master=b % nodes + 1)
                for b in range(buckets)
            ],
        )

    def stop(self):
        for s in self.servers:
            s.stop(0)

    def remaster(self, master):
        """A new view in which bucket b's master is ``master(b)``."""
        with self.model.lock:
            self.model.view.version += 1
        self.move_masters(master)

    def move_masters(self, master):
        """Bucket b's master becomes ``master(b)`` (0: none) in the same view version, as a
        leader election inside a bucket's group does."""
        with self.model.lock:
            for b in self.model.view.buckets:
                b.master = master(b.index)

    def take_calls(self):
        with self.model.lock:
            calls, self.model.calls = self.model.calls, []
            return calls

    def value(self, key: bytes):
        with self.model.lock:
            return self.model.current(key)

    def master_of(self, key: bytes) -> int:
        with self.model.lock:
            return self.model.master(self.model.bucket(key))

    def bucket_of(self, key: bytes) -> int:
        with self.model.lock:
            return self.model.bucket(key)

"""The generated gRPC modules, with a clear message when they have not been generated."""

try:
    from synod_kv import synod_kv_pb2 as pb  # noqa: F401
    from synod_kv import synod_kv_pb2_grpc as pb_grpc  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the checkout
    raise ImportError(
        "synod_kv's gRPC stubs are missing: run clients/python/generate.sh "
        "(needs grpcio-tools) before using the package"
    ) from e

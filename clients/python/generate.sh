#!/usr/bin/env bash
# Generates the gRPC stubs of ../../proto/synod_kv.proto into the package (synod_kv/synod_kv_pb2.py,
# synod_kv_pb2_grpc.py, synod_kv_pb2.pyi). Needs grpcio-tools; PYTHON picks the interpreter
# (default: python3). The generated files are not committed (see .gitignore).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
# Mapping the proto directory to the virtual path synod_kv/ makes the generated modules import
# each other as `from synod_kv import ...`, so they work inside the package.
"$PYTHON" -m grpc_tools.protoc \
  --proto_path=synod_kv=../../proto \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  synod_kv/synod_kv.proto

#!/usr/bin/env bash
# Build synod and run its main job: a local three-node cluster on loopback (Ctrl-C stops it).
# Extra arguments go to `synod dev` (e.g. --nodes 5, --base-port 3180, --data DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi
cargo build --release --locked
exec ./target/release/synod dev --nodes 3 "$@"

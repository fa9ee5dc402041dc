#!/usr/bin/env bash
# Build synod and run its main job.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
exec ./target/release/synod sim --protocol zab --nodes 3 --seeds 0..1000 --faults all "$@"

#!/usr/bin/env bash
# The whole test suite, from a fresh clone. CI runs exactly this (see .ci/run).
# It installs what it needs, checks formatting and lints, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test (release: the simulator runs thousands of seeded runs)"
cargo test --workspace --release --locked

#!/usr/bin/env bash
# synod against Apache ZooKeeper 3.8 and etcd 3.4 on this machine, one system at a time:
# installs what is missing (Debian: zookeeper, etcd-server), builds synod, runs the matrix and
# writes
# docs/results/compare.{md,json,svg} (another directory with --out DIR). Extra arguments go to
# `synod bench compare` (e.g. --duration 5s --clients 1,32).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]} (sudo apt-get install ${need[*]}); the comparison skips what is absent" >&2
  fi
fi

echo "== building synod"
cargo build --release --locked -p synod
out=(--out docs/results)
for a in "$@"; do
  case "$a" in --out | --out=*) out=() ;; esac
done
exec target/release/synod bench compare "${out[@]}" "$@"

#!/usr/bin/env bash
# Builds the `synod` binary of the previous release, for the rolling-upgrade test
# (crates/synod/tests/upgrade.rs, which reads SYNOD_PREVIOUS_BIN).
#
#   scripts/build-previous.sh            # builds target/previous/synod-v0.1.0
#
# The source is a git worktree of the release tag under target/previous/src-<tag>. It builds in
# the suite's own target directory and `ci` profile (defined here with --config: the release
# has no such profile), so the dependencies the suite already compiled are reused: only the
# release's own crates (and the few dependencies whose version or features differ) compile,
# and those at opt-level 1 (the binary is a test participant; its formats do not depend on
# optimisation). That takes about 3 minutes on two cores instead of 4.5 for a build in a
# directory of its own (the whole suite must stay under 30 minutes). Sharing the directory
# means the release's binary is written where this tree's is (target/ci/synod): that file is
# saved before and put back after, whatever happens. `--locked` builds exactly the dependency
# versions the release shipped with. A binary that is already there is kept (delete it to
# rebuild). A clone without tags falls back to the release's commit; a clone that has neither
# fails with a message saying what to fetch.
# Prints the path of the binary on its last line of standard output.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=v0.1.0
commit=7fd1580d3a4cf4001ef993363aef14df690e43e1
out_dir="$PWD/target/previous"
bin="$out_dir/synod-$tag"

if [ -x "$bin" ]; then
  echo "previous release already built: $bin" >&2
  echo "$bin"
  exit 0
fi

if rev=$(git rev-parse --verify --quiet "refs/tags/$tag^{commit}"); then
  :
elif rev=$(git rev-parse --verify --quiet "$commit^{commit}"); then
  echo "tag $tag is missing (a clone without tags?): building its commit $commit" >&2
else
  echo "neither the tag $tag nor its commit $commit is in this clone:" >&2
  echo "  git fetch --tags origin (a shallow clone: git fetch --unshallow --tags origin)," >&2
  echo "  then run this again" >&2
  exit 1
fi

src="$out_dir/src-$tag"
mkdir -p "$out_dir"
git worktree prune
if [ -d "$src" ] && [ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$rev" ]; then
  git worktree remove --force "$src"
fi
if [ ! -d "$src" ]; then
  git worktree add --detach --quiet "$src" "$rev"
fi

start=$(date +%s)
target="${CARGO_TARGET_DIR:-$PWD/target}"
current="$target/ci/synod"
saved="$out_dir/synod-current.saved"
if [ -e "$current" ]; then
  cp -p "$current" "$saved"
  trap 'cp -p "$saved" "$current" && rm -f "$saved"' EXIT
fi
# The release's own packages (its workspace members), built at opt-level 1.
overrides=()
for p in synod synod-core synod-kv synod-zab synod-paxos synod-mencius synod-sim \
  synod-protocols synod-log synod-server synod-zk synod-history synod-testkit synod-kv-client; do
  overrides+=(--config "profile.ci.package.$p.opt-level=1")
done
# Cargo names a workspace package's artifacts by its path relative to the workspace root, so
# the release's crates would land on this tree's (and cargo would then take them for fresh) if
# they were built with the same profile: the opt-level above is what keeps them apart. Checked:
# no file of target/ci/deps that existed before may be rewritten.
deps="$target/ci/deps"
mkdir -p "$deps"
marker="$out_dir/build-started"
touch "$marker"
before="$out_dir/deps-before"
ls "$deps" >"$before"
echo "== building synod $tag ($rev) in $src" >&2
(cd "$src" && CARGO_TARGET_DIR="$target" cargo build --profile ci --locked -p synod --bin synod \
  --config 'profile.ci.inherits="release"' --config 'profile.ci.debug=0' "${overrides[@]}" >&2)
rewritten=$(find "$deps" -maxdepth 1 -type f -newer "$marker" -printf '%f\n' | grep -Fxf "$before" || true)
if [ -n "$rewritten" ]; then
  echo "building $tag rewrote artifacts of this tree's build (they must be rebuilt:" >&2
  echo "cargo clean --profile ci, then run the suite again):" >&2
  echo "$rewritten" | head -20 >&2
  exit 1
fi
cp "$target/ci/synod" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "== built $bin in $(( $(date +%s) - start ))s" >&2
echo "$bin"

#!/usr/bin/env bash
# Builds the `synod` binary of the previous release, for the rolling-upgrade test
# (crates/synod/tests/upgrade.rs, which reads SYNOD_PREVIOUS_BIN).
#
#   scripts/build-previous.sh            # builds target/previous/synod-v0.1.0
#
# The source is a git worktree of the release tag under target/previous/src-<tag>, built with
# its own CARGO_TARGET_DIR (target/previous/build) so it never touches target/release/synod.
# `--locked` builds exactly the dependency versions the release shipped with. The profile is
# release with opt-level 1 and no debug info: the binary is a test participant, its formats do
# not depend on optimisation, and it builds in about 4.5 minutes on two cores instead of 6.5
# (the whole suite must stay under 30 minutes). A binary that is
# already there is kept (delete it to rebuild). A clone without tags falls back to the
# release's commit; a clone that has neither fails with a message saying what to fetch.
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
echo "== building synod $tag ($rev) in $src" >&2
(cd "$src" && CARGO_TARGET_DIR="$out_dir/build" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
  CARGO_PROFILE_RELEASE_DEBUG=0 cargo build --release --locked -p synod --bin synod >&2)
cp "$out_dir/build/release/synod" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "== built $bin in $(( $(date +%s) - start ))s" >&2
echo "$bin"

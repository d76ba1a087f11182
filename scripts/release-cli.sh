#!/usr/bin/env bash
# scripts/release-cli.sh [--snapshot] [--single-target]
#
# Builds the fencekit command line's release archives with GoReleaser
# (.goreleaser.yaml): linux and darwin on amd64 and arm64 (windows once
# cmd/fencekit builds there), a tar.gz each and a SHA-256 checksums file,
# in dist/.
# Each binary's --version prints the version and the commit.
#
#   --snapshot       archives of the working tree, versioned as a snapshot
#                    of the last release (releases.txt); any commit
#   --single-target  only the platform this machine runs (with --snapshot):
#                    what CI builds
# Without --snapshot HEAD must be a release point carrying its version tag
# (vX.Y.Z; scripts/release.sh prints the tags) and the work tree clean;
# nothing is published.
#
# GoReleaser is the version pinned in tools/goreleaser, built once per
# pin and Go version into the cache (XDG_CACHE_HOME or ~/.cache,
# fencekit/goreleaser): a cold build takes minutes (see the report in
# docs/RELEASING.md), later runs none.
set -euo pipefail
cd "$(dirname "$0")/.."

snapshot=0 single=0
for a in "$@"; do
  case $a in
  --snapshot) snapshot=1 ;;
  --single-target) single=1 ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
  esac
done

key=$(cat tools/goreleaser/go.mod tools/goreleaser/go.sum <(go version) | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/fencekit/goreleaser
bin=$cache/goreleaser-$key
if [[ ! -x $bin ]]; then
  echo "== building GoReleaser (tools/goreleaser) into $bin"
  mkdir -p "$cache"
  (cd tools/goreleaser && GOWORK=off GOFLAGS=-mod=readonly go build -o "$bin.tmp$$" github.com/goreleaser/goreleaser/v2)
  mv "$bin.tmp$$" "$bin"
fi

read -r last last_commit < <(scripts/releases.sh last)
export FENCEKIT_BASE_VERSION=$last
FENCEKIT_COMMIT=$(git rev-parse HEAD)
FENCEKIT_SHORT_COMMIT=$(git rev-parse --short=12 HEAD)
FENCEKIT_COMMIT_TIME=$(git show -s --format=%ct HEAD)
export FENCEKIT_COMMIT FENCEKIT_SHORT_COMMIT FENCEKIT_COMMIT_TIME
if [[ $snapshot == 1 ]]; then
  if [[ $single == 1 ]]; then
    "$bin" build --snapshot --clean --single-target
  else
    "$bin" release --snapshot --clean
  fi
  exit 0
fi
[[ $single == 0 ]] || { echo "release-cli: --single-target needs --snapshot" >&2; exit 2; }
version=$(git tag --points-at HEAD | grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$' | sort -V | tail -1 || true)
[[ -n $version ]] || { echo "release-cli: HEAD carries no vX.Y.Z tag (a release point's); use --snapshot" >&2; exit 1; }
GORELEASER_CURRENT_TAG=$version "$bin" release --clean --skip=publish

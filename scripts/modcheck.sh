#!/usr/bin/env bash
# scripts/modcheck.sh [VERSION COMMIT]
#
# Proves that a release point resolves outside the workspace, as a user's
# "go get" and "go install ...@VERSION" would: writes every released
# module, as COMMIT holds it, into a file-system module proxy at VERSION
# (tools/release/modproxy; default: the last release of releases.txt),
# then, with GOWORK=off and GOPROXY=file://PROXY,https://proxy.golang.org
# (fencekit's modules come from the file proxy, everything else from the
# Go module proxy; GONOSUMDB keeps fencekit's out of the checksum
# database), for each module: a new module that requires it at VERSION
# (go get) and builds all its packages; then go install
# github.com/fencekit/fencekit/cmd/fencekit@VERSION and its --version.
#
# FENCEKIT_MODPROXY=DIR keeps the proxy in DIR (default: a temporary
# directory). fencekit's modules are removed from the module cache before
# and after, so that a version re-cut at another commit is never read
# from it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [[ $# == 2 ]]; then version=$1 commit=$2; else read -r version commit < <(scripts/releases.sh last); fi
tmp=$(mktemp -d /tmp/fencekit-modcheck.XXXXXX)
proxy=${FENCEKIT_MODPROXY:-$tmp/proxy}
modcache=$(go env GOMODCACHE)
forget() { # fencekit's modules out of the module cache
  chmod -R u+w "$modcache/github.com/fencekit" "$modcache/cache/download/github.com/fencekit" 2>/dev/null || true
  rm -rf "$modcache/github.com/fencekit" "$modcache/cache/download/github.com/fencekit"
}
trap 'forget; rm -rf "$tmp"' EXIT
forget

echo "== modcheck: the modules at $commit as $version, in the file proxy $proxy"
(cd tools/release && GOWORK=off go run ./modproxy -repo "$root" -commit "$commit" -version "$version" -out "$proxy") | tee "$tmp/published"

export GOWORK=off GOPROXY="file://$proxy,https://proxy.golang.org" GONOSUMDB=github.com/fencekit/fencekit GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -mod=mod"
mapfile -t paths < <(sed 's/@.*//' "$tmp/published")
n=0
for p in "${paths[@]}"; do
  n=$((n + 1))
  c="$tmp/consumer$n"
  mkdir "$c"
  echo "== modcheck: go get $p@$version; go build $p/..."
  (cd "$c" && go mod init example.com/consumer >/dev/null 2>&1 &&
    { go get "$p@$version" >get.log 2>&1 || { cat get.log >&2; exit 1; }; } && go build "$p/...")
done
echo "== modcheck: go install github.com/fencekit/fencekit/cmd/fencekit@$version"
GOFLAGS=${GOFLAGS% -mod=mod} GOBIN="$tmp/bin" go install "github.com/fencekit/fencekit/cmd/fencekit@$version"
out=$("$tmp/bin/fencekit" --version)
echo "$out"
if [[ $out != *"$version"* ]]; then
  echo "modcheck: fencekit --version does not name $version" >&2
  exit 1
fi
echo "modcheck: ${#paths[@]} modules at $version resolve and build outside the workspace"

#!/usr/bin/env bash
# scripts/release.sh VERSION
#
# Cuts release VERSION (vMAJOR.MINOR.PATCH) of every released module at
# the current commit (docs/RELEASING.md):
#   1. checks that the work tree is clean, that VERSION follows the last
#      release of releases.txt, and that CHANGELOG.md has a section
#      "## [MAJOR.MINOR.PATCH]";
#   2. checks the API of every library package against the last release
#      point (scripts/apicheck.sh --section VERSION): an incompatible
#      change is refused unless that section has a "### Breaking" entry,
#      and needs a new minor version before v1 (a new major after);
#   3. makes the modules require each other at VERSION (and go.work map
#      VERSION to their directories), then fills each go.sum with the
#      siblings' checksums, from a file-system module proxy holding the
#      modules as committed (tools/release/modproxy), and commits: that
#      commit is the release point;
#   4. proves it resolves outside the workspace (scripts/modcheck.sh) and
#      records "VERSION COMMIT" in releases.txt (a second commit).
# It prints the tags to push; it pushes nothing. FENCEKIT_MODPROXY=DIR
# keeps the file proxy (default: a temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

version=${1:-}
if ! [[ $version =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "usage: scripts/release.sh vMAJOR.MINOR.PATCH" >&2
  exit 2
fi
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
plain=${version#v}
fail() { echo "release: $*" >&2; exit 1; }

[[ -z $(git status --porcelain) ]] || fail "the work tree has changes: commit them first"
scripts/releases.sh section "$plain" || fail "CHANGELOG.md has no section '## [$plain]' (rename [Unreleased] to it, dated)"

if read -r last last_commit < <(scripts/releases.sh last); then
  [[ $(printf '%s\n%s\n' "$last" "$version" | sort -V | tail -1) == "$version" && $last != "$version" ]] ||
    fail "$version does not follow the last release, $last"
  echo "== API of the library packages against $last ($last_commit)"
  out=$(scripts/apicheck.sh --section "$plain" "$last_commit") || { printf '%s\n' "$out"; fail "API check refused"; }
  printf '%s\n' "$out"
  if ! grep -q ' 0 incompatible changes$' <<<"$out"; then
    [[ $last =~ ^v([0-9]+)\.([0-9]+)\. ]]
    if [[ $major == 0 && ${BASH_REMATCH[1]} == 0 && $minor == "${BASH_REMATCH[2]}" ]] ||
      [[ $major != 0 && $major == "${BASH_REMATCH[1]}" ]]; then
      fail "incompatible changes need a new minor version before v1 (a new major from v1): $last -> $version"
    fi
  fi
else
  echo "== the first release: no API to compare with"
fi

mapfile -t dirs < <(scripts/releases.sh modules)
mapfile -t paths < <(scripts/releases.sh paths)

echo "== the modules require each other at $version"
for d in "${dirs[@]}"; do
  for p in "${paths[@]}"; do
    if grep -Eq "^[[:space:]]*(require[[:space:]]+)?${p//./\\.} v" "$d/go.mod"; then
      (cd "$d" && go mod edit -require="$p@$version")
    fi
  done
done
sed -i -E "s#^(\s*github\.com/fencekit/fencekit[^ ]*) v[0-9][^ ]* => #\1 $version => #" go.work

tmp=$(mktemp -d /tmp/fencekit-release.XXXXXX)
proxy=${FENCEKIT_MODPROXY:-$tmp/proxy}
modcache=$(go env GOMODCACHE)
forget() {
  chmod -R u+w "$modcache/github.com/fencekit" "$modcache/cache/download/github.com/fencekit" 2>/dev/null || true
  rm -rf "$modcache/github.com/fencekit" "$modcache/cache/download/github.com/fencekit"
}
trap 'forget; rm -rf "$tmp"' EXIT

# The release commit (empty when the requirements already name $version:
# the go.sum rounds below amend it).
git add -A
git commit -q --allow-empty -m "Release $version: the modules require each other at $version"

# Each module's go.sum gets its siblings' checksums from the proxy, which
# holds the modules as committed. A module's zip holds its own go.sum, so
# the modules that require it change when it does: repeat (amending the
# commit) until nothing changes; the modules' requirements form no cycle,
# so that ends within as many rounds as the longest chain.
for round in 1 2 3 4 5; do
  rm -rf "$proxy" && forget
  (cd tools/release && GOWORK=off go run ./modproxy -repo "$root" -commit HEAD -version "$version" -out "$proxy") >/dev/null
  for d in "${dirs[@]}"; do
    # A sibling's checksum from an earlier round is stale: tidy adds the
    # proxy's.
    [[ ! -f $d/go.sum ]] || sed -i '\#^github\.com/fencekit/fencekit[/ ]#d' "$d/go.sum"
    (cd "$d" && GOWORK=off GOPROXY="file://$proxy,https://proxy.golang.org" GONOSUMDB=github.com/fencekit/fencekit \
      GOFLAGS="${GOFLAGS:-} -mod=mod" GOTOOLCHAIN=local go mod tidy)
  done
  if [[ -z $(git status --porcelain) ]]; then break; fi
  [[ $round != 5 ]] || fail "go.sum files did not settle after 5 rounds"
  echo "== round $round: go.sum files changed; amending the release commit"
  git add -A && git commit -q --amend --no-edit
done
commit=$(git rev-parse HEAD)

echo "== the release point $commit resolves outside the workspace"
FENCEKIT_MODPROXY=$proxy scripts/modcheck.sh "$version" "$commit"

[[ -f releases.txt ]] || printf '# Release points, oldest first: VERSION COMMIT (docs/RELEASING.md).\n# scripts/release.sh appends; apicheck.sh and modcheck.sh read the last.\n' >releases.txt
printf '%s %s\n' "$version" "$commit" >>releases.txt
git add releases.txt
git commit -q -m "releases.txt: $version is $commit"
echo "release: $version is $commit; recorded in releases.txt. Tags to push:"
for d in "${dirs[@]}"; do
  if [[ $d == . ]]; then echo "  git tag $version $commit"; else echo "  git tag $d/$version $commit"; fi
done

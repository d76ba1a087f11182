#!/usr/bin/env bash
# scripts/apicheck.sh [--section NAME] [BASE]
#
# Compares the API of every library package (each released module's
# packages, less package main and internal ones) in the working tree with
# the same packages at BASE (default: the last release point of
# releases.txt), with golang.org/x/exp/cmd/apidiff pinned in
# tools/release. Prints each package's changes. A package that is gone is
# an incompatible change; a new one a compatible change.
#
# Exits 1 on an incompatible change unless CHANGELOG.md's section NAME
# (default "Unreleased"; scripts/release.sh passes the version, as in
# "## [0.2.0]") has a "### Breaking" heading whose entries name every
# package with an incompatible change, as its path from the repository
# root in backquotes (docs/RELEASING.md). Exits 0 otherwise, and 2 when it
# cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

section=Unreleased
if [[ ${1:-} == --section ]]; then section=$2; shift 2; fi
base=${1:-}
if [[ -z $base ]]; then
  read -r base_version base < <(scripts/releases.sh last) || { echo "apicheck: releases.txt records no release" >&2; exit 2; }
else
  base_version=$base
fi

tmp=$(mktemp -d /tmp/fencekit-apicheck.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

(cd tools/release && GOWORK=off go build -o "$tmp/apidiff" golang.org/x/exp/cmd/apidiff)

# The base tree, as its commit holds it (its own go.work resolves it).
mkdir "$tmp/old"
git archive "$base" | tar -x -C "$tmp/old"

# library_packages DIR: the import paths of the library packages of the
# released modules in the tree at DIR.
library_packages() {
  local tree=$1 d
  for d in $(cd "$tree" && find . -name go.mod -not -path './tools/*' -not -path '*/testdata/*' -printf '%h\n'); do
    (cd "$tree/$d" && GOWORK="$tree/go.work" go list -f '{{if ne .Name "main"}}{{.ImportPath}}{{end}}' ./...)
  done | grep -Ev '(^|/)internal(/|$)' | sort -u
}

library_packages "$tmp/old" >"$tmp/old.pkgs"
library_packages "$root" >"$tmp/new.pkgs"

incompatible=0
changed=0
broken=() # packages with incompatible changes
while read -r pkg; do
  f="$tmp/old/$(echo "$pkg" | tr / _).export"
  (cd "$tmp/old" && GOWORK="$tmp/old/go.work" "$tmp/apidiff" -w "$f" "$pkg")
  if ! grep -qx "$pkg" "$tmp/new.pkgs"; then
    printf '== %s\nIncompatible changes:\n- package removed\n\n' "$pkg"
    incompatible=$((incompatible + 1)); changed=$((changed + 1))
    broken+=("$pkg")
    continue
  fi
  report=$(cd "$root" && "$tmp/apidiff" "$f" "$pkg")
  if [[ -n $report ]]; then
    printf '== %s\n%s\n\n' "$pkg" "$report"
    changed=$((changed + 1))
    if grep -q '^Incompatible changes:' <<<"$report"; then
      incompatible=$((incompatible + $(sed -n '/^Incompatible changes:/,/^$/p' <<<"$report" | grep -c '^- ')))
      broken+=("$pkg")
    fi
  fi
done <"$tmp/old.pkgs"
while read -r pkg; do
  if ! grep -qx "$pkg" "$tmp/old.pkgs"; then
    printf '== %s\nCompatible changes:\n- package added\n\n' "$pkg"
    changed=$((changed + 1))
  fi
done <"$tmp/new.pkgs"

n=$(wc -l <"$tmp/old.pkgs")
echo "apicheck: $n packages of $base_version ($(git rev-parse --short "$base")) against the working tree: $changed changed, $incompatible incompatible changes"
if [[ $incompatible == 0 ]]; then
  exit 0
fi
# Each package with an incompatible change must be named, as its path
# from the repository root in backquotes (`lease`, `integration/etcdtest`),
# by an entry under '### Breaking'.
rel=()
for pkg in "${broken[@]}"; do rel+=("${pkg#github.com/fencekit/fencekit/}"); done
if unnamed=$(scripts/releases.sh breaking "$section" "${rel[@]}"); then
  echo "apicheck: incompatible changes in ${rel[*]}, and CHANGELOG.md's [$section] section names each under '### Breaking'"
  exit 0
fi
if [[ -z $unnamed ]]; then
  echo "apicheck: REFUSED: $incompatible incompatible changes, and CHANGELOG.md's [$section] section has no '### Breaking' entry (docs/RELEASING.md)" >&2
else
  echo "apicheck: REFUSED: incompatible changes in" $unnamed "that no entry under '### Breaking' of CHANGELOG.md's [$section] section names (write the package as \`path\`; docs/RELEASING.md)" >&2
fi
exit 1

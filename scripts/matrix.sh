#!/usr/bin/env bash
# Server matrix: the suites of lease (recipes and the Verifier included),
# guard, guard/etcdstore, guard/grpcguard and sqlguard against separate
# etcd server processes of each pinned version (3.5, 3.6, 3.7: the newest
# patch of each, built from tools/etcdserver), with one member each by
# default (FENCEKIT_MATRIX_MEMBERS="1 3" adds three-member clusters: see
# docs/compatibility.md for what CI runs and what was measured).
# It builds the versions' servers first (internal/etcdproc/cmd/buildetcd).
# Arguments go to `go test`. FENCEKIT_MATRIX_VERSIONS and
# FENCEKIT_MATRIX_MEMBERS narrow it, for example
#
#   FENCEKIT_MATRIX_VERSIONS=3.5 FENCEKIT_MATRIX_MEMBERS=3 scripts/matrix.sh -race
#
# It runs the core module on its own (GOWORK=off), so the library is
# built with its go.mod's versions: the etcd client at its floor.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a versions <<<"${FENCEKIT_MATRIX_VERSIONS:-3.5 3.6 3.7}"
read -r -a members <<<"${FENCEKIT_MATRIX_MEMBERS:-1}"
pkgs=(./lease ./guard ./guard/etcdstore ./guard/grpcguard ./sqlguard)
# The servers first, outside every test's deadline (tests never build
# one): a few minutes per version on a cold machine, nothing when built.
printf '== etcd servers %s\n' "${versions[*]}"
GOWORK=off go run ./internal/etcdproc/cmd/buildetcd "${versions[@]}"
for v in "${versions[@]}"; do
  for n in "${members[@]}"; do
    printf '== etcd %s, %s member(s)\n' "$v" "$n"
    start=$SECONDS
    GOWORK=off FENCEKIT_ETCD_VERSION=$v FENCEKIT_ETCD_MEMBERS=$n go test -count=1 "$@" "${pkgs[@]}"
    printf '== etcd %s, %s member(s): %d s\n' "$v" "$n" $((SECONDS - start))
  done
done

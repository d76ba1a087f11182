#!/usr/bin/env bash
# The README's test command: runs `go test` over every module of the
# workspace (go.work lists them; adding a module there adds it here), in
# one go invocation. Arguments go to `go test` (for example -race -count=1).
#
#   scripts/test.sh                  # everything
#   scripts/test.sh -race -count=1   # as CI runs it
#
# `go test ./...` at the root tests the root module only: in workspace
# mode ./... stops at every nested module. The etcd server the tests run
# is built on first use (a few minutes once; see internal/etcdproc).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t patterns < <(go list -m -f '{{.Dir}}/...')
exec go test "$@" "${patterns[@]}"

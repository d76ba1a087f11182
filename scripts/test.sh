#!/usr/bin/env bash
# The README's test command: runs `go test` over every module of the
# workspace (go.work lists them; adding a module there adds it here), in
# one go invocation, and ends with a summary of the tests that skipped and
# why (plain go test shows skips only with -v). Arguments go to `go test`
# (for example -race -count=1), except package patterns (arguments that
# begin with ./ or ../, relative to the repository root), which replace
# "every module":
#
#   scripts/test.sh                     # everything
#   scripts/test.sh -race -count=1      # as CI runs it
#   scripts/test.sh -count=1 ./guard/...
#
# (Give a flag's value after "=" when it begins with ./, as in
# -coverprofile=./c.out.) `go test ./...` at the root tests the root
# module only: in workspace mode ./... stops at every nested module.
#
# First, before any test and its deadline starts, it builds the etcd
# server the tests run (FENCEKIT_ETCD_VERSION's, default 3.7; nothing
# with FENCEKIT_ETCD_BIN set) when the packages need one and it is not
# built yet: "building etcd 3.7.3 server, first run only…", a few
# minutes once (internal/etcdproc/cmd/buildetcd). Tests never build it:
# a plain `go test` that finds it missing fails at once, naming that
# command. The same for the versitygw S3 server of objguard's tests
# (internal/s3proc/cmd/buildversitygw; tests skip without it unless
# FENCEKIT_REQUIRE_S3=1).
#
# Then `go test -json` goes through scripts/testsummary, which prints what
# plain go test would (ok / FAIL lines, failing tests' output) and the
# skip summary just before the last package's line, so the output still
# ends as go test's does. The exit status is go test's. With -json the
# events are printed as they are, and with -bench the output is plain go
# test's, without the summary.
set -euo pipefail
cd "$(dirname "$0")/.."

flags=() patterns=() summary_flags=() plain=0
for a in "$@"; do
  case $a in
  ./* | ../*) patterns+=("$a") ;;
  *) flags+=("$a") ;;
  esac
  case $a in
  -v | -v=true | -test.v | -test.v=true) summary_flags=(-v) ;;
  -json | -json=true | -bench=* | -test.bench=*) plain=1 ;;
  -bench | -test.bench) plain=1 ;;
  esac
done
if ((${#patterns[@]} == 0)); then
  mapfile -t patterns < <(go list -m -f '{{.Dir}}/...')
fi

# The etcd server, built outside every test's deadline when a package
# under test imports the harness that runs it.
deps=$(go list -deps -test "${patterns[@]}" || true) # on a cold machine: go: downloading …
if grep -qx 'github.com/fencekit/fencekit/internal/etcdproc' <<<"$deps"; then
  go run ./internal/etcdproc/cmd/buildetcd
fi
# The S3 server objguard's tests run (versitygw), likewise.
if grep -qx 'github.com/fencekit/fencekit/internal/s3proc' <<<"$deps"; then
  go run ./internal/s3proc/cmd/buildversitygw
fi

if ((plain)); then
  exec go test "${flags[@]}" "${patterns[@]}"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fencekit-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/testsummary" ./scripts/testsummary
set +e
go test -json "${flags[@]}" "${patterns[@]}" | "$tmp/testsummary" "${summary_flags[@]}"
status=("${PIPESTATUS[@]}")
set -e
if ((status[0] != 0)); then
  exit "${status[0]}"
fi
exit "${status[1]}"

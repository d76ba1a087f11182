#!/usr/bin/env bash
# Builds and vets the k8s module against client-go of the newest patch of
# each of the two newest Kubernetes minors (or the versions given as
# arguments, e.g. v0.36.4), in a temporary copy: go get moves
# k8s.io/client-go, api and apimachinery there (and controller-runtime
# down to a release that supports them, when needed). The module itself
# is not changed. Run from anywhere; needs the Go module proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)   # k8s/
core=$(cd "$here/.." && pwd)             # the core module

versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  # Newest patch of the two newest minors, releases only.
  mapfile -t versions < <(go list -m -versions k8s.io/client-go | tr ' ' '\n' |
    grep -E '^v0\.[0-9]+\.[0-9]+$' | sort -V |
    awk -F. '{last[$2]=$0} END {for (m in last) print last[m]}' | sort -V | tail -2)
fi

tmp=$(mktemp -d /tmp/fencekit-k8s-versions.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
status=0
for v in "${versions[@]}"; do
  dir="$tmp/$v"
  mkdir -p "$dir"
  (cd "$here" && tar --exclude=./scripts -cf - .) | (cd "$dir" && tar -xf -)
  (
    cd "$dir"
    go mod edit -replace "github.com/fencekit/fencekit=$core" \
      -replace "github.com/fencekit/fencekit/integration=$core/integration"
    go get "k8s.io/client-go@$v" "k8s.io/api@$v" "k8s.io/apimachinery@$v" >/dev/null 2>&1
    cr=$(go list -m -f '{{.Version}}' sigs.k8s.io/controller-runtime)
    got=$(go list -m -f '{{.Version}}' k8s.io/client-go)
    echo "== client-go $got (controller-runtime $cr)"
    if [ "$got" != "$v" ]; then echo "client-go is $got, not $v" >&2; exit 1; fi
    go build ./... && go vet ./...
  ) || { echo "FAIL: client-go $v" >&2; status=1; }
done
[ $status = 0 ] && echo "== all client-go versions build and vet"
exit $status

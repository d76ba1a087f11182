#!/usr/bin/env bash
# Coexistence check: does a module that already imports Kubernetes
# libraries still build, vet, and keep its go line and etcd client minor
# once it imports fencekit's lease, guard and sqlguard?
#
#   scripts/compat/run.sh                  # every case
#   CASES='apiserver-v0.33 controller-runtime' scripts/compat/run.sh  # newest v0.33.x
#   FENCEKIT_REPO=/path/to/checkout scripts/compat/run.sh
#
# Cases: controller-runtime (newest) with client-go (newest), and
# k8s.io/apiserver at the newest patch of each minor from v0.33 (Kubernetes
# 1.33, still in cloud providers' extended support) to the newest minor
# the module proxy offers; each imports
# k8s.io/apiserver/pkg/storage/storagebackend/factory, the package that
# stopped compiling when fencekit lifted OpenTelemetry's otelgrpc.
#
# For each case, in a scratch module under a temporary directory
# (testdata/<kind>/main.go):
#   1. base: go get the Kubernetes modules, go mod tidy; note the go line,
#      the etcd client version and every module version;
#   2. with fencekit: add testdata/fencekit.go, require fencekit at
#      v0.0.0 replaced by FENCEKIT_REPO (default: this checkout), go mod
#      tidy; go vet and go build the program.
# A case fails when 2 does not build or vet, when fencekit raises the go
# line, or when it moves the etcd client to another minor (3.5 -> 3.6):
# that is lifting the importer past what its Kubernetes modules were
# released with (COMPAT_STRICT_ETCD=0 turns that into a note). Raised
# patch versions and other raised modules are listed, not failed.
#
# Cold, each case compiles a few hundred Kubernetes packages: about 2 to
# 4 minutes each on 2 cores; with a warm build cache (GOCACHE) and module
# cache, seconds. The base step downloads modules but compiles nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "${FENCEKIT_REPO:-$here/../..}" && pwd)
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local}
work=$(mktemp -d "${TMPDIR:-/tmp}/fencekit-compat.XXXXXX")
trap 'rm -rf "$work"' EXIT

log() { printf '== %s\n' "$*"; }

# apiserver_cases prints apiserver-vX.Y.Z for the newest patch of each
# minor from v0.33 on (no pre-releases).
apiserver_cases() {
  (cd "$work" && go list -m -versions k8s.io/apiserver) | tr ' ' '\n' |
    grep -E '^v0\.[0-9]+\.[0-9]+$' |
    awk -F. '$2 >= 33 { best[$2] = $0 } END { for (m in best) print m, best[m] }' |
    sort -n | awk '{ print "apiserver-" $2 }'
}

# newest_patch v0.33 prints the newest v0.33.x of k8s.io/apiserver.
newest_patch() {
  (cd "$work" && go list -m -versions k8s.io/apiserver) | tr ' ' '\n' |
    grep -E "^${1//./\\.}\.[0-9]+\$" | sort -V | tail -1
}

# minor prints v3.5 for v3.5.21.
minor() { cut -d. -f1-2 <<<"$1"; }

# run_case name: kind and the modules to go get come from the name.
run_case() {
  local name=$1 kind gets
  case $name in
  controller-runtime) kind=controller-runtime gets="sigs.k8s.io/controller-runtime@latest k8s.io/client-go@latest" ;;
  apiserver-v*.*.*) kind=apiserver gets="k8s.io/apiserver@${name#apiserver-}" ;;
  apiserver-v*.*)
    local v
    v=$(newest_patch "${name#apiserver-}")
    [[ -n $v ]] || { echo "no release of k8s.io/apiserver ${name#apiserver-}" >&2; return 2; }
    kind=apiserver gets="k8s.io/apiserver@$v" name=apiserver-$v
    ;;
  *) echo "unknown case $name" >&2; return 2 ;;
  esac
  local dir=$work/$name start=$SECONDS
  mkdir -p "$dir"
  cp "$here/testdata/$kind/main.go" "$dir/"
  local rc=0
  (
    cd "$dir"
    # go 1.22: the lowest line we start from; go get raises it to what
    # the Kubernetes modules need.
    printf 'module fencekit.test/compat\n\ngo 1.22\n' >go.mod
    # shellcheck disable=SC2086
    go get $gets >get.log 2>&1 || { cat get.log; exit 1; }
    go mod tidy >>get.log 2>&1 || { cat get.log; exit 1; }
    go list -m all >base.mods
    base_go=$(go list -m -f '{{.GoVersion}}')
    base_etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/client/v3 2>/dev/null || echo none)

    cp "$here/testdata/fencekit.go" .
    go mod edit -require=github.com/fencekit/fencekit@v0.0.0 -replace=github.com/fencekit/fencekit="$repo"
    go mod tidy >>get.log 2>&1 || { cat get.log; exit 1; }
    go list -m all >with.mods
    with_go=$(go list -m -f '{{.GoVersion}}')
    with_etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/client/v3)
    fail=0
    t0=$SECONDS
    if ! nice -n 10 go vet . || ! nice -n 10 go build -o /dev/null .; then
      echo "FAIL $name: does not build or vet with fencekit" >&2
      fail=1
    fi
    printf '%s: go line %s -> %s; etcd client %s -> %s; compile+vet %ss\n' \
      "$name" "$base_go" "$with_go" "$base_etcd" "$with_etcd" $((SECONDS - t0))
    if [[ $(printf '%s\n%s\n' "$base_go" "$with_go" | sort -V | tail -1) != "$base_go" ]]; then
      echo "FAIL $name: fencekit raises the go line from $base_go to $with_go" >&2
      fail=1
    fi
    if [[ $base_etcd != none && $(minor "$base_etcd") != $(minor "$with_etcd") ]]; then
      if [[ ${COMPAT_STRICT_ETCD:-1} == 1 ]]; then
        echo "FAIL $name: fencekit moves the etcd client from $base_etcd to $with_etcd" >&2
        fail=1
      else
        echo "NOTE $name: fencekit moves the etcd client from $base_etcd to $with_etcd" >&2
      fi
    fi
    # Every module whose version fencekit raised (informational).
    raised=$(join <(sort base.mods) <(sort with.mods) | awk '$2 != $3 { print "   ", $1, $2, "->", $3 }')
    added=$(join -v2 <(sort base.mods) <(sort with.mods) | grep -v '^github.com/fencekit/fencekit ' | wc -l)
    [[ -z $raised ]] || printf '  raised by fencekit:\n%s\n' "$raised"
    printf '  modules: %s -> %s (%s added besides fencekit)\n' "$(wc -l <base.mods)" "$(wc -l <with.mods)" "$added"
    exit $fail
  ) || rc=$?
  log "$name: $([[ $rc == 0 ]] && echo ok || echo FAILED) in $((SECONDS - start))s"
  return $rc
}

cases=${CASES:-"controller-runtime $(apiserver_cases | tr '\n' ' ')"}
log "coexistence check of $repo: $cases"
failed=()
for c in $cases; do
  run_case "$c" || failed+=("$c")
done
if ((${#failed[@]})); then
  echo "coexistence check failed: ${failed[*]}" >&2
  exit 1
fi
log "coexistence check passed"

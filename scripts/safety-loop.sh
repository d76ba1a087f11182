#!/usr/bin/env bash
# Runs the safety suite's process profile (TestSafetyProcesses: three etcd
# member processes frozen and killed, worker processes paused and cut off)
# again and again, and counts the runs that failed and the early
# hand-overs (a successor admitted before its predecessor learned that its
# lease had ended) of each, apart from those etcd's lease defect explains
# (etcd_early: the holder's session revoked before its TTL ran out after a
# frozen member continued; docs/concepts.md, "What it does not guarantee"). The
# test binary is built once.
#
#   scripts/safety-loop.sh [runs]          # 30 runs by default
#   FENCEKIT_ETCD_VERSION=3.5 scripts/safety-loop.sh 10
#
# The server of FENCEKIT_ETCD_VERSION (3.7 by default) is built first if
# it is not yet (internal/etcdproc/cmd/buildetcd). The SQL
# workloads run when their variables are set (FENCEKIT_PG_DSN,
# FENCEKIT_MYSQL_DSN), as in CI. Each run's output is kept in a
# temporary directory, whose name is printed. It exits non-zero when any
# run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-30}
out=$(mktemp -d /tmp/fencekit-safety-loop.XXXXXX)
bin=$out/integration.test
go run ./internal/etcdproc/cmd/buildetcd
(cd integration && go test -c -o "$bin" .)
printf '== %d runs on etcd %s; logs in %s\n' "$runs" "${FENCEKIT_ETCD_VERSION:-3.7}" "$out"
# sum_field adds up field (handovers, early, etcd_early) over the guarded lines'
# SAFETY summaries of log.
sum_field() {
  awk -v f="$1" '/^SAFETY workload=.* mode=guarded / {
    for (i = 1; i <= NF; i++) if (index($i, f "=") == 1) n += substr($i, length(f) + 2)
  } END { print n + 0 }' "$2"
}
failed=0 early_runs=0 early_total=0 handovers=0 etcd_total=0
for i in $(seq "$runs"); do
  log=$out/run-$i.log
  start=$SECONDS
  if (cd integration && "$bin" -test.run '^TestSafetyProcesses$' -test.count=1 -test.v -test.timeout 10m >"$log" 2>&1); then
    verdict=ok
  else
    verdict=FAIL
    failed=$((failed + 1))
  fi
  # Every guarded line's SAFETY summary carries handovers=, early= and
  # etcd_early=.
  e=$(sum_field early "$log")
  h=$(sum_field handovers "$log")
  x=$(sum_field etcd_early "$log")
  early_total=$((early_total + e))
  etcd_total=$((etcd_total + x))
  handovers=$((handovers + h))
  if [ "$e" -gt 0 ]; then early_runs=$((early_runs + 1)); fi
  printf 'run %d: %s in %d s, hand-overs %d, early %d, etcd_early %d\n' "$i" "$verdict" $((SECONDS - start)) "$h" "$e" "$x"
  if [ "$verdict" = FAIL ]; then
    grep -E 'early|admitted a successor|--- FAIL|safety_test.go:[0-9]+: .*(violation|want|did not)' "$log" | head -5 | cut -c1-600 || true
  fi
done
printf '== %d runs: %d failed, %d with an early hand-over (%d early of %d hand-overs; %d more explained by etcd'"'"'s lease defect)\n' \
  "$runs" "$failed" "$early_runs" "$early_total" "$handovers" "$etcd_total"
[ "$failed" = 0 ]

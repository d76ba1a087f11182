#!/usr/bin/env bash
# Reruns the comparison benchmarks (integration/bench_test.go) and writes a
# markdown table of medians and ratios.
#
#   scripts/bench.sh                      # writes bench.txt and BENCHMARKS.md
#   COUNT=5 BENCHTIME=2s scripts/bench.sh # more runs, longer each
#   BENCH='Handoff' scripts/bench.sh      # a subset
#
# Set FENCEKIT_PG_DSN to include PostgreSQL in BenchmarkGuard.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-3}
benchtime=${BENCHTIME:-300ms}
out=${OUT:-bench.txt}
table=${TABLE:-BENCHMARKS.md}
go test ./integration -run '^$' -bench "${BENCH:-.}" -benchtime="$benchtime" -count="$count" -timeout 60m | tee "$out"
go run ./scripts/benchtable -machine "$(nproc) cores, $(go version | cut -d' ' -f3-), $(uname -sr)" \
  -cmd "COUNT=$count BENCHTIME=$benchtime scripts/bench.sh" < "$out" > "$table"
echo "wrote $table"

#!/usr/bin/env bash
# Runs fencekit's comparison benchmarks (integration/bench_*_test.go) and
# writes the tables of docs/performance.md to BENCHMARKS.md
# (scripts/benchtable); docs/performance.md shows the rows of a run.
#
#   scripts/bench.sh                      # writes bench.txt and BENCHMARKS.md
#   BENCH='Fanout|Handoff' scripts/bench.sh   # a subset
#   ROUNDS=30 scripts/bench.sh            # more interleaved rounds
#   COUNT=3 scripts/bench.sh              # repeat the whole set 3 times
#
# The comparisons interleave their implementations themselves, in
# alternating blocks over rounds, and report medians and per-round ratio
# spreads; each benchmark function runs once (-benchtime=1x), so b.N does
# not matter. ROUNDS sets FENCEKIT_BENCH_ROUNDS (the rounds of every
# interleaved benchmark, and of RevokeStorm; default: each benchmark's own,
# 3 to 60), TRIALS FENCEKIT_BENCH_TRIALS (LossSignal's trials per case,
# CrashTakeover's kill trials per TTL). With the defaults the whole set
# takes 13 to 16 minutes on 2 cores, 11 of them RevokeStorm and
# CrashTakeover (integration/bench_storm_test.go, bench_takeover_test.go:
# holder processes killed on etcd server processes, which this script
# builds first when they are not built; STORM_N, comma-separated, sets
# FENCEKIT_BENCH_STORM_N, the numbers of locks RevokeStorm's holder dies
# with: 1000,10000,100000 by default).
#
# SHARD_SOAK=10m also runs package shard's soak (TestShardSoak, 8 members
# x 256 shards under joins, leaves, kills, pauses and partitions) for that
# long per cluster size, after the benchmarks.
#
# Set FENCEKIT_PG_DSN to include PostgreSQL in BenchmarkGuard. BenchmarkRedis
# (module redisguard) runs against FENCEKIT_REDIS_ADDR (for example
# 127.0.0.1:6379) and skips without it.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-1}
out=${OUT:-bench.txt}
table=${TABLE:-BENCHMARKS.md}
if [[ -n "${ROUNDS:-}" ]]; then export FENCEKIT_BENCH_ROUNDS=$ROUNDS; fi
if [[ -n "${TRIALS:-}" ]]; then export FENCEKIT_BENCH_TRIALS=$TRIALS; fi
if [[ -n "${STORM_N:-}" ]]; then export FENCEKIT_BENCH_STORM_N=$STORM_N; fi
desc="scripts/bench.sh"
for v in COUNT ROUNDS TRIALS STORM_N BENCH; do
  if [[ -n "${!v:-}" ]]; then desc="$v=${!v} $desc"; fi
done
if [[ -n "${FENCEKIT_PG_DSN:-}" ]]; then desc="FENCEKIT_PG_DSN=<local PostgreSQL> $desc"; fi
# The etcd server processes of RevokeStorm, CrashTakeover and the leader
# benchmarks: built once (minutes), before any benchmark's clock starts.
go run ./internal/etcdproc/cmd/buildetcd
start=$(date +%s)
go test ./integration -run '^$' -bench "${BENCH:-.}" -benchtime=1x -count="$count" -timeout 60m | tee "$out"
# redisguard is a module of its own; its benchmark needs Redis
# (FENCEKIT_REDIS_ADDR) and skips without it.
(cd redisguard && go test -run '^$' -bench "${BENCH:-.}" -benchtime=1x -count="$count" -timeout 10m .) | tee -a "$out"
if [[ -n "${SHARD_SOAK:-}" ]]; then
  FENCEKIT_SHARD_SOAK=$SHARD_SOAK go test ./integration -run '^TestShardSoak$' -count=1 -v -timeout 3h | grep -v '^time=' | tee -a "$out"
fi
took=$(( $(date +%s) - start ))
go run ./scripts/benchtable \
  -machine "$(nproc) cores, $(go version | cut -d' ' -f3-), $(uname -sr), $(date -u +%Y-%m-%d), ${took} s" \
  -cmd "$desc" < "$out" > "$table"
echo "wrote $table"

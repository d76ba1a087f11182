//go:build unix

package redisguard_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/redisguard"
	"github.com/redis/go-redis/v9"
)

// BenchmarkRedis is the cost of fencing a Redis write, with the arms of
// each comparison interleaved in one process, on connections of their
// own, as the benchmarks of package integration (scripts/bench.sh) are:
// the arms run in alternating blocks, rotating which goes first, over
// rounds, and the figures are medians with the per-round ratio spread
// (min–max).
//
//   - set, set-1KiB, set-16KiB: Guard.Set of a 16-byte, 1 KiB or 16 KiB
//     value with a token equal to the mark (fencekit), one connection per
//     arm, against a plain SET (floor) and against MULTI/EXEC of an HGET
//     of the mark and the SET (multi), what a client-side check costs at
//     least. Target (set): fencekit/floor <= 1.3x. A fourth arm, info,
//     runs the same function body as an EVALSHA script that reads the
//     server's run_id with INFO server on every write, as this package did
//     before it kept the run_id in the function library (fencekit/info:
//     what keeping it saves). A fifth, fn, is the cheapest Redis function
//     that SETs (FCALL of "return redis.call('SET', KEYS[1], ARGV[1])"):
//     fn/floor is what any check run inside Redis starts from. A sixth,
//     read, is the cheapest function that checks anything against such a
//     mark: called with the fenced function's KEYS and ARGV, it reads the
//     mark's three fields (HMGET) and SETs, deciding nothing: read/floor
//     is the floor of a check of this package's mark, and fencekit/read
//     (from the medians) what deciding and the Go side add to it.
//   - set-c8: the 16-byte SET from 8 goroutines per arm, sharing a Guard
//     and a pool of 8 connections per arm; times are per write.
//   - store: Store.Advance with the current token (fencekit) against an
//     EVALSHA of a one-line script reading one key (floor).
//
// Run with -benchtime=1x: each function runs its rounds once.
// FENCEKIT_BENCH_ROUNDS overrides the rounds.
func BenchmarkRedis(b *testing.B) {
	ctx := context.Background()
	// Connections of each arm's own, so no arm waits for another's.
	client := func(pool int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: pool, MaxRetries: -1})
		b.Cleanup(func() { c.Close() })
		return c
	}
	probe, id := testRedis(b)
	tok := fence.Token{Lock: "bench", Revision: 42}
	prefix := id + ":mark:"
	fnLib := "fencekit_bench_" + id
	if err := probe.FunctionLoad(ctx, "#!lua name="+fnLib+"\nredis.register_function('"+fnLib+
		"', function(KEYS, ARGV) return redis.call('SET', KEYS[1], ARGV[1]) end)").Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { probe.FunctionDelete(context.Background(), fnLib) })
	readLib := "fencekit_bench_read_" + id
	if err := probe.FunctionLoad(ctx, "#!lua name="+readLib+"\nredis.register_function('"+readLib+
		"', function(KEYS, ARGV) redis.call('HMGET', KEYS[1], 'rev', 'lock', 'life') return redis.call('SET', KEYS[2], ARGV[5]) end)").Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { probe.FunctionDelete(context.Background(), readLib) })

	for _, c := range []struct {
		param   string
		size    int // value bytes
		writers int // goroutines per arm
	}{
		{"set", 16, 1},
		{"set-1KiB", 1 << 10, 1},
		{"set-16KiB", 16 << 10, 1},
		{"set-c8", 16, 8},
	} {
		b.Run(c.param, func(b *testing.B) {
			res := id + "-" + c.param
			tgt := guard.Target{Resource: res, Lock: "bench"}
			key := redisguard.Key(res, "value")
			value := strings.Repeat("v", c.size)
			g, err := redisguard.New(client(c.writers), redisguard.WithPrefix(prefix))
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Claim(ctx, tok, res); err != nil {
				b.Fatal(err)
			}
			plain, multi, bare, fn, read := client(c.writers), client(c.writers), client(c.writers), client(c.writers), client(c.writers)
			markKey := g.MarkKey(res)
			info := redis.NewScript(redisguard.InfoEachWrite)
			run := func(op func() error) func(int) error {
				if c.writers == 1 {
					return loop(op)
				}
				return parallel(c.writers, op)
			}
			interleave(b, plan{rounds: 150, ops: 100, warmup: 400}, []arm{
				{"fencekit", run(func() error {
					_, err := g.Set(ctx, tgt, tok, key, value)
					return err
				})},
				{"floor", run(func() error { return plain.Set(ctx, key, value, 0).Err() })},
				{"info", run(func() error {
					r, err := info.Run(ctx, bare, []string{markKey, key}, "42", "bench", "r", "SET", value).Result()
					if err == nil && r != "OK" { // a refusal is an array: it would price the wrong path
						err = fmt.Errorf("info arm: reply %v, want OK", r)
					}
					return err
				})},
				{"fn", run(func() error { return fn.FCall(ctx, fnLib, []string{key}, value).Err() })},
				{"read", run(func() error {
					return read.FCall(ctx, readLib, []string{markKey, key}, "42", "bench", "r", "SET", value).Err()
				})},
				{"multi", run(func() error {
					_, err := multi.TxPipelined(ctx, func(p redis.Pipeliner) error {
						p.HGet(ctx, markKey, "rev")
						p.Set(ctx, key, value, 0)
						return nil
					})
					return err
				})},
			}, [][2]string{{"fencekit", "floor"}, {"fencekit", "multi"}, {"fencekit", "info"}, {"fn", "floor"}, {"read", "floor"}})
		})
	}

	b.Run("store", func(b *testing.B) {
		s, err := redisguard.NewStore(client(1), prefix)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Claim(ctx, tok, id+"-store"); err != nil {
			b.Fatal(err)
		}
		floor := client(1)
		script := redis.NewScript("return redis.call('GET', KEYS[1])")
		key := redisguard.Key(id+"-store", "value")
		interleave(b, plan{rounds: 20, ops: 500, warmup: 500}, []arm{
			{"fencekit", loop(func() error {
				_, err := s.Advance(ctx, id+"-store", tok)
				return err
			})},
			{"floor", loop(func() error {
				err := script.Run(ctx, floor, []string{key}).Err()
				if err == redis.Nil {
					err = nil
				}
				return err
			})},
		}, [][2]string{{"fencekit", "floor"}})
	})
}

// An arm is one implementation in an interleaved comparison. block runs
// ops operations and returns the first error.
type arm struct {
	name  string
	block func(ops int) error
}

// plan sizes an interleaved comparison: rounds timed rounds of one block
// of ops operations per arm, after one untimed warm-up block of warmup
// operations per arm.
type plan struct {
	rounds, ops, warmup int
}

// interleave runs arms in alternating blocks (the first arm rotating each
// round) and reports, as integration's benchmarks do, per arm X
// "X-ms/op" and "X-cpu-ms/op" (medians over rounds), and per pair A/B
// "ratio:A/B" and "cpuratio:A/B" (median of per-round ratios) with their
// "-min" and "-max", and "rounds" and "ops/block".
func interleave(b *testing.B, p plan, arms []arm, pairs [][2]string) {
	b.Helper()
	if n, err := strconv.Atoi(os.Getenv("FENCEKIT_BENCH_ROUNDS")); err == nil && n > 0 {
		p.rounds = n
	}
	for _, a := range arms {
		if err := a.block(p.warmup); err != nil {
			b.Fatalf("%s warm-up: %v", a.name, err)
		}
	}
	wall := map[string][]float64{}
	cpu := map[string][]float64{}
	b.ResetTimer()
	for r := range p.rounds {
		for j := range arms {
			a := arms[(r+j)%len(arms)]
			c0, t0 := cpuTime(), time.Now()
			if err := a.block(p.ops); err != nil {
				b.Fatalf("%s round %d: %v", a.name, r, err)
			}
			el, c := time.Since(t0), cpuTime()-c0
			wall[a.name] = append(wall[a.name], ms(el)/float64(p.ops))
			cpu[a.name] = append(cpu[a.name], ms(c)/float64(p.ops))
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for _, a := range arms {
		b.ReportMetric(median(wall[a.name]), a.name+"-ms/op")
		b.ReportMetric(median(cpu[a.name]), a.name+"-cpu-ms/op")
	}
	for _, pr := range pairs {
		for kind, per := range map[string]map[string][]float64{"ratio": wall, "cpuratio": cpu} {
			rs := make([]float64, p.rounds)
			for i := range rs {
				rs[i] = per[pr[0]][i] / per[pr[1]][i]
			}
			unit := kind + ":" + pr[0] + "/" + pr[1]
			b.ReportMetric(median(rs), unit)
			b.ReportMetric(slices.Min(rs), unit+"-min")
			b.ReportMetric(slices.Max(rs), unit+"-max")
		}
	}
	b.ReportMetric(float64(p.rounds), "rounds")
	b.ReportMetric(float64(p.ops), "ops/block")
}

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// parallel is a block that runs op ops times in all from n goroutines.
func parallel(n int, op func() error) func(ops int) error {
	return func(ops int) error {
		errs := make(chan error, n)
		for w := range n {
			go func() {
				var err error
				for i := w; i < ops && err == nil; i += n {
					err = op()
				}
				errs <- err
			}()
		}
		var first error
		for range n {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// loop is a block that runs op ops times.
func loop(op func() error) func(ops int) error {
	return func(ops int) error {
		for range ops {
			if err := op(); err != nil {
				return err
			}
		}
		return nil
	}
}

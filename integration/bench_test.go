//go:build unix

package integration_test

// Benchmarks comparing fencekit with etcd's concurrency.Mutex (etcdmutex)
// and with the raw-transaction floor, on the same embedded etcd in one
// process, each client with its own etcd connection as separate processes
// would have. scripts/bench.sh runs them all and turns the output into the
// tables of docs/performance.md:
//
//	go test ./integration -run '^$' -bench . -benchtime=1x
//
// # Interleaving
//
// Comparisons whose ratios carry a target (Cycle, Reenter, Fanout,
// Handoff, Guard) do not run one implementation after another, which lets
// machine drift decide the ratio. Each such benchmark function sets up
// every implementation ("arm") it compares and runs them itself in
// alternating blocks (A B C, B C A, C A B, …: the first arm rotates each
// round) of a fixed number of operations, after one untimed warm-up block
// per arm. Per round and arm it records wall time and process CPU time
// (getrusage: the embedded etcd, every client and the benchmark itself)
// per operation. It ignores b.N (run it with -benchtime=1x; a longer
// benchtime only repeats the whole comparison) and reports, through
// b.ReportMetric, for every arm X
//
//	X-ms/op       median over rounds of wall milliseconds per operation
//	X-cpu-ms/op   median over rounds of CPU milliseconds per operation
//
// and for every compared pair A/B
//
//	ratio:A/B, ratio:A/B-min, ratio:A/B-max
//	     median, min and max over rounds of A's wall time / B's, both
//	     measured in the same round
//	cpuratio:A/B, cpuratio:A/B-min, cpuratio:A/B-max
//	     the same for CPU time
//
// plus rounds and ops/block. The built-in ns/op is suppressed.
// FENCEKIT_BENCH_ROUNDS overrides the number of rounds of every
// interleaved benchmark.
//
// LossSignal and ManyLocks measure latencies and sizes, not ratios, and
// report under the names <Benchmark>/<impl>/<param>.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// benchEtcd starts a one-member embedded etcd (fsync on) for one top-level
// benchmark and returns it with a client.
func benchEtcd(b *testing.B) (*etcdtest.Cluster, *clientv3.Client) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Close() })
	return cl, benchClient(b, cl.Endpoints()...)
}

// newEtcdClient returns a client with its own connection; logging off.
func newEtcdClient(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func benchClient(b *testing.B, endpoints ...string) *clientv3.Client {
	b.Helper()
	cli, err := newEtcdClient(endpoints...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

func benchLocks(b *testing.B, cli *clientv3.Client, opts ...lease.Option) *lease.Client {
	b.Helper()
	c, err := lease.New(cli, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func benchSession(b *testing.B, cli *clientv3.Client, opts ...concurrency.SessionOption) *concurrency.Session {
	b.Helper()
	s, err := concurrency.NewSession(cli, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// fleet builds n clients concurrently (at most 16 at a time), each with
// its own etcd connection, through mk, which returns what to close when
// the benchmark ends. It stops the benchmark on the first error.
func fleet(b *testing.B, n int, endpoints []string, mk func(i int, cli *clientv3.Client) (func(), error)) {
	b.Helper()
	var (
		mu    sync.Mutex
		errs  []error
		wg    sync.WaitGroup
		slots = make(chan struct{}, 16)
	)
	for i := range n {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			cli, err := newEtcdClient(endpoints...)
			if err == nil {
				var closeFn func()
				closeFn, err = mk(i, cli)
				mu.Lock()
				b.Cleanup(func() {
					if closeFn != nil {
						closeFn()
					}
					cli.Close()
				})
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
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

// roundsOverride is FENCEKIT_BENCH_ROUNDS, or 0.
func roundsOverride() int {
	n, err := strconv.Atoi(os.Getenv("FENCEKIT_BENCH_ROUNDS"))
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// interleave runs arms in alternating blocks as p says and reports the
// figures described in the file comment; pairs name the A/B ratios to
// report.
func interleave(b *testing.B, p plan, arms []arm, pairs [][2]string) {
	b.Helper()
	if r := roundsOverride(); r > 0 {
		p.rounds = r
	}
	for _, a := range arms {
		if err := a.block(p.warmup); err != nil {
			b.Fatalf("%s warm-up: %v", a.name, err)
		}
	}
	wall := make(map[string][]float64, len(arms))
	cpu := make(map[string][]float64, len(arms))
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

// ms is d in (fractional) milliseconds.
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// median returns the median of xs, or NaN for none.
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

// fencekitCycle is one uncontended Acquire + Release of name.
func fencekitCycle(c *lease.Client, name string, opts ...lease.AcquireOption) func() error {
	ctx := context.Background()
	return func() error {
		l, err := c.Acquire(ctx, name, opts...)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

// mutexCycle is one uncontended Lock + Unlock of m.
func mutexCycle(m *concurrency.Mutex) func() error {
	ctx := context.Background()
	return func() error {
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
}

// floorCycle is the raw 2-Txn floor of an acquire + release: a put
// guarded by "the key does not exist", attached to s's lease, and a delete
// guarded by "the value is still mine".
func floorCycle(cli *clientv3.Client, s *concurrency.Session, key string) func() error {
	ctx := context.Background()
	const val = "owner#1"
	return func() error {
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, val, clientv3.WithLease(s.Lease()))).Commit(); err != nil {
			return err
		}
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", val)).
			Then(clientv3.OpDelete(key)).Commit()
		return err
	}
}

// BenchmarkCycle is an uncontended acquire + release: fencekit, etcd's
// Mutex and the raw 2-Txn floor, interleaved on one etcd, each on its own
// connection. A fourth arm, watched, is the floor run by a client that
// also watches the key, as a lock that signals the loss of a held record
// must: the price of that signal alone, which etcd's Mutex does not pay
// (it watches nothing while uncontended).
func BenchmarkCycle(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	fk := benchLocks(b, benchClient(b, eps...), lease.WithPrefix("cycle-fk/"))
	em := concurrency.NewMutex(benchSession(b, benchClient(b, eps...)), "cycle-em/lock")
	floorCli := benchClient(b, eps...)
	floorSess := benchSession(b, floorCli)
	watchedCli := benchClient(b, eps...)
	watchedSess := benchSession(b, watchedCli)
	const watchedKey = "cycle-watched/lock"
	drainWatch(b, watchedCli, watchedKey)
	b.Run("uncontended", func(b *testing.B) {
		// 60 rounds: the arms differ by a few percent, single rounds by
		// up to 2x (fsync), and a cycle takes about a millisecond.
		interleave(b, plan{rounds: 60, ops: 50, warmup: 50}, []arm{
			{"fencekit", loop(fencekitCycle(fk, "lock"))},
			{"etcdmutex", loop(mutexCycle(em))},
			{"floor", loop(floorCycle(floorCli, floorSess, "cycle-floor/lock"))},
			{"watched", loop(floorCycle(watchedCli, watchedSess, watchedKey))},
		}, [][2]string{{"fencekit", "floor"}, {"fencekit", "etcdmutex"}, {"watched", "etcdmutex"}, {"fencekit", "watched"}})
	})
	b.Run("lockdelay", func(b *testing.B) {
		// The price of WithLockDelay: a marker put and delete inside the
		// cycle's own two transactions (its lease is granted once, before
		// the rounds). The plain arm runs the code every cycle runs.
		delayed := benchLocks(b, benchClient(b, eps...), lease.WithPrefix("cycle-delay/"))
		interleave(b, plan{rounds: 30, ops: 50, warmup: 50}, []arm{
			{"plain", loop(fencekitCycle(fk, "lock"))},
			{"lockdelay", loop(fencekitCycle(delayed, "lock", lease.WithLockDelay(time.Second)))},
		}, [][2]string{{"lockdelay", "plain"}})
	})
	b.Run("leasettl", func(b *testing.B) {
		// The price of WithLeaseTTL: the option's validation and the
		// lookup of the current session of its TTL (a second session of
		// the same Client, granted in the warm-up).
		interleave(b, plan{rounds: 30, ops: 50, warmup: 50}, []arm{
			{"plain", loop(fencekitCycle(fk, "ttl-plain"))},
			{"leasettl", loop(fencekitCycle(fk, "ttl-option", lease.WithLeaseTTL(5*time.Second)))},
		}, [][2]string{{"leasettl", "plain"}})
	})
}

// drainWatch watches key through cli, and reads and drops its events,
// until the benchmark ends.
func drainWatch(b *testing.B, cli *clientv3.Client, key string) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := cli.Watch(ctx, key, clientv3.WithCreatedNotify())
	if resp, ok := <-events; !ok || !resp.Created {
		cancel()
		b.Fatalf("watch of %s not created: %v", key, resp.Err())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range events {
		}
	}()
	b.Cleanup(func() { cancel(); <-done })
}

// BenchmarkReenter is one reentrant acquisition and its release on a held
// lease, against the floor of two owner-checked Txns. etcd's Mutex has no
// counted reentrancy: a second Lock on the same session is a no-op (one
// Txn) whose matching Unlock would release the lock, so only that Lock is
// measured for it, as a reference, not a comparison.
func BenchmarkReenter(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	ctx := context.Background()
	l, err := benchLocks(b, benchClient(b, eps...), lease.WithPrefix("reenter-fk/")).Acquire(ctx, "lock")
	if err != nil {
		b.Fatal(err)
	}
	emSess := benchSession(b, benchClient(b, eps...))
	if err := concurrency.NewMutex(emSess, "reenter-em/lock").Lock(ctx); err != nil {
		b.Fatal(err)
	}
	floorCli := benchClient(b, eps...)
	const key = "reenter-floor/lock"
	if _, err := floorCli.Put(ctx, key, "owner#1"); err != nil {
		b.Fatal(err)
	}
	b.Run("held", func(b *testing.B) {
		interleave(b, plan{rounds: 20, ops: 50, warmup: 50}, []arm{
			{"fencekit", loop(func() error {
				if err := l.Reenter(ctx); err != nil {
					return err
				}
				return l.Release(ctx)
			})},
			{"etcdmutex", loop(func() error { return concurrency.NewMutex(emSess, "reenter-em/lock").Lock(ctx) })},
			{"floor", loop(func() error {
				for _, step := range [][2]string{{"owner#1", "owner#2"}, {"owner#2", "owner#1"}} {
					if _, err := floorCli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", step[0])).
						Then(clientv3.OpPut(key, step[1])).Commit(); err != nil {
						return err
					}
				}
				return nil
			})},
		}, [][2]string{{"fencekit", "floor"}})
	})
}

// BenchmarkFanout is the uncontended acquire + release of one lock while N
// other clients, each with its own etcd connection and its own
// lease.Client (or concurrency.Session), each hold an unrelated lock under
// the same prefix. It shows what one client's activity costs the rest of a
// fleet: a design in which every client hears of every change under the
// prefix gets slower, and burns more CPU, with N.
//
// Arms, interleaved: fencekit and etcdmutex, each with its N holders;
// fencekit@0, a fencekit client cycling the same way on a prefix nobody
// else uses, with the N holders of the other arms idle under theirs (so
// ratio:fencekit/fencekit@0 is the cost of the fleet, measured in the same
// rounds). CPU is the whole process's: etcd, the busy client and the N
// holders.
func BenchmarkFanout(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	ctx := context.Background()
	for _, n := range []int{0, 16, 64, 256} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			fkPrefix, emPrefix := fmt.Sprintf("fanout-fk-%d/", n), fmt.Sprintf("fanout-em-%d/", n)
			fleet(b, n, eps, func(i int, cli *clientv3.Client) (func(), error) {
				c, err := lease.New(cli, lease.WithPrefix(fkPrefix))
				if err != nil {
					return nil, err
				}
				_, err = c.Acquire(ctx, fmt.Sprintf("other-%d", i))
				return func() { c.Close() }, err
			})
			fleet(b, n, eps, func(i int, cli *clientv3.Client) (func(), error) {
				s, err := concurrency.NewSession(cli)
				if err != nil {
					return nil, err
				}
				return func() { s.Close() }, concurrency.NewMutex(s, fmt.Sprintf("%sother-%d", emPrefix, i)).Lock(ctx)
			})
			fk := benchLocks(b, benchClient(b, eps...), lease.WithPrefix(fkPrefix))
			em := concurrency.NewMutex(benchSession(b, benchClient(b, eps...)), emPrefix+"hot")
			alone := benchLocks(b, benchClient(b, eps...), lease.WithPrefix(fmt.Sprintf("fanout-alone-%d/", n)))
			interleave(b, plan{rounds: 20, ops: 25, warmup: 25}, []arm{
				{"fencekit", loop(fencekitCycle(fk, "hot"))},
				{"etcdmutex", loop(mutexCycle(em))},
				{"fencekit@0", loop(fencekitCycle(alone, "hot"))},
			}, [][2]string{{"fencekit", "fencekit@0"}, {"fencekit", "etcdmutex"}})
		})
	}
}

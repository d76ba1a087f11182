//go:build unix

package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lease"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// manyHoldersN is FENCEKIT_BENCH_HOLDERS_N, the locks each Client of
// BenchmarkManyHolders holds, or 2000 (setting up 8 × 10,000 locks takes
// minutes on a small machine).
func manyHoldersN() int {
	n, err := strconv.Atoi(os.Getenv("FENCEKIT_BENCH_HOLDERS_N"))
	if err != nil || n < 1 {
		return 2000
	}
	return n
}

// manyHoldersPace is FENCEKIT_BENCH_HOLDERS_PACE, the pause between two
// cycles of each of the 7 busy Clients of BenchmarkManyHolders, or 10 ms
// (0: as fast as they can, which on a small machine measures etcd's CPU
// more than what reaches the 8th Client).
func manyHoldersPace() time.Duration {
	d, err := time.ParseDuration(os.Getenv("FENCEKIT_BENCH_HOLDERS_PACE"))
	if err != nil || d < 0 {
		return 10 * time.Millisecond
	}
	return d
}

// BenchmarkManyHolders is a fleet of Clients that each hold many locks
// under one shared prefix, as services holding shards or tenants do: 8
// Clients, each on its own connection to an etcd in a separate process (so
// the heap figure is the clients' alone), each hold n locks
// (FENCEKIT_BENCH_HOLDERS_N, default 2000). The 8th Client cycles one lock
// of its own (acquire + release) in two interleaved arms: quiet, while the
// 7 others only hold, and busy, while each of the 7 also cycles a lock of
// its own continuously (a pause of FENCEKIT_BENCH_HOLDERS_PACE, default
// 10 ms, between cycles). Besides the interleave figures (ratio
// busy/quiet: what the others' churn costs the 8th), it reports
//
//	busy-events/cycle, quiet-events/cycle  watch events the 8th Client
//	     received per cycle (counted on its connection's Watch streams):
//	     its own record's write and delete make 2; anything above that in
//	     the busy arm would be other Clients' events
//	foreign-events  events above 2 per cycle over both arms, in total
//	     (the arms' own figures may differ by an event that arrived
//	     after its block ended)
//	watchers        etcd_debugging_mvcc_watcher_total with all locks held
//	heapB/lock      client heap (runtime.MemStats.HeapAlloc, after GC)
//	     grown by setting up the 8 Clients and their locks, per held lock
//	setup-s         seconds to acquire the 8 × n locks
//
// It ignores b.N.
func BenchmarkManyHolders(b *testing.B) {
	const clients = 8
	n := manyHoldersN()
	endpoint := etcdProcess(b)
	ctx := context.Background()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cs := make([]*lease.Client, clients)
	var received atomic.Int64 // watch events on the 8th Client's connection
	for i := range cs {
		cli := benchClient(b, endpoint)
		if i == clients-1 {
			cli = countingWatchClient(b, endpoint, &received)
		}
		cs[i] = benchLocks(b, cli, lease.WithTTL(10*time.Second))
	}
	start := time.Now()
	held := make([][]*lease.Lease, clients)
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for i, c := range cs {
		held[i] = make([]*lease.Lease, n)
		wg.Go(func() {
			var next atomic.Int64
			var inner sync.WaitGroup
			var mu sync.Mutex
			for range 8 {
				inner.Go(func() {
					for j := next.Add(1) - 1; j < int64(n); j = next.Add(1) - 1 {
						l, err := c.Acquire(ctx, fmt.Sprintf("holders-c%d-%d", i, j))
						if err != nil {
							mu.Lock()
							errs[i] = errors.Join(errs[i], err)
							mu.Unlock()
							return
						}
						held[i][j] = l
					}
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	setup := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	heapPerLock := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(clients*n)
	watchers, err := etcdGauge(endpoint, "etcd_debugging_mvcc_watcher_total")
	if err != nil {
		b.Fatal(err)
	}

	probe := cs[clients-1]
	events := func() float64 { return float64(received.Load()) }
	pace := manyHoldersPace()
	cycle := fencekitCycle(probe, "holders-probe")
	var cycles, evs [2]float64 // quiet, busy
	measured := func(k int, block func(ops int) error) func(ops int) error {
		return func(ops int) error {
			e0 := events()
			if err := block(ops); err != nil {
				return err
			}
			cycles[k] += float64(ops)
			evs[k] += events() - e0
			return nil
		}
	}
	busy := func(ops int) error {
		bctx, cancel := context.WithCancel(ctx)
		var others sync.WaitGroup
		oerrs := make([]error, clients-1)
		for i, c := range cs[:clients-1] {
			others.Go(func() {
				other := fencekitCycle(c, fmt.Sprintf("holders-cycle-%d", i))
				for bctx.Err() == nil {
					if err := other(); err != nil && bctx.Err() == nil {
						oerrs[i] = err
						return
					}
					if pace > 0 {
						time.Sleep(pace)
					}
				}
			})
		}
		err := loop(cycle)(ops)
		cancel()
		others.Wait()
		return errors.Join(append(oerrs, err)...)
	}
	interleave(b, plan{rounds: 10, ops: 50, warmup: 20}, []arm{
		{"quiet", measured(0, loop(cycle))},
		{"busy", measured(1, busy)},
	}, [][2]string{{"busy", "quiet"}})
	b.ReportMetric(evs[0]/cycles[0], "quiet-events/cycle")
	b.ReportMetric(evs[1]/cycles[1], "busy-events/cycle")
	// An event of a block's last cycle may arrive in the next block: over
	// both arms it is counted once.
	b.ReportMetric(evs[0]+evs[1]-2*(cycles[0]+cycles[1]), "foreign-events")
	b.ReportMetric(watchers, "watchers")
	b.ReportMetric(heapPerLock, "heapB/lock")
	b.ReportMetric(setup.Seconds(), "setup-s")
	b.ReportMetric(float64(n), "locks/client")
	runtime.KeepAlive(held) // released by the Clients' Close
}

// countingWatchClient is an etcd client that counts, in n, the events of
// every watch response it receives.
func countingWatchClient(b *testing.B, endpoint string, n *atomic.Int64) *clientv3.Client {
	b.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || method != "/etcdserverpb.Watch/Watch" {
					return cs, err
				}
				return watchCounter{cs, n}, nil
			})},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

// watchCounter counts the events of the watch responses received on a
// Watch stream.
type watchCounter struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s watchCounter) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*pb.WatchResponse); ok && err == nil {
		s.n.Add(int64(len(resp.Events)))
	}
	return err
}

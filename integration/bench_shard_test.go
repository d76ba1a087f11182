//go:build unix

package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// BenchmarkShard measures package shard on a one-member etcd, 8 members
// of equal weight, TTL 2 s, settle 100 ms, no writers:
//
//   - drain: one member of 8 owning 32 of 256 shards Leaves; per shard,
//     the gap from the moment the leaver's context for it was seen
//     cancelled to its successor's admission (lease.Lease.Acquired), p50
//     and p99 over every iteration's shards, against a cycle (the median
//     uncontended Acquire + Release on the same etcd, measured in the
//     same run); and the whole drain, from the Leave call to the last
//     successor's admission. Each iteration drains one member and joins
//     a new one (untimed).
//   - steady: etcd requests per second per member (unary calls and
//     messages sent on streams: keep-alives, watch requests) over 10 s
//     once 8 members own 256 or 4,096 shards and nothing changes, with
//     the default TTL of 10 s (keep-alives every 3.3 s).
//   - joins=8: 8 members join a settled group of 8 at once: the time
//     from the first Join call until the 16 are balanced (16 shards
//     each), and the shards moved more than once (oscillations).
func BenchmarkShard(b *testing.B) {
	b.Run("drain", benchShardDrain)
	b.Run("steady/shards=256", func(b *testing.B) { benchShardSteady(b, 256) })
	b.Run("steady/shards=4096", func(b *testing.B) { benchShardSteady(b, 4096) })
	b.Run("joins=8", benchShardJoins)
}

func benchShardDrain(b *testing.B) {
	cl := etcdtest.Start(b)
	f := newFleet(b, cl, "drain", 256)
	f.quiet = true
	defer f.stop()
	id := 0
	join := func() *fnode { id++; return f.join(fmt.Sprintf("m%02d", id), 1) }
	for range 8 {
		join()
	}
	f.waitBalanced(20 * time.Second)
	cycle := benchCycle(b, cl)
	var gaps []time.Duration
	var drains []time.Duration
	b.ResetTimer()
	for range b.N {
		nd := f.alive()[0]
		owned := nd.m.Owned()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		f.mu.Lock()
		nd.left = true
		f.mu.Unlock()
		if err := nd.m.Leave(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		<-nd.done
		f.waitBalanced(20 * time.Second)
		last := start
		f.mu.Lock()
		for s := range owned {
			var i int
			fmt.Sscan(s, &i)
			ws := f.wins[i]
			for k := 1; k < len(ws); k++ {
				if ws[k-1].member == nd.name && ws[k].start.After(start) {
					gaps = append(gaps, ws[k].start.Sub(ws[k-1].end))
					last = later(last, ws[k].start)
				}
			}
		}
		f.mu.Unlock()
		drains = append(drains, last.Sub(start))
		b.StopTimer()
		nd.locks.Close()
		nd.cli.Close()
		closeProxies(nd.proxies)
		join()
		f.waitBalanced(20 * time.Second)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(gaps)
	slices.Sort(drains)
	p50, p99 := pct(gaps, 50), pct(gaps, 99)
	b.ReportMetric(ms(p50), "gap-p50-ms")
	b.ReportMetric(ms(p99), "gap-p99-ms")
	b.ReportMetric(ms(cycle), "cycle-ms")
	b.ReportMetric(float64(p50)/float64(cycle), "ratio:gap-p50/cycle")
	b.ReportMetric(ms(pct(drains, 50)), "drain-ms")
	fmt.Printf("shard drain: %d shards moved in %d drains; gap p50 %v p99 %v max %v; cycle %v (p50 gap %.2fx); whole drain p50 %v max %v\n",
		len(gaps), len(drains), p50, p99, gaps[len(gaps)-1], cycle, float64(p50)/float64(cycle), pct(drains, 50), drains[len(drains)-1])
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// benchCycle is the median of 30 uncontended Acquire + Release cycles.
func benchCycle(b *testing.B, cl *etcdtest.Cluster) time.Duration {
	cli, err := cl.NewClient()
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	locks, err := lease.New(cli, lease.WithPrefix("cycle/"))
	if err != nil {
		b.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	var ds []time.Duration
	for range 30 {
		start := time.Now()
		l, err := locks.Acquire(ctx, "cycle")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return pct(ds, 50)
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// requestCounter counts what one member's etcd client sends: unary calls
// and messages on streams.
type requestCounter struct {
	n  atomic.Int64
	mu sync.Mutex
	by map[string]int64 // per gRPC method
}

func (c *requestCounter) add(method string) {
	c.n.Add(1)
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]int64{}
	}
	c.by[method]++
	c.mu.Unlock()
}

func (c *requestCounter) methods() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.by)
}

func (c *requestCounter) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &countingStream{ClientStream: s, add: func() { c.add(method) }}, nil
		}),
	}
}

type countingStream struct {
	grpc.ClientStream
	add func()
}

func (s *countingStream) SendMsg(m any) error {
	s.add()
	return s.ClientStream.SendMsg(m)
}

func benchShardSteady(b *testing.B, shards int) {
	cl := etcdtest.Start(b)
	f := newFleet(b, cl, "steady", shards)
	f.quiet = true
	f.ttl = lease.DefaultTTL // 2 s sessions do not survive 4,096 acquisitions at once on a loaded machine
	var mu sync.Mutex
	counters := map[string]*requestCounter{}
	f.cfg = func(member string) clientv3.Config {
		c := &requestCounter{}
		mu.Lock()
		counters[member] = c
		mu.Unlock()
		cfg := cl.ClientConfig()
		cfg.Endpoints = nil
		cfg.DialOptions = append(cfg.DialOptions, c.options()...)
		return cfg
	}
	defer f.stop()
	for i := range 8 {
		f.join(fmt.Sprintf("m%d", i), 1)
	}
	f.waitBalanced(60 * time.Second)
	f.waitStill(60 * time.Second)
	// The lease.Clients cancel the watches of records they no longer use,
	// and delete the records of acquisitions cancelled by a later plan,
	// up to a TTL later.
	time.Sleep(f.ttl + 2*time.Second)
	window := 10 * time.Second
	b.ResetTimer()
	var rates []float64
	byMethod := map[string]int64{}
	for range b.N {
		before := map[string]int64{}
		beforeBy := map[string]map[string]int64{}
		mu.Lock()
		for m, c := range counters {
			before[m], beforeBy[m] = c.n.Load(), c.methods()
		}
		mu.Unlock()
		time.Sleep(window)
		mu.Lock()
		for m, c := range counters {
			rates = append(rates, float64(c.n.Load()-before[m])/window.Seconds())
			for k, v := range c.methods() {
				if d := v - beforeBy[m][k]; d > 0 {
					byMethod[k] += d
				}
			}
		}
		mu.Unlock()
	}
	fmt.Printf("shard steady state, %d shards: requests in the windows by method: %v\n", shards, byMethod)
	b.StopTimer()
	slices.Sort(rates)
	b.ReportMetric(rates[len(rates)/2], "req/s/member")
	b.ReportMetric(rates[len(rates)-1], "max-req/s/member")
	fmt.Printf("shard steady state, %d shards, 8 members, TTL %v: etcd requests per member per second: median %.2f, min %.2f, max %.2f\n",
		shards, f.ttl, rates[len(rates)/2], rates[0], rates[len(rates)-1])
}

// waitStill waits until every shard's holder is its assigned member and
// nobody waits for any shard's lock.
func (f *fleet) waitStill(d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := f.alive()[0].group.Status(ctx)
		cancel()
		still := err == nil
		for _, s := range st.Shards {
			still = still && !s.Moving() && s.Owner != "" && len(s.Waiting) == 0
		}
		if still {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("shards still moving after %v: %v", d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func benchShardJoins(b *testing.B) {
	cl := etcdtest.Start(b)
	f := newFleet(b, cl, "joins8", 256)
	f.quiet = true
	defer f.stop()
	id := 0
	for range 8 {
		id++
		f.join(fmt.Sprintf("m%02d", id), 1)
	}
	f.waitBalanced(20 * time.Second)
	var times []time.Duration
	twice, moves := 0, 0
	b.ResetTimer()
	for range b.N {
		before := make([]int, f.n)
		f.mu.Lock()
		for i, ws := range f.wins {
			before[i] = len(ws)
		}
		f.mu.Unlock()
		start := time.Now()
		var wg sync.WaitGroup
		var joiners []string
		for range 8 {
			id++
			name := fmt.Sprintf("m%02d", id)
			joiners = append(joiners, name)
			wg.Add(1)
			go func() { defer wg.Done(); f.join(name, 1) }()
		}
		wg.Wait()
		f.waitBalanced(20 * time.Second)
		times = append(times, time.Since(start))
		time.Sleep(500 * time.Millisecond) // anything moving again would show
		f.mu.Lock()
		for i, ws := range f.wins {
			moved := len(ws) - before[i]
			moves += moved
			if moved > 1 {
				twice++
			}
		}
		f.mu.Unlock()
		b.StopTimer()
		// Back to 8: the joiners leave (untimed).
		for _, nd := range f.alive() {
			if slices.Contains(joiners, nd.name) {
				f.leave(nd)
			}
		}
		f.waitBalanced(20 * time.Second)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(ms(pct(times, 50)), "converge-ms")
	b.ReportMetric(float64(twice), "oscillations")
	fmt.Printf("shard joins: 8 joins into 8 members x 256 shards, %d rounds: converged (balanced) in p50 %v, max %v; %d shards moved, %d of them more than once\n",
		len(times), pct(times, 50), times[len(times)-1], moves, twice)
}

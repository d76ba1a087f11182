//go:build unix

package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkTransfer is a planned hand-off in an election of five
// candidates, each with its own Client and connection: from the leader's
// Term.Transfer call to a waiting candidate chosen at random to the start
// of that candidate's term (its Term.Since: when its Client admitted it).
//
// Arms, interleaved in the same rounds (see interleave; each block is ops
// hand-offs, and between two hand-offs, untimed, the old leader queues
// again so that four candidates wait; it does so once its successor's
// term began, as a replaced pod rejoins after the hand-off, so that its
// new record does not race the hand-off in either arm; candidates a
// transfer passed over queue again at once, as they do in production):
//
//   - fencekit: Transfer to the chosen candidate.
//   - resign: the leader resigns and the next candidate in line starts:
//     from the Resign call to the successor's term start.
//   - uncontended: an Acquire + Release of a lock nobody else uses.
//
// It reports, per arm X, X-ms/op (the median over rounds of each round's
// median latency), X-p99-ms (the 99th percentile over every hand-off),
// X-cpu-ms/op (process CPU per operation of the block, the untimed
// re-queueing included), and ratio:fencekit/uncontended and
// ratio:fencekit/resign over the per-round medians. The target:
// the median at most 1.5 times an uncontended cycle, p99 at most 50 ms.
func BenchmarkTransfer(b *testing.B) { b.Run("n=5", benchTransfer) }

func benchTransfer(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tr := newBenchRing(ctx, b, eps, "transfer-bench/")
	rs := newBenchRing(ctx, b, eps, "resign-bench/")
	alone := benchLocks(b, benchClient(b, eps...), lease.WithPrefix("transfer-alone/"))
	rng := rand.New(rand.NewPCG(7, 11))

	type armLat struct {
		name string
		op   func() (time.Duration, error)
	}
	arms := []armLat{
		{"fencekit", func() (time.Duration, error) {
			cands, err := tr.waiting(ctx, 4)
			if err != nil {
				return 0, err
			}
			to := cands[rng.IntN(len(cands))]
			start := time.Now()
			if err := tr.cur.Transfer(ctx, to); err != nil {
				return 0, err
			}
			next, err := tr.next(ctx)
			if err != nil {
				return 0, err
			}
			if next.Fence() != to.Term {
				return 0, fmt.Errorf("transfer to %v: %v leads", to.Term, next.Fence())
			}
			return next.Acquired().Sub(start), nil
		}},
		{"resign", func() (time.Duration, error) {
			if _, err := rs.waiting(ctx, 4); err != nil {
				return 0, err
			}
			start := time.Now()
			if err := rs.cur.Release(ctx); err != nil {
				return 0, err
			}
			next, err := rs.next(ctx)
			if err != nil {
				return 0, err
			}
			return next.Acquired().Sub(start), nil
		}},
		{"uncontended", func() (time.Duration, error) {
			start := time.Now()
			l, err := alone.Acquire(ctx, "lock")
			if err != nil {
				return 0, err
			}
			if err := l.Release(ctx); err != nil {
				return 0, err
			}
			return time.Since(start), nil
		}},
	}
	p := plan{rounds: 12, ops: 20, warmup: 10}
	if r := roundsOverride(); r > 0 {
		p.rounds = r
	}
	for _, a := range arms {
		for range p.warmup {
			if _, err := a.op(); err != nil {
				b.Fatalf("%s warm-up: %v", a.name, err)
			}
		}
	}
	perRound := map[string][]float64{} // each round's median, ms
	cpu := map[string][]float64{}
	all := map[string][]float64{}
	b.ResetTimer()
	for r := range p.rounds {
		for j := range arms {
			a := arms[(r+j)%len(arms)]
			lat := make([]float64, 0, p.ops)
			c0 := cpuTime()
			for range p.ops {
				d, err := a.op()
				if err != nil {
					b.Fatalf("%s round %d: %v", a.name, r, err)
				}
				lat = append(lat, ms(d))
			}
			cpu[a.name] = append(cpu[a.name], ms(cpuTime()-c0)/float64(p.ops))
			perRound[a.name] = append(perRound[a.name], median(lat))
			all[a.name] = append(all[a.name], lat...)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for _, a := range arms {
		b.ReportMetric(median(perRound[a.name]), a.name+"-ms/op")
		b.ReportMetric(median(cpu[a.name]), a.name+"-cpu-ms/op")
		s := slices.Clone(all[a.name])
		slices.Sort(s)
		b.ReportMetric(s[len(s)*99/100], a.name+"-p99-ms")
	}
	for _, pr := range [][2]string{{"fencekit", "uncontended"}, {"fencekit", "resign"}} {
		rs := make([]float64, p.rounds)
		for i := range rs {
			rs[i] = perRound[pr[0]][i] / perRound[pr[1]][i]
		}
		unit := "ratio:" + pr[0] + "/" + pr[1]
		b.ReportMetric(median(rs), unit)
		b.ReportMetric(slices.Min(rs), unit+"-min")
		b.ReportMetric(slices.Max(rs), unit+"-max")
	}
	b.ReportMetric(float64(p.rounds), "rounds")
	b.ReportMetric(float64(p.ops), "ops/block")
}

// benchRing is five candidates of one election that campaign again
// whenever their term ends; cur is the leader the benchmark last saw
// start.
type benchRing struct {
	e   *lease.Election // the first candidate's, to list the queue
	led chan *lease.Term
	cur *lease.Term

	mu    sync.Mutex
	began chan struct{} // closed when the term after cur begins
}

// succeeded waits until a term other than t was received by next (or
// ctx ends).
func (r *benchRing) succeeded(ctx context.Context, t *lease.Term) {
	for {
		r.mu.Lock()
		cur, began := r.cur, r.began
		r.mu.Unlock()
		if cur != t && cur != nil {
			return
		}
		select {
		case <-began:
		case <-ctx.Done():
			return
		}
	}
}

func newBenchRing(ctx context.Context, b *testing.B, eps []string, prefix string) *benchRing {
	const n = 5
	r := &benchRing{led: make(chan *lease.Term, n), began: make(chan struct{})}
	elections := make([]*lease.Election, n)
	fleet(b, n, eps, func(i int, cli *clientv3.Client) (func(), error) {
		c, err := lease.New(cli, lease.WithPrefix(prefix))
		if err != nil {
			return nil, err
		}
		elections[i], err = c.Election("leader")
		return func() { c.Close() }, err
	})
	r.e = elections[0]
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, n)
	b.Cleanup(func() {
		cancel()
		for range n {
			<-done
		}
	})
	for i, e := range elections {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				t, err := e.Campaign(ctx, fmt.Sprintf("c%d", i))
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				select {
				case r.led <- t:
				case <-ctx.Done():
				}
				select {
				case <-t.Done():
					r.succeeded(ctx, t) // rejoin once the successor began
				case <-ctx.Done():
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = t.Release(rctx)
					rcancel()
				}
			}
		}()
	}
	if _, err := r.next(ctx); err != nil {
		b.Fatal(err)
	}
	return r
}

// next waits for the next term to start, and makes it cur.
func (r *benchRing) next(ctx context.Context) (*lease.Term, error) {
	select {
	case t := <-r.led:
		r.mu.Lock()
		r.cur = t
		close(r.began)
		r.began = make(chan struct{})
		r.mu.Unlock()
		return t, nil
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("no new term within 30 s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waiting waits until n candidates wait behind the leader.
func (r *benchRing) waiting(ctx context.Context, n int) ([]lease.Candidate, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cands, err := r.e.Candidates(ctx)
		if err == nil && len(cands) == n {
			return cands, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d candidates waiting, not %d (%v)", len(cands), n, err)
		}
		time.Sleep(time.Millisecond)
	}
}

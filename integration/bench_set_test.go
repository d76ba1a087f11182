//go:build unix

package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkAcquireAll takes k locks at once, uncontended, and releases
// them: one AcquireAll (one transaction writes every record) against k
// sequential fencekit acquisitions (in sorted order, as deadlock avoidance
// would have it) and k etcd Mutexes locked in sorted order, and against one
// single-lock fencekit cycle. ratio:set/single is what a set of k costs
// against one lock; ratio:sequential/set and ratio:etcdmutex/set how many
// times faster the set is than taking the locks one by one.
func BenchmarkAcquireAll(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	for _, k := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			names := make([]string, k)
			for i := range names {
				names[i] = fmt.Sprintf("acct-%02d", i)
			}
			set := benchLocks(b, benchClient(b, eps...), lease.WithPrefix(fmt.Sprintf("set-%d/", k)))
			seq := benchLocks(b, benchClient(b, eps...), lease.WithPrefix(fmt.Sprintf("seq-%d/", k)))
			single := benchLocks(b, benchClient(b, eps...), lease.WithPrefix(fmt.Sprintf("single-%d/", k)))
			sess := benchSession(b, benchClient(b, eps...))
			mutexes := make([]*concurrency.Mutex, k)
			for i, n := range names {
				mutexes[i] = concurrency.NewMutex(sess, fmt.Sprintf("em-%d/%s", k, n))
			}
			interleave(b, plan{rounds: 30, ops: 20, warmup: 20}, []arm{
				{"set", loop(setCycle(set, names))},
				{"sequential", loop(sequentialCycle(seq, names))},
				{"etcdmutex", loop(mutexesCycle(mutexes))},
				{"single", loop(fencekitCycle(single, "lock"))},
			}, [][2]string{{"set", "single"}, {"sequential", "set"}, {"etcdmutex", "set"}})
		})
	}
}

// setCycle is one AcquireAll of names and its Release.
func setCycle(c *lease.Client, names []string) func() error {
	ctx := context.Background()
	return func() error {
		s, err := c.AcquireAll(ctx, names)
		if err != nil {
			return err
		}
		return s.Release(ctx)
	}
}

// sequentialCycle acquires names one by one, in order, and releases them.
func sequentialCycle(c *lease.Client, names []string) func() error {
	ctx := context.Background()
	held := make([]*lease.Lease, len(names))
	return func() error {
		for i, n := range names {
			l, err := c.Acquire(ctx, n)
			if err != nil {
				return err
			}
			held[i] = l
		}
		var errs []error
		for _, l := range held {
			errs = append(errs, l.Release(ctx))
		}
		return errors.Join(errs...)
	}
}

// mutexesCycle locks ms in order and unlocks them.
func mutexesCycle(ms []*concurrency.Mutex) func() error {
	ctx := context.Background()
	return func() error {
		for _, m := range ms {
			if err := m.Lock(ctx); err != nil {
				return err
			}
		}
		var errs []error
		for _, m := range ms {
			errs = append(errs, m.Unlock(ctx))
		}
		return errors.Join(errs...)
	}
}

// BenchmarkAcquireAllContended runs 8 clients, each on its own connection,
// taking random sets of 2 to 4 of 6 locks (in random order) and releasing
// them at once: fencekit's AcquireAll against etcd Mutexes locked one by
// one in sorted order (the usual way to avoid deadlock), interleaved. An
// operation is one set taken and released by any client; ratio:etcdmutex/
// fencekit is how many times more sets per second fencekit completes, and
// the p99 figures are each arm's 99th percentile wait for a set.
func BenchmarkAcquireAllContended(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	const clients = 8
	locks := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	fks := make([]*lease.Client, clients)
	fleet(b, clients, eps, func(i int, cli *clientv3.Client) (func(), error) {
		c, err := lease.New(cli, lease.WithPrefix("contended-fk/"))
		fks[i] = c
		return func() { c.Close() }, err
	})
	sessions := make([]*concurrency.Session, clients)
	fleet(b, clients, eps, func(i int, cli *clientv3.Client) (func(), error) {
		s, err := concurrency.NewSession(cli)
		sessions[i] = s
		if err != nil {
			return nil, err
		}
		return func() { s.Close() }, nil
	})
	var waits [2][]time.Duration
	var mu sync.Mutex
	record := func(arm int, d time.Duration) {
		mu.Lock()
		waits[arm] = append(waits[arm], d)
		mu.Unlock()
	}
	fk := contended(clients, locks, func(ctx context.Context, i int, names []string) (func() error, error) {
		start := time.Now()
		s, err := fks[i].AcquireAll(ctx, names)
		if err != nil {
			return nil, err
		}
		record(0, time.Since(start))
		return func() error { return s.Release(ctx) }, nil
	})
	em := contended(clients, locks, func(ctx context.Context, i int, names []string) (func() error, error) {
		slices.Sort(names)
		start := time.Now()
		var held []*concurrency.Mutex
		for _, n := range names {
			m := concurrency.NewMutex(sessions[i], "contended-em/"+n)
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			held = append(held, m)
		}
		record(1, time.Since(start))
		return func() error {
			var errs []error
			for _, m := range held {
				errs = append(errs, m.Unlock(ctx))
			}
			return errors.Join(errs...)
		}, nil
	})
	interleave(b, plan{rounds: 12, ops: 40, warmup: 16}, []arm{{"fencekit", fk}, {"etcdmutex", em}},
		[][2]string{{"etcdmutex", "fencekit"}})
	for arm, name := range []string{"fencekit", "etcdmutex"} {
		ws := waits[arm]
		slices.Sort(ws)
		if len(ws) > 0 {
			b.ReportMetric(ms(ws[len(ws)*99/100]), name+"-p99-wait-ms")
		}
	}
}

// contended returns a block that runs clients workers taking random sets
// of locks through take (which returns the release) until ops sets were
// taken and released in all.
func contended(clients int, locks []string, take func(ctx context.Context, i int, names []string) (func() error, error)) func(ops int) error {
	ctx := context.Background()
	seed := uint64(0)
	return func(ops int) error {
		var left atomic.Int64
		left.Store(int64(ops))
		errs := make([]error, clients)
		var wg sync.WaitGroup
		for i := range clients {
			seed++
			rng := rand.New(rand.NewPCG(seed, 11))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					names := slices.Clone(locks)
					rng.Shuffle(len(names), func(a, b int) { names[a], names[b] = names[b], names[a] })
					release, err := take(ctx, i, names[:2+rng.IntN(3)])
					if err == nil {
						err = release()
					}
					if err != nil {
						errs[i] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
}

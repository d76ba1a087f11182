//go:build unix

package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/lease"
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
		s, err := c.AcquireAll(ctx, names...)
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

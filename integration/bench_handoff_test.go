//go:build unix

package integration_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkHandoff passes one lock among n contenders, each with its own
// etcd connection and lease.Client (or concurrency.Session), as separate
// processes would; an operation is one handoff: the holder releases and
// the next in line acquires.
//
// Arms, interleaved: fencekit and etcdmutex relays (see relay), and
// uncontended, a fencekit client cycling a lock of its own under a prefix
// nobody else uses, so ratio:fencekit/uncontended compares a handoff with
// an uncontended acquire + release measured in the same rounds, and
// ratio:etcdmutex/fencekit is how many times faster fencekit hands over.
func BenchmarkHandoff(b *testing.B) {
	cl, _ := benchEtcd(b)
	eps := cl.Endpoints()
	for _, n := range []int{2, 4, 8, 16, 64, 256} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			prefix := fmt.Sprintf("handoff-fk-%d/", n)
			fks := make([]*lease.Client, n)
			fleet(b, n, eps, func(i int, cli *clientv3.Client) (func(), error) {
				c, err := lease.New(cli, lease.WithPrefix(prefix))
				fks[i] = c
				return func() { c.Close() }, err
			})
			ems := make([]*concurrency.Session, n)
			fleet(b, n, eps, func(i int, cli *clientv3.Client) (func(), error) {
				s, err := concurrency.NewSession(cli)
				ems[i] = s
				if err != nil {
					return nil, err
				}
				return func() { s.Close() }, nil
			})
			fk, err := startRelay(ctx, n, func(ctx context.Context, i int) (func() error, error) {
				l, err := fks[i].Acquire(ctx, "lock")
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(context.Background()) }, nil
			})
			defer fk.stop(b)
			if err != nil {
				b.Fatal(err)
			}
			em, err := startRelay(ctx, n, func(ctx context.Context, i int) (func() error, error) {
				m := concurrency.NewMutex(ems[i], fmt.Sprintf("handoff-em-%d/lock", n))
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func() error { return m.Unlock(context.Background()) }, nil
			})
			defer em.stop(b)
			if err != nil {
				b.Fatal(err)
			}
			alone := benchLocks(b, benchClient(b, eps...), lease.WithPrefix(fmt.Sprintf("handoff-alone-%d/", n)))
			// The warm-up takes every contender through the queue at
			// least once, so the timed blocks start with a full queue.
			interleave(b, plan{rounds: 12, ops: 20, warmup: 20 + n}, []arm{
				{"fencekit", fk.block},
				{"etcdmutex", em.block},
				{"uncontended", loop(fencekitCycle(alone, "lock"))},
			}, [][2]string{{"fencekit", "uncontended"}, {"etcdmutex", "fencekit"}})
		})
	}
}

// relayTimeout bounds one block of a relay and its shutdown.
const relayTimeout = 3 * time.Minute

// A relay keeps n contenders passing one lock in steady state, and lets
// the interleaving harness run it a block at a time: every contender
// loops acquire, release, acquire…, so n-1 of them always wait in the
// queue; the acquisition that ends a block does not release but parks,
// holding the lock, until the next block of this relay starts. Between
// blocks the relay is idle, with a full queue, while other arms run.
type relay struct {
	quota  atomic.Int64  // acquisitions left in the current block
	halt   atomic.Bool   // set by stop: release and leave
	gate   chan struct{} // the parked holder waits here
	parked chan struct{} // a holder parked: the block is done
	errs   chan error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startRelay starts n contenders; acquire(ctx, i) acquires for contender
// i and returns the release. It returns once the first holder parked; the
// caller must call stop in any case.
func startRelay(ctx context.Context, n int, acquire func(ctx context.Context, i int) (func() error, error)) (*relay, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &relay{gate: make(chan struct{}), parked: make(chan struct{}, 1), errs: make(chan error, n), cancel: cancel}
	for i := range n {
		r.wg.Go(func() {
			for !r.halt.Load() {
				release, err := acquire(ctx, i)
				if err != nil {
					if ctx.Err() == nil {
						r.errs <- fmt.Errorf("contender %d: %w", i, err)
					}
					return
				}
				if !r.halt.Load() && r.quota.Add(-1) <= 0 {
					r.parked <- struct{}{}
					select {
					case <-r.gate:
					case <-ctx.Done():
					}
				}
				if err := release(); err != nil && ctx.Err() == nil {
					r.errs <- fmt.Errorf("contender %d: %w", i, err)
					return
				}
			}
		})
	}
	return r, r.wait()
}

// block unparks the holder and waits until ops more acquisitions happened
// and the last of them parked.
func (r *relay) block(ops int) error {
	r.quota.Store(int64(ops))
	select {
	case r.gate <- struct{}{}:
	case err := <-r.errs:
		return err
	}
	return r.wait()
}

// wait waits for a holder to park.
func (r *relay) wait() error {
	select {
	case <-r.parked:
		return nil
	case err := <-r.errs:
		return err
	case <-time.After(relayTimeout):
		return fmt.Errorf("relay: no handoff within %v", relayTimeout)
	}
}

// stop lets every contender acquire once more, release and leave. If
// they do not finish in time (a contender failed and left the lock held),
// it cancels their Acquires.
func (r *relay) stop(tb testing.TB) {
	r.halt.Store(true)
	select {
	case r.gate <- struct{}{}:
	case <-time.After(10 * time.Second):
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(relayTimeout):
		tb.Error("relay: contenders did not finish; cancelling them")
		r.cancel()
		<-done
	}
	r.cancel()
}

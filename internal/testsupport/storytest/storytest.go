// Package storytest plays the two holders of the quick start's story for
// the guards' end-to-end tests: A reaches etcd through a proxy that can
// pause and holds a lock; its link is cut past its 1 s TTL until its lease
// ends; then B, which reaches etcd directly, acquires the same lock. The
// test writes through its own guard between the steps.
package storytest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
)

// LossTimeout bounds how long Depose waits for A's lease to end.
const LossTimeout = 10 * time.Second

// Story is A and B on one cluster; t's cleanup closes their clients.
type Story struct {
	t      testing.TB
	lock   string
	proxy  *faultproxy.Proxy
	locksB *lease.Client

	// A is A's lease, acquired by Start.
	A *lease.Lease
	// B is B's lease, acquired by Depose.
	B *lease.Lease
}

// Start sets A and B up on c (each a lease client with a 1 s TTL) and
// returns once A holds lock.
func Start(ctx context.Context, t testing.TB, c *etcdtest.Cluster, lock string) *Story {
	t.Helper()
	proxy, err := faultproxy.New(strings.TrimPrefix(c.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	locksA, err := lease.New(etcdtest.Client(t, c, proxy.URL()), lease.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.Resume()
		locksA.Close()
	})
	locksB, err := lease.New(etcdtest.Client(t, c), lease.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locksB.Close() })
	s := &Story{t: t, lock: lock, proxy: proxy, locksB: locksB}
	if s.A, err = locksA.Acquire(ctx, lock); err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	return s
}

// Depose pauses A's link to etcd until A's lease ends (its process
// stalls: nothing reaches etcd), then makes B acquire the lock.
func (s *Story) Depose(ctx context.Context) {
	s.t.Helper()
	s.proxy.Pause()
	select {
	case <-s.A.Done():
	case <-time.After(LossTimeout):
		s.t.Fatal("A's lease did not end while its link to etcd was paused past the TTL")
	}
	b, err := s.locksB.Acquire(ctx, s.lock)
	if err != nil {
		s.t.Fatalf("B acquire: %v", err)
	}
	s.B = b
}

// Wake resumes A's link to etcd: A's late writes can be tried.
func (s *Story) Wake() { s.proxy.Resume() }

package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Asking the holder to release: its ReleaseRequested closes, Do cancels
// its function with ErrReleaseRequested and releases, and the next waiter
// gets the lock; the request key is gone afterwards.
func TestRequestRelease(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	holder := newClient(t, cli)

	running := make(chan *lease.Lease, 1)
	done := make(chan error, 1)
	go func() {
		done <- holder.Do(ctx, "asked", func(ctx context.Context, l *lease.Lease) error {
			running <- l
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), lease.ErrReleaseRequested) {
				return context.Cause(ctx)
			}
			return nil // stopped as asked
		})
	}()
	l := <-running
	next := make(chan *lease.Lease, 1)
	go func() {
		w, err := newClient(t, cli).Acquire(ctx, "asked")
		assert.NoError(t, err)
		next <- w
	}()
	waitRecords(t, cli, "asked", 2)

	start := time.Now()
	require.NoError(t, newAdmin(t, cli).RequestRelease(ctx, "asked", l.Fence().Revision))
	select {
	case <-l.ReleaseRequested():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not hear the request")
	}
	require.NoError(t, <-done)
	w := <-next
	t.Logf("asked to admitted: %v", time.Since(start).Round(time.Millisecond))
	require.ErrorIs(t, l.Err(), lease.ErrReleased)
	assert.Greater(t, w.Fence().Revision, l.Fence().Revision)
	require.Eventually(t, func() bool {
		resp, err := cli.Get(ctx, lease.DefaultPrefix+"/asks/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	}, 5*time.Second, 10*time.Millisecond, "the request is deleted once handled")
	states, err := newAdmin(t, cli).InspectAll(ctx)
	require.NoError(t, err)
	for _, st := range states {
		assert.NotEmpty(t, st.Name, "the requests' space shows up as a lock")
	}
	require.NoError(t, w.Release(ctx))
}

// A request naming a fence that is not the holder's changes nothing; a
// free lock reports ErrNotFound.
func TestRequestReleaseOfAnotherHolder(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	err := newAdmin(t, cli).RequestRelease(ctx, "nobody", 42)
	var nh *lease.NotHolderError
	require.ErrorAs(t, err, &nh)
	require.ErrorIs(t, err, lease.ErrNotFound)

	l, err := newClient(t, cli).Acquire(ctx, "kept")
	require.NoError(t, err)
	err = newAdmin(t, cli).RequestRelease(ctx, "kept", l.Fence().Revision-1)
	require.ErrorIs(t, err, lease.ErrNotOwner)
	select {
	case <-l.ReleaseRequested():
		t.Fatal("a request for another fence reached the holder")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, l.Err())
	require.Error(t, newAdmin(t, cli).RequestRelease(ctx, "kept", 0))
	require.ErrorIs(t, newAdmin(t, cli).RequestRelease(ctx, "a/b", 1), lease.ErrInvalidName)
	require.NoError(t, l.Release(ctx))
}

package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/owner"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInspectHolderAndWaiters(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	a := newClient(t, cli, lease.WithTTL(5*time.Second))
	b := newClient(t, cli, lease.WithTTL(5*time.Second))
	ctx := ctxT(t, 20*time.Second)

	free, err := newAdmin(t, cli).Inspect(ctx, "jobs")
	require.NoError(t, err)
	assert.Nil(t, free.Holder)
	assert.Empty(t, free.Waiters)

	l, err := a.Acquire(ctx, "jobs")
	require.NoError(t, err)
	require.NoError(t, l.Reenter(ctx))
	waitErr := make(chan error, 1)
	go func() {
		w, err := b.Acquire(ctx, "jobs")
		if err == nil {
			err = w.Release(ctx)
		}
		waitErr <- err
	}()
	waitRecords(t, cli, "jobs", 2)

	st, err := newAdmin(t, cli).Inspect(ctx, "jobs")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	h := st.Holder
	assert.Equal(t, l.Fence(), h.Fence)
	assert.Equal(t, l.OwnerDigest(), h.OwnerDigest)
	assert.Equal(t, owner.Default().Instance(), h.Instance)
	assert.Equal(t, owner.ProcessStart().UnixMilli(), h.Since.UnixMilli())
	assert.False(t, h.Since.After(l.Acquired()))
	assert.Equal(t, 2, h.Holds)
	assert.Greater(t, h.SessionTTL, time.Duration(0))
	assert.LessOrEqual(t, h.SessionTTL, 5*time.Second)
	require.Len(t, st.Waiters, 1)
	assert.Greater(t, st.Waiters[0].Fence.Revision, h.Fence.Revision)
	assert.Equal(t, 1, st.Waiters[0].Holds)
	assert.NotEqual(t, h.Session, st.Waiters[0].Session)

	// No owner token anywhere in what Inspect returns.
	resp, err := cli.Get(ctx, h.Key)
	require.NoError(t, err)
	tok, _, _ := strings.Cut(string(resp.Kvs[0].Value), "#")
	assert.NotContains(t, strings.Join([]string{h.OwnerDigest, h.Instance, h.Key}, " "), tok)

	all, err := newAdmin(t, cli).InspectAll(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, st.Holder.Fence, all[0].Holder.Fence)
	assert.Equal(t, "jobs", all[0].Name)

	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, <-waitErr)
}

func TestForceRelease(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	a := newClient(t, cli, lease.WithTTL(5*time.Second))
	b := newClient(t, cli, lease.WithTTL(5*time.Second))
	ctx := ctxT(t, 20*time.Second)

	_, err := newAdmin(t, cli).ForceRelease(ctx, "jobs", 7)
	var nh *lease.NotHolderError
	require.ErrorAs(t, err, &nh)
	assert.ErrorIs(t, err, lease.ErrNotFound)

	l, err := a.Acquire(ctx, "jobs")
	require.NoError(t, err)
	got := make(chan *lease.Lease, 1)
	go func() {
		w, err := b.Acquire(ctx, "jobs")
		if err != nil {
			w = nil
		}
		got <- w
	}()
	waitRecords(t, cli, "jobs", 2)
	st, err := newAdmin(t, cli).Inspect(ctx, "jobs")
	require.NoError(t, err)
	waiterRev := st.Waiters[0].Fence.Revision

	for _, rev := range []int64{waiterRev, l.Fence().Revision - 1, l.Fence().Revision + 1000} {
		_, err = newAdmin(t, cli).ForceRelease(ctx, "jobs", rev)
		require.ErrorAs(t, err, &nh, "rev %d", rev)
		assert.ErrorIs(t, err, lease.ErrNotOwner)
		assert.Equal(t, l.Fence().Revision, nh.Holder)
	}
	_, err = newAdmin(t, cli).ForceRelease(ctx, "jobs", 0)
	require.Error(t, err)
	_, err = newAdmin(t, cli).ForceRelease(ctx, "a/b", 3)
	require.ErrorIs(t, err, lease.ErrInvalidName)
	assert.Len(t, records(t, cli, "jobs"), 2, "refusals change nothing")
	select {
	case <-l.Done():
		t.Fatal("holder lost its lease to a refused force release")
	default:
	}

	r, err := newAdmin(t, cli).ForceRelease(ctx, "jobs", l.Fence().Revision)
	require.NoError(t, err)
	assert.Equal(t, l.Fence(), r.Fence)
	assert.Equal(t, l.OwnerDigest(), r.OwnerDigest)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holder's Done did not close")
	}
	assert.ErrorIs(t, l.Err(), lease.ErrKeyDeleted)
	w := <-got
	require.NotNil(t, w)
	assert.Greater(t, w.Fence().Revision, l.Fence().Revision)

	// A second force release of the same revision finds a new holder.
	_, err = newAdmin(t, cli).ForceRelease(ctx, "jobs", l.Fence().Revision)
	assert.ErrorIs(t, err, lease.ErrNotOwner)
	require.NoError(t, w.Release(ctx))
	relErr := l.Release(ctx)
	assert.True(t, errors.Is(relErr, lease.ErrNotFound) || errors.Is(relErr, lease.ErrLost), "%v", relErr)
}

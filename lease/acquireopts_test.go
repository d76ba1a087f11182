package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lease with a maximum hold ends with ErrMaxHold after it, although its
// renewals succeed, before the next in line is admitted; its record is
// then deleted so that the lock passes on.
func TestMaxHold(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	reg := prometheus.NewRegistry()
	c := newClient(t, cli, lease.WithTTL(time.Second), lease.WithMetrics(reg))
	const limit = 1500 * time.Millisecond // past a TTL: renewals go on meanwhile
	start := time.Now()
	l, err := c.Acquire(ctx, "capped", lease.WithMaxHold(limit))
	require.NoError(t, err)
	next := make(chan time.Time, 1)
	go func() {
		w, err := newClient(t, cli).Acquire(ctx, "capped")
		next <- time.Now()
		if assert.NoError(t, err) {
			assert.Greater(t, w.Fence().Revision, l.Fence().Revision)
			assert.NoError(t, w.Release(ctx))
		}
	}()
	<-l.Done()
	ended := time.Now()
	held := ended.Sub(start)
	assert.GreaterOrEqual(t, held, limit)
	assert.Less(t, held, limit+time.Second)
	var lost *lease.LostError
	require.ErrorAs(t, l.Err(), &lost)
	require.ErrorIs(t, l.Err(), lease.ErrMaxHold)
	require.ErrorIs(t, l.Err(), lease.ErrLost)
	assert.Equal(t, "capped", lost.Lock)
	admitted := <-next
	assert.True(t, ended.Before(admitted), "the next holder was admitted %v before the capped lease ended", ended.Sub(admitted))
	assert.Less(t, admitted.Sub(ended), time.Second, "the record was deleted, not left to expire")
	assert.Equal(t, 1.0, metricValue(t, reg, "fencekit_lease_losses_total", "cause", "max_hold"))
	require.ErrorIs(t, l.Release(ctx), lease.ErrNotFound)
}

// Do's ctx is cancelled with the cap as its cause.
func TestMaxHoldCancelsDo(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	err := c.Do(ctx, "capped-do", func(ctx context.Context, _ *lease.Lease) error {
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), lease.ErrMaxHold)
		return ctx.Err()
	}, lease.WithMaxHold(200*time.Millisecond))
	require.ErrorIs(t, err, lease.ErrMaxHold)
	require.ErrorIs(t, err, lease.ErrRetryable)
	require.Eventually(t, func() bool { return len(records(t, cli, "capped-do")) == 0 }, 5*time.Second, 10*time.Millisecond)
}

// A lease released before its cap ends as released, and the cap does
// nothing later, not even to the next acquisition under the same key.
func TestMaxHoldAfterRelease(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	l, err := c.Acquire(ctx, "early", lease.WithMaxHold(300*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	again, err := c.Acquire(ctx, "early")
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, again.Err(), "the first acquisition's cap touched the second")
	require.ErrorIs(t, l.Err(), lease.ErrReleased)
	require.NoError(t, again.Release(ctx))
}

// Invalid options are refused before anything is written.
func TestAcquireOptionErrors(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	for _, opt := range []lease.AcquireOption{lease.WithMaxHold(0), lease.WithMaxHold(-time.Second), nil} {
		_, err := c.Acquire(ctx, "opts", opt)
		require.ErrorIs(t, err, lease.ErrInvalidOption)
		require.False(t, errors.Is(err, lease.ErrRetryable))
		_, err = c.TryAcquire(ctx, "opts", opt)
		require.ErrorIs(t, err, lease.ErrInvalidOption)
	}
	resp, err := cli.Get(ctx, lease.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count)
}

// Metadata goes with the record: the holder reads it back, Inspect shows
// it, Reenter and Release keep it; bad metadata is refused with nothing
// written.
func TestMetadata(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	const md = "job 4711: nightly #reindex of tenant/42 ✓"
	l, err := c.Acquire(ctx, "noted", lease.WithMetadata(md))
	require.NoError(t, err)
	assert.Equal(t, md, l.Metadata())
	require.NoError(t, l.Reenter(ctx))
	info, err := newAdmin(t, cli).Inspect(ctx, "noted")
	require.NoError(t, err)
	require.NotNil(t, info.Holder)
	assert.Equal(t, md, info.Holder.Value)
	assert.Equal(t, 2, info.Holder.Holds)
	require.NoError(t, l.Release(ctx))
	assert.Equal(t, md, l.Metadata())
	require.NoError(t, l.Release(ctx))

	plain, err := c.Acquire(ctx, "plain")
	require.NoError(t, err)
	assert.Empty(t, plain.Metadata())
	require.NoError(t, plain.Release(ctx))

	for _, bad := range []string{strings.Repeat("x", lease.MaxMetadataLen+1), "line\nbreak", "\xff", "bell\a"} {
		_, err := c.Acquire(ctx, "bad-md", lease.WithMetadata(bad))
		require.ErrorIs(t, err, lease.ErrInvalidOption, "%q", bad)
	}
	assert.Empty(t, records(t, cli, "bad-md"))
	_, err = c.Acquire(ctx, "max-md", lease.WithMetadata(strings.Repeat("x", lease.MaxMetadataLen)))
	require.NoError(t, err)
}

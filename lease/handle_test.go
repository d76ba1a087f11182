package lease_test

import (
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every held type answers the Handle contract the same way: its names,
// acquisition time, tokens, validity within a TTL less the margin, and,
// once released, ErrReleased, a closed Done and a zero ValidUntil.
func TestHandleContract(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	const ttl, margin = 3 * time.Second, 500 * time.Millisecond
	c := newClient(t, cli, lease.WithTTL(ttl), lease.WithSafetyMargin(margin))
	ctx := ctxT(t, 20*time.Second)

	before := time.Now()
	l, err := c.Acquire(ctx, "h-lease")
	require.NoError(t, err)
	sem, err := c.Semaphore("h-pool", 2)
	require.NoError(t, err)
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	set, err := c.AcquireAll(ctx, []string{"h-a", "h-b"})
	require.NoError(t, err)
	el, err := c.Election("h-election")
	require.NoError(t, err)
	term, err := el.Campaign(ctx, "v")
	require.NoError(t, err)
	after := time.Now()

	cases := []struct {
		h      lease.Handle
		names  []string
		fences []fence.Token
	}{
		{l, []string{"h-lease"}, []fence.Token{l.Fence()}},
		{p, []string{"h-pool"}, nil},
		{set, []string{"h-a", "h-b"}, []fence.Token{set.Fence("h-a"), set.Fence("h-b")}},
		{term, []string{"h-election"}, []fence.Token{term.Fence()}},
	}
	for _, tc := range cases {
		h := tc.h
		assert.Equal(t, tc.names, h.Names())
		assert.Equal(t, tc.fences, h.Fences(), "%v", tc.names)
		at := h.Acquired()
		assert.False(t, at.Before(before) || at.After(after), "%v: Acquired %v outside the acquisition", tc.names, at)
		until := h.ValidUntil()
		assert.False(t, until.Before(before.Add(ttl-margin)), "%v: ValidUntil %v before the grant plus TTL less margin", tc.names, until)
		assert.False(t, until.After(time.Now().Add(ttl-margin)), "%v: ValidUntil %v after now plus TTL less margin", tc.names, until)
		assert.NoError(t, h.Err())
		require.NoError(t, h.Renew(ctx), "%v", tc.names)
	}
	for _, tc := range cases {
		h := tc.h
		require.NoError(t, h.Release(ctx), "%v", tc.names)
		assert.ErrorIs(t, h.Err(), lease.ErrReleased, "%v: Err right after Release", tc.names)
		assert.True(t, h.ValidUntil().IsZero(), "%v: ValidUntil after Release", tc.names)
		select {
		case <-h.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%v: Done open after Release", tc.names)
		}
		select {
		case <-h.ReleaseRequested():
			t.Errorf("%v: ReleaseRequested closed though nobody asked", tc.names)
		default:
		}
	}
	// The deprecated names answer as the regular ones.
	assert.Equal(t, term.Acquired(), term.Since())
	assert.Equal(t, set.Fences()[0].Revision, set.Revision())
	assert.ErrorIs(t, term.Resign(ctx), lease.ErrNotFound, "resigning a released term")
}

// A Set's ReleaseRequested closes when any of its locks is asked for.
func TestSetReleaseRequested(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	holder := newClient(t, cli)

	set, err := holder.AcquireAll(ctx, []string{"ask-a", "ask-b"})
	require.NoError(t, err)
	asked := set.ReleaseRequested()
	select {
	case <-asked:
		t.Fatal("ReleaseRequested closed before anyone asked")
	default:
	}
	require.NoError(t, newAdmin(t, cli).RequestRelease(ctx, "ask-b", set.Fence("ask-b").Revision))
	select {
	case <-asked:
	case <-time.After(5 * time.Second):
		t.Fatal("the set's holder did not hear the request")
	}
	assert.NoError(t, set.Err(), "a request takes nothing away")
	require.NoError(t, set.Release(ctx))
}

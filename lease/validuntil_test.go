package lease_test

import (
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ValidUntil is the session's validity deadline: within a TTL less the
// margin of the acquisition, moved forward by Renew, zero once ended.
func TestValidUntil(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	const ttl, margin = 3 * time.Second, 500 * time.Millisecond
	c := newClient(t, cli, lease.WithTTL(ttl), lease.WithSafetyMargin(margin))
	ctx := ctxT(t, 20*time.Second)

	before := time.Now()
	l, err := c.Acquire(ctx, "valid")
	require.NoError(t, err)
	first := l.ValidUntil()
	assert.False(t, first.Before(before.Add(ttl-margin)), "ValidUntil %v before the grant plus TTL less margin", first)
	assert.False(t, first.After(time.Now().Add(ttl-margin)), "ValidUntil %v after now plus TTL less margin", first)

	time.Sleep(50 * time.Millisecond)
	require.NoError(t, l.Renew(ctx))
	assert.True(t, l.ValidUntil().After(first), "Renew did not move ValidUntil forward")

	require.NoError(t, l.Release(ctx))
	assert.True(t, l.ValidUntil().IsZero(), "ValidUntil of a released lease: %v", l.ValidUntil())
}

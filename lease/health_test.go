package lease_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/spantest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
)

// Spans, recorded on the caller's provider, carry digests and revisions,
// never an owner token.
func TestSpans(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	rec := spantest.NewRecorder()
	tp := rec
	c := newClient(t, cli, lease.WithTracerProvider(tp))
	ctx := ctxT(t, 20*time.Second)

	l, err := c.Acquire(ctx, "traced")
	require.NoError(t, err)
	token := strings.Split(storedValue(t, cli, "traced"), "#")[0]
	require.NoError(t, l.Renew(ctx))
	require.NoError(t, l.Reenter(ctx))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
	_, err = c.TryAcquire(ctx, "traced")
	require.NoError(t, err)
	_, err = newClient(t, cli).TryAcquire(ctx, "traced")
	require.ErrorIs(t, err, lease.ErrHeld)

	var names []string
	for _, s := range rec.GetSpans() {
		names = append(names, s.Name)
		attrs := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes {
			attrs[a.Key] = a.Value
			assert.NotContains(t, fmt.Sprint(a.Value.AsInterface()), token, "span %s attribute %s", s.Name, a.Key)
		}
		assert.NotContains(t, s.Status.Description, token)
		assert.NotContains(t, attrs["fencekit.lock"].AsString(), "traced", "the lock name is hashed")
		assert.NotEmpty(t, attrs["fencekit.outcome"].AsString(), s.Name)
	}
	assert.Equal(t, []string{"fencekit.lease.acquire", "fencekit.lease.renew", "fencekit.lease.reenter",
		"fencekit.lease.release", "fencekit.lease.release", "fencekit.lease.acquire"}, names[:6])
	first := rec.GetSpans()[0]
	var fenceAttr int64
	for _, a := range first.Attributes {
		if a.Key == "fencekit.fence" {
			fenceAttr = a.Value.AsInt64()
		}
	}
	assert.Equal(t, l.Fence().Revision, fenceAttr)

	_, err = lease.New(cli, lease.WithTracerProvider(nil))
	require.Error(t, err)
}

// Healthy follows the renewals: failing for more than a third of the TTL
// is unhealthy, and recovered renewals are healthy again.
func TestHealthy(t *testing.T) {
	px := newProxied(t, lease.WithTTL(3*time.Second))
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, px.c.Healthy(), "nothing held yet")
	_, err := px.c.Acquire(ctx, "h")
	require.NoError(t, err)
	require.NoError(t, px.c.Healthy())
	px.p.Blackhole()
	require.Eventually(t, func() bool { return px.c.Healthy() != nil }, 5*time.Second, 20*time.Millisecond)
	px.p.Resume()
	px.p.ResetConns()
	// The session may have ended at its deadline meanwhile; either way the
	// Client is healthy again once renewals succeed or nothing is held.
	require.Eventually(t, func() bool { return px.c.Healthy() == nil }, 10*time.Second, 20*time.Millisecond)
}

// Closing the etcd client before the lease.Client is reported, not hidden.
func TestCloseAfterEtcdClientIsAnError(t *testing.T) {
	cl := etcdtest.Start(t)
	cli, err := cl.Client()
	require.NoError(t, err)
	c, err := lease.New(cli)
	require.NoError(t, err)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.Acquire(ctx, "order")
	require.NoError(t, err)
	require.NoError(t, cli.Close())
	require.ErrorIs(t, c.Healthy(), lease.ErrEtcdClosed)
	err = c.Close()
	require.ErrorIs(t, err, lease.ErrEtcdClosed)
	require.ErrorIs(t, err, lease.ErrClosed)
	<-l.Done()
	require.ErrorIs(t, l.Err(), lease.ErrClosed)
}

// The TTL error names the ways out.
func TestTTLTooShortNamesTheFix(t *testing.T) {
	cl := etcdtest.Start(t)
	c := newClient(t, etcdtest.Client(t, cl), lease.WithTTL(time.Second), lease.WithSafetyMargin(100*time.Millisecond))
	_, err := c.Acquire(ctxT(t, 10*time.Second), "short")
	if err == nil {
		t.Skip("this etcd accepts a 1 s TTL")
	}
	require.ErrorIs(t, err, lease.ErrTTLTooShort)
	assert.Contains(t, err.Error(), "lease.WithTTL(")
	assert.Contains(t, err.Error(), "--election-timeout")
}

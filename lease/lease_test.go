package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/admin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.EtcdLeaks...)
}

func newClient(t *testing.T, cli *clientv3.Client, opts ...lease.Option) *lease.Client {
	t.Helper()
	c, err := lease.New(cli, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// newAdmin returns the operator tools over the default prefix through cli.
func newAdmin(t *testing.T, cli *clientv3.Client) *admin.Admin {
	t.Helper()
	a, err := admin.New(cli, lease.DefaultPrefix)
	require.NoError(t, err)
	return a
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// records returns the lock records of name under the default prefix, in
// queue (creation) order: key order follows session ids, which are not
// monotonic across the members of a cluster.
func records(t *testing.T, cli *clientv3.Client, name string) []string {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 5*time.Second), lease.DefaultPrefix+name+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	require.NoError(t, err)
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

func waitRecords(t *testing.T, cli *clientv3.Client, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(records(t, cli, name)) == n }, 10*time.Second, 2*time.Millisecond)
}

// cycleLater acquires name through c in a goroutine and releases it at
// once; the channel delivers the first error, or nil.
func cycleLater(ctx context.Context, c *lease.Client, name string) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, name)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	return got
}

// requireAdmitted fails t with msg unless got delivers within d, and
// unless what it delivers is nil.
func requireAdmitted(t *testing.T, got <-chan error, d time.Duration, msg string) {
	t.Helper()
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(d):
		t.Fatal(msg)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestAcquireReleaseFenceGrows(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	a := newClient(t, cli)
	b := newClient(t, cli)
	ctx := ctxT(t, 20*time.Second)

	var last int64
	for i := range 6 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Acquire(ctx, "orders")
		require.NoError(t, err)
		f := l.Fence()
		assert.Equal(t, "orders", f.Lock)
		assert.Greater(t, f.Revision, last, "a new acquisition must get a strictly higher token")
		last = f.Revision

		// The token is the creation revision of the record.
		keys := records(t, cli, "orders")
		require.Len(t, keys, 1)
		resp, err := cli.Get(ctx, keys[0])
		require.NoError(t, err)
		assert.Equal(t, f.Revision, resp.Kvs[0].CreateRevision)
		assert.NotContains(t, l.String(), string(resp.Kvs[0].Value[:10]), "String must not show the owner token")

		require.NoError(t, l.Release(ctx))
		assert.True(t, closed(l.Done()))
		assert.ErrorIs(t, l.Err(), lease.ErrReleased)
		assert.Empty(t, records(t, cli, "orders"))
	}
}

func TestTryAcquire(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	a := newClient(t, cli)
	b := newClient(t, cli)
	ctx := ctxT(t, 20*time.Second)

	l, err := a.TryAcquire(ctx, "job")
	require.NoError(t, err)
	_, err = b.TryAcquire(ctx, "job")
	require.ErrorIs(t, err, lease.ErrHeld)
	// A second TryAcquire from the same Client is another acquisition: held.
	_, err = a.TryAcquire(ctx, "job")
	require.ErrorIs(t, err, lease.ErrHeld)
	assert.Len(t, records(t, cli, "job"), 1, "a failed TryAcquire leaves nothing behind")

	require.NoError(t, l.Release(ctx))
	l2, err := b.TryAcquire(ctx, "job")
	require.NoError(t, err)
	assert.Greater(t, l2.Fence().Revision, l.Fence().Revision)
	require.NoError(t, l2.Release(ctx))
}

func TestSecondReleaseIsAnError(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	c := newClient(t, cli)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.Acquire(ctx, "x")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	err = l.Release(ctx)
	require.ErrorIs(t, err, lease.ErrNotFound)

	// Once someone else holds it, the stale release says so and deletes nothing.
	l2, err := c.Acquire(ctx, "x")
	require.NoError(t, err)
	require.ErrorIs(t, l.Release(ctx), lease.ErrNotOwner)
	require.ErrorIs(t, l.Renew(ctx), lease.ErrNotOwner)
	assert.Len(t, records(t, cli, "x"), 1)
	assert.NoError(t, l2.Err())
	require.NoError(t, l2.Release(ctx))

	var nilLease *lease.Lease
	assert.Error(t, nilLease.Release(ctx))
	assert.Error(t, nilLease.Renew(ctx))
	assert.Error(t, nilLease.Reenter(ctx))
}

func TestReentrancy(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	c := newClient(t, cli)
	other := newClient(t, cli)
	ctx := ctxT(t, 20*time.Second)

	l, err := c.Acquire(ctx, "r")
	require.NoError(t, err)
	tok := l.Fence()
	require.NoError(t, l.Reenter(ctx))
	require.NoError(t, l.Reenter(ctx))
	assert.Equal(t, 3, l.Holds())
	assert.Equal(t, tok, l.Fence(), "reentry keeps the fencing token")

	// Through a context, as nested code would.
	inner, ok := lease.FromContext(lease.NewContext(ctx, l), "r")
	require.True(t, ok)
	require.NoError(t, inner.Reenter(ctx))
	assert.Equal(t, 4, l.Holds())
	_, ok = lease.FromContext(ctx, "r")
	assert.False(t, ok)

	for want := 3; want >= 1; want-- {
		require.NoError(t, l.Release(ctx))
		assert.Equal(t, want, l.Holds())
		assert.NoError(t, l.Err(), "still held")
		_, err := other.TryAcquire(ctx, "r")
		require.ErrorIs(t, err, lease.ErrHeld)
	}
	require.NoError(t, l.Release(ctx))
	assert.ErrorIs(t, l.Err(), lease.ErrReleased)
	assert.Empty(t, records(t, cli, "r"))
	require.ErrorIs(t, l.Release(ctx), lease.ErrNotFound)
	require.ErrorIs(t, l.Reenter(ctx), lease.ErrReleased)
}

func TestFIFOAcrossClients(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	holder := newClient(t, cli)
	first, err := holder.Acquire(ctx, "q")
	require.NoError(t, err)

	const n = 5
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		c := newClient(t, cli)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, "q")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		}()
		waitRecords(t, cli, "q", i+2) // enqueue strictly one after another
	}
	require.NoError(t, first.Release(ctx))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

func TestCancelledAcquireLeavesNothing(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	h, err := newClient(t, cli).Acquire(ctx, "c")
	require.NoError(t, err)

	w := newClient(t, cli)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = w.Acquire(wctx, "c")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	waitRecords(t, cli, "c", 1) // the waiter's record is removed, in the background

	// The queue is not blocked: the next waiter gets it as soon as h releases.
	done := cycleLater(ctx, w, "c")
	waitRecords(t, cli, "c", 2)
	require.NoError(t, h.Release(ctx))
	requireAdmitted(t, done, 5*time.Second, "next waiter did not acquire")
}

func TestWaiterStopsWhenItsRecordGoes(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	h, err := newClient(t, cli).Acquire(ctx, "w")
	require.NoError(t, err)
	defer h.Release(ctx)

	t.Run("record deleted", func(t *testing.T) {
		w := newClient(t, cli)
		errc := make(chan error, 1)
		go func() { _, err := w.Acquire(ctx, "w"); errc <- err }()
		waitRecords(t, cli, "w", 2)
		keys := records(t, cli, "w")
		_, err := cli.Delete(ctx, keys[1])
		require.NoError(t, err)
		select {
		case err := <-errc:
			require.ErrorIs(t, err, lease.ErrKeyDeleted)
		case <-time.After(2 * time.Second):
			t.Fatal("waiter kept waiting after its record was deleted")
		}
	})
	t.Run("session revoked", func(t *testing.T) {
		w := newClient(t, cli)
		errc := make(chan error, 1)
		go func() { _, err := w.Acquire(ctx, "w"); errc <- err }()
		waitRecords(t, cli, "w", 2)
		keys := records(t, cli, "w")
		resp, err := cli.Get(ctx, keys[1])
		require.NoError(t, err)
		_, err = cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
		require.NoError(t, err)
		select {
		case err := <-errc:
			require.True(t, errors.Is(err, lease.ErrKeyDeleted) || errors.Is(err, lease.ErrSessionExpired), "got %v", err)
		case <-time.After(2 * time.Second):
			t.Fatal("waiter kept waiting after its session was revoked")
		}
	})
}

func heldRecord(t *testing.T, cli *clientv3.Client, name string) (string, clientv3.LeaseID) {
	keys := records(t, cli, name)
	require.Len(t, keys, 1)
	resp, err := cli.Get(context.Background(), keys[0])
	require.NoError(t, err)
	return keys[0], clientv3.LeaseID(resp.Kvs[0].Lease)
}

func TestLossIsSignalled(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	cases := []struct {
		name   string
		break_ func(key string, id clientv3.LeaseID)
		cause  []error
	}{
		{"deleted", func(key string, _ clientv3.LeaseID) { cli.Delete(ctx, key) }, []error{lease.ErrKeyDeleted}},
		{"overwritten", func(key string, _ clientv3.LeaseID) { cli.Put(ctx, key, "someone-else#1") }, []error{lease.ErrKeyOverwritten}},
		{"revoked", func(_ string, id clientv3.LeaseID) { cli.Revoke(ctx, id) }, []error{lease.ErrKeyDeleted, lease.ErrSessionExpired}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, cli)
			l, err := c.Acquire(ctx, "loss-"+tc.name)
			require.NoError(t, err)
			lctx, cancel := l.Context(ctx)
			defer cancel()
			key, id := heldRecord(t, cli, "loss-"+tc.name)
			start := time.Now()
			tc.break_(key, id)
			select {
			case <-l.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("Done did not close")
			}
			t.Logf("loss signalled after %v", time.Since(start))
			err = l.Err()
			require.ErrorIs(t, err, lease.ErrLost)
			var le *lease.LostError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, l.Fence(), le.Fence)
			matched := false
			for _, c := range tc.cause {
				matched = matched || errors.Is(err, c)
			}
			assert.True(t, matched, "cause %v", err)
			<-lctx.Done()
			assert.Equal(t, err, context.Cause(lctx))
			// The stale holder cannot re-create or extend anything.
			rerr := l.Renew(ctx)
			require.True(t, errors.Is(rerr, lease.ErrNotFound) || errors.Is(rerr, lease.ErrNotOwner) || errors.Is(rerr, lease.ErrLost), "got %v", rerr)
			if tc.name != "overwritten" {
				assert.Empty(t, records(t, cli, "loss-"+tc.name), "a stale renew must not re-create the record")
			}
		})
	}
}

// TestStaleHolderStory is SPEC principle 1: A pauses past its TTL, B takes
// the lock, and A's late release and renew cannot touch B's lock.
func TestStaleHolderStory(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	p, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	require.NoError(t, err)
	defer p.Close()
	viaProxy := etcdtest.Client(t, cl, p.URL())
	ctx := ctxT(t, 30*time.Second)

	a := newClient(t, viaProxy, lease.WithTTL(time.Second))
	b := newClient(t, direct, lease.WithTTL(time.Second))
	la, err := a.Acquire(ctx, "story")
	require.NoError(t, err)

	p.Pause() // A's process stops talking to etcd: no more renewals
	var aDone time.Time
	doneSeen := make(chan struct{})
	go func() { <-la.Done(); aDone = time.Now(); close(doneSeen) }()

	lb, err := b.Acquire(ctx, "story")
	require.NoError(t, err)
	bAcquired := time.Now()
	<-doneSeen
	assert.True(t, aDone.Before(bAcquired), "A's Done (%v) must close before B acquires (%v)", aDone, bAcquired)
	t.Logf("A's Done closed %v before B acquired", bAcquired.Sub(aDone))
	require.ErrorIs(t, la.Err(), lease.ErrDeadline)
	assert.Greater(t, lb.Fence().Revision, la.Fence().Revision)

	p.Resume()
	require.ErrorIs(t, settle(ctx, la.Release), lease.ErrNotOwner)
	require.ErrorIs(t, settle(ctx, la.Renew), lease.ErrNotOwner)
	require.NoError(t, lb.Err(), "B still holds")
	require.NoError(t, lb.Renew(ctx))

	require.NoError(t, lb.Release(ctx))
	require.ErrorIs(t, la.Release(ctx), lease.ErrNotFound)
}

func TestDoCancelsWorkOnLoss(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	c := newClient(t, cli)
	ctx := ctxT(t, 20*time.Second)

	err := c.Do(ctx, "do", func(ctx context.Context, l *lease.Lease) error {
		got, ok := lease.FromContext(ctx, "do")
		if !ok || got != l {
			return errors.New("lease not in context")
		}
		key, _ := heldRecord(t, cli, "do")
		if _, err := cli.Delete(ctx, key); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(3 * time.Second):
			return errors.New("work not cancelled")
		}
	})
	require.ErrorIs(t, err, lease.ErrLost)
	require.ErrorIs(t, err, lease.ErrKeyDeleted)

	require.NoError(t, c.Do(ctx, "do", func(context.Context, *lease.Lease) error { return nil }))
	assert.Empty(t, records(t, cli, "do"))
	boom := errors.New("boom")
	require.ErrorIs(t, c.Do(ctx, "do", func(context.Context, *lease.Lease) error { return boom }), boom)
	assert.Empty(t, records(t, cli, "do"))
}

func TestCloseWhileWaiting(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	h, err := newClient(t, cli).Acquire(ctx, "busy")
	require.NoError(t, err)
	defer h.Release(ctx)

	c, err := lease.New(cli)
	require.NoError(t, err)
	held, err := c.Acquire(ctx, "mine")
	require.NoError(t, err)
	const n = 20
	errc := make(chan error, n)
	for range n {
		go func() { _, err := c.Acquire(ctx, "busy"); errc <- err }()
	}
	waitRecords(t, cli, "busy", n+1)
	require.NoError(t, c.Close())
	for range n {
		select {
		case err := <-errc:
			require.ErrorIs(t, err, lease.ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("waiter did not return after Close")
		}
	}
	assert.ErrorIs(t, held.Err(), lease.ErrClosed)
	assert.Empty(t, records(t, cli, "mine"), "Close releases what it holds")
	assert.Len(t, records(t, cli, "busy"), 1)
	_, err = c.Acquire(ctx, "busy")
	require.ErrorIs(t, err, lease.ErrClosed)
	require.NoError(t, c.Close())
}

// TestLostReplyIsNotAppliedTwice drops etcd's reply to a Reenter: the
// retry must find the first attempt applied and not add a second hold.
func TestLostReplyIsNotAppliedTwice(t *testing.T) {
	px := newProxied(t)
	p, direct, c := px.p, px.direct, px.c
	ctx := ctxT(t, 30*time.Second)
	l, err := c.Acquire(ctx, "lost-reply")
	require.NoError(t, err)

	p.DropReplies()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = l.Reenter(rctx)
	cancel()
	require.Error(t, err)
	require.NotErrorIs(t, err, lease.ErrNotOwner)
	p.Resume()
	p.ResetConns()

	key, _ := heldRecord(t, direct, "lost-reply")
	resp, err := direct.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(resp.Kvs[0].Value), "#2"), "the first attempt reached etcd")

	require.Eventually(t, func() bool { return l.Reenter(ctx) == nil }, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, 2, l.Holds(), "the retry must not add a second hold")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
	assert.Empty(t, records(t, direct, "lost-reply"))
}

func TestValidation(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	_, err := lease.New(nil)
	require.Error(t, err)
	for _, o := range []lease.Option{lease.WithTTL(0), lease.WithTTL(-time.Second), lease.WithTTL(2 * time.Hour),
		lease.WithPrefix(""), lease.WithLogger(nil), lease.WithInstanceID("bad id"), lease.WithSafetyMargin(0), nil} {
		_, err := lease.New(cli, o)
		require.Error(t, err)
	}
	_, err = lease.New(cli, lease.WithTTL(time.Second), lease.WithSafetyMargin(600*time.Millisecond))
	require.Error(t, err, "margin must be less than half the TTL")

	c := newClient(t, cli)
	ctx := ctxT(t, 10*time.Second)
	for _, name := range []string{"", "a/b", strings.Repeat("x", lease.MaxNameLen+1), "bad\x00", "bad\n", "bad\u0085", string([]byte{0xff})} {
		_, err := c.Acquire(ctx, name)
		require.ErrorIs(t, err, lease.ErrInvalidName, "name %q", name)
		_, err = c.TryAcquire(ctx, name)
		require.ErrorIs(t, err, lease.ErrInvalidName)
	}
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count, "bad input changes nothing")
}

func TestLogsCarryDigestsOnly(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	c := newClient(t, cli, lease.WithLogger(logger), lease.WithMetrics(reg))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Acquire(ctx, "secret-lock")
	require.NoError(t, err)
	key, _ := heldRecord(t, cli, "secret-lock")
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	stored := string(resp.Kvs[0].Value)
	tok := stored[:strings.LastIndexByte(stored, '#')]
	require.NoError(t, l.Reenter(ctx))
	require.NoError(t, l.Renew(ctx))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
	require.Error(t, l.Release(ctx))

	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"lease acquired", "lease reenter", "lease renew", "lease release", l.OwnerDigest(), "not_found"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, tok, "logs must never carry the owner token")
	fams, err := reg.Gather()
	require.NoError(t, err)
	metricsText := fmt.Sprint(fams)
	assert.Contains(t, metricsText, "fencekit_lease_results_total")
	assert.NotContains(t, metricsText, tok, "metrics must never carry the owner token")
	assert.NotContains(t, metricsText, "secret-lock", "metrics carry no lock names")
	assert.NotContains(t, out, "secret-lock", "logs carry a hash of the lock name")
	assert.NotContains(t, l.String(), tok)
	assert.NotContains(t, fmt.Sprintf("%v %+v %#v %s", l, l, l, l), tok)
	assert.NotContains(t, l.Err().Error(), tok)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// settle retries op while its outcome is unknown (a transport error), as
// the API documents is safe, and returns the first known outcome.
func settle(ctx context.Context, op func(context.Context) error) error {
	for {
		err := op(ctx)
		if err == nil || errors.Is(err, lease.ErrNotOwner) || errors.Is(err, lease.ErrNotFound) ||
			errors.Is(err, lease.ErrLost) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMetrics(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	reg := prometheus.NewRegistry()
	c := newClient(t, cli, lease.WithMetrics(reg))
	c2 := newClient(t, cli, lease.WithMetrics(reg)) // shares the collectors
	ctx := ctxT(t, 10*time.Second)

	l, err := c.Acquire(ctx, "m")
	require.NoError(t, err)
	_, err = c2.TryAcquire(ctx, "m")
	require.ErrorIs(t, err, lease.ErrHeld)
	require.NoError(t, l.Reenter(ctx))
	require.NoError(t, l.Renew(ctx))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
	require.Error(t, l.Release(ctx)) // duplicate: not found

	l2, err := c2.Acquire(ctx, "m")
	require.NoError(t, err)
	key, _ := heldRecord(t, cli, "m")
	_, err = cli.Delete(ctx, key)
	require.NoError(t, err)
	<-l2.Done()

	count := func(name string, labels ...string) float64 { return metricValue(t, reg, name, labels...) }
	assert.Equal(t, 2.0, count("fencekit_lease_acquisitions_total", "outcome", "acquired"))
	assert.Equal(t, 1.0, count("fencekit_lease_acquisitions_total", "outcome", "held"))
	assert.Equal(t, 1.0, count("fencekit_lease_results_total", "op", "reenter", "outcome", "done"))
	assert.Equal(t, 1.0, count("fencekit_lease_results_total", "op", "renew", "outcome", "done"))
	assert.Equal(t, 2.0, count("fencekit_lease_results_total", "op", "release", "outcome", "done"))
	assert.Equal(t, 1.0, count("fencekit_lease_results_total", "op", "release", "outcome", "not_found"))
	assert.Equal(t, 1.0, count("fencekit_lease_duplicate_releases_total"))
	assert.Equal(t, 1.0, count("fencekit_lease_losses_total", "cause", "deleted"))
	assert.Equal(t, 2.0, count("fencekit_lease_hold_seconds"))
	assert.Equal(t, 2.0, count("fencekit_lease_acquire_wait_seconds"))
}

// metricValue returns a counter's value, or a histogram's sample count, for
// the series of family name with exactly the given label pairs.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	var kv []string
	for i := 0; i+1 < len(labels); i += 2 {
		kv = append(kv, labels[i]+"="+labels[i+1])
	}
	return promtest.Values(t, reg, name)[strings.Join(kv, ",")]
}

// TestLostAcquireReplyLeavesNoOrphan drops etcd's reply to an Acquire's
// write: the caller gives up, the record it may have written cannot be
// deleted at that moment, and the Client deletes it in the background once
// etcd answers again, so it never blocks the queue.
func TestLostAcquireReplyLeavesNoOrphan(t *testing.T) {
	px := newProxied(t, lease.WithTTL(3*time.Second))
	p, direct, c := px.p, px.direct, px.c
	ctx := ctxT(t, 30*time.Second)

	// Grant the session first, so only the record's write is in flight.
	l, err := c.Acquire(ctx, "warm")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	p.DropReplies()
	errc := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.Acquire(actx, "orphan")
		errc <- err
	}()
	waitRecords(t, direct, "orphan", 1) // the write reached etcd, its reply did not
	p.Pause()                           // and the Client's clean-up cannot reach etcd now
	require.ErrorIs(t, <-errc, context.DeadlineExceeded)
	assert.Len(t, records(t, direct, "orphan"), 1, "the record outlived the failed Acquire")
	p.Resume()
	p.ResetConns()

	other := newClient(t, direct)
	got, err := other.Acquire(ctx, "orphan") // waits for the background delete
	require.NoError(t, err)
	require.NoError(t, got.Release(ctx))
	assert.Empty(t, records(t, direct, "orphan"))
}

// TestAcquireAfterExternalRevoke: once an operator revokes the Client's
// session, the next Acquire gets a new session instead of failing.
func TestAcquireAfterExternalRevoke(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	c := newClient(t, cli, lease.WithTTL(5*time.Second))
	ctx := ctxT(t, 20*time.Second)
	for i := range 3 {
		l, err := c.Acquire(ctx, "revoked")
		require.NoError(t, err, "acquisition %d", i)
		_, id := heldRecord(t, cli, "revoked")
		_, err = cli.Revoke(ctx, id)
		require.NoError(t, err)
		<-l.Done()
		require.ErrorIs(t, l.Err(), lease.ErrLost)
	}
}

// TestTTLBelowServerMinimum: etcd with default timing grants no lease
// shorter than 2 s; asking for 1 s is refused with a typed error and
// leaves nothing behind.
func TestTTLBelowServerMinimum(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	cl := etcdtest.StartConfig(t, etcdproc.Config{TickInterval: 100 * time.Millisecond, ElectionTimeout: time.Second, NoFsync: true})
	cli := etcdtest.Client(t, cl)
	c := newClient(t, cli, lease.WithTTL(time.Second))
	_, err := c.Acquire(ctx, "short")
	require.ErrorIs(t, err, lease.ErrTTLTooShort)
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Empty(t, leases.Leases, "the granted session is revoked")
	assert.Empty(t, records(t, cli, "short"))

	ok := newClient(t, cli, lease.WithTTL(2*time.Second))
	l, err := ok.Acquire(ctx, "short")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// TestRecordKeysAreReused: one Client acquiring a lock again and again
// writes the same record key each time (etcd's key index for the lock does
// not grow with every acquisition), and the watch events of the earlier
// records under that key do not disturb the later ones: under contention
// every acquisition gets a higher token and holders never overlap.
func TestRecordKeysAreReused(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 60*time.Second)
	a := newClient(t, cli)

	var keys []string
	for range 5 {
		l, err := a.Acquire(ctx, "reuse")
		require.NoError(t, err)
		key, _ := heldRecord(t, cli, "reuse")
		keys = append(keys, key)
		require.NoError(t, l.Release(ctx))
	}
	for _, k := range keys[1:] {
		assert.Equal(t, keys[0], k)
	}

	b := newClient(t, cli)
	var (
		mu      sync.Mutex
		inside  int
		last    int64
		wg      sync.WaitGroup
		overlap bool
	)
	for _, c := range []*lease.Client{a, b, a, b} { // two acquisitions per Client at a time
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				l, err := c.Acquire(ctx, "reuse")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				overlap = overlap || inside > 1
				if l.Fence().Revision <= last {
					t.Errorf("token %d not above %d", l.Fence().Revision, last)
				}
				last = l.Fence().Revision
				mu.Unlock()
				if err := l.Err(); err != nil {
					t.Errorf("lease ended right after Acquire: %v", err)
				}
				mu.Lock()
				inside--
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.False(t, overlap, "two holders at once")
	resp, err := cli.Get(ctx, lease.DefaultPrefix+"reuse/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs)
}

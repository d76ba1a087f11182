package lease_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// proxied is a Client whose every request and watch go through a fault
// proxy, beside a direct etcd client to look at what really happened.
type proxied struct {
	p      *faultproxy.Proxy
	direct *clientv3.Client
	c      *lease.Client
	reg    *prometheus.Registry
}

func newProxied(t *testing.T, opts ...lease.Option) *proxied {
	t.Helper()
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	p, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	reg := prometheus.NewRegistry()
	c := newClient(t, etcdtest.Client(t, cl, p.URL()), append([]lease.Option{lease.WithMetrics(reg)}, opts...)...)
	return &proxied{p: p, direct: direct, c: c, reg: reg}
}

// lostReply runs call while the proxy forwards requests but drops every
// reply, and checks that the caller was told the outcome is unknown. The
// connection is then reset, so the next requests get through.
func (px *proxied) lostReply(t *testing.T, call func(context.Context) error) {
	t.Helper()
	px.p.DropReplies()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := call(ctx)
	cancel()
	require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
	px.p.Resume()
	px.p.ResetConns()
}

// until retries call while its outcome is unknown (the client reconnects).
func until(t *testing.T, ctx context.Context, call func(context.Context) error) error {
	t.Helper()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := call(cctx)
		cancel()
		if !errors.Is(err, lease.ErrOutcomeUnknown) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func storedValue(t *testing.T, cli *clientv3.Client, name string) string {
	t.Helper()
	key, _ := heldRecord(t, cli, name)
	resp, err := cli.Get(context.Background(), key)
	require.NoError(t, err)
	return string(resp.Kvs[0].Value)
}

// A Release or Reenter whose reply was lost, then a Renew, then the retry
// the docs advise: the retry must not apply a second time.
func TestRetryAfterLostReplyAndRenewAppliesOnce(t *testing.T) {
	t.Run("release", func(t *testing.T) {
		px := newProxied(t)
		ctx := ctxT(t, 30*time.Second)
		l, err := px.c.Acquire(ctx, "r")
		require.NoError(t, err)
		require.NoError(t, l.Reenter(ctx))

		px.lostReply(t, l.Release)
		require.True(t, strings.HasSuffix(storedValue(t, px.direct, "r"), "#1"), "the Release reached etcd")
		require.NoError(t, until(t, ctx, l.Renew))
		require.NoError(t, until(t, ctx, l.Release), "the retry finds the first try applied")

		assert.Equal(t, 1, l.Holds())
		assert.NoError(t, l.Err())
		require.Len(t, records(t, px.direct, "r"), 1, "one hold is left: the record stays")
		_, err = newClient(t, px.direct).TryAcquire(ctx, "r")
		require.ErrorIs(t, err, lease.ErrHeld)
		require.NoError(t, l.Release(ctx))
		assert.Empty(t, records(t, px.direct, "r"))
		assert.ErrorIs(t, l.Err(), lease.ErrReleased)
	})
	t.Run("reenter", func(t *testing.T) {
		px := newProxied(t)
		ctx := ctxT(t, 30*time.Second)
		l, err := px.c.Acquire(ctx, "r")
		require.NoError(t, err)

		px.lostReply(t, l.Reenter)
		require.True(t, strings.HasSuffix(storedValue(t, px.direct, "r"), "#2"), "the Reenter reached etcd")
		require.NoError(t, until(t, ctx, l.Renew))
		assert.Equal(t, 1, l.Holds(), "Renew does not settle the unknown Reenter")
		require.NoError(t, until(t, ctx, l.Reenter))
		assert.Equal(t, 2, l.Holds(), "the retry must not add a second hold")

		require.NoError(t, l.Release(ctx))
		require.NoError(t, l.Release(ctx))
		assert.Empty(t, records(t, px.direct, "r"), "two Releases free the lock")
	})
	t.Run("release then reenter", func(t *testing.T) {
		// A Reenter called instead of the retry finds out that the Release
		// applied, and adds its hold to what is stored.
		px := newProxied(t)
		ctx := ctxT(t, 30*time.Second)
		l, err := px.c.Acquire(ctx, "r")
		require.NoError(t, err)
		require.NoError(t, l.Reenter(ctx))
		px.lostReply(t, l.Release)
		require.NoError(t, until(t, ctx, l.Reenter))
		assert.Equal(t, 2, l.Holds())
		assert.True(t, strings.HasSuffix(storedValue(t, px.direct, "r"), "#2"))
	})
}

// A lost reply to the last hold's Release is a release, not a loss, with
// or without a waiter taking the lock meanwhile.
func TestLostLastReleaseIsARelease(t *testing.T) {
	for _, waiter := range []bool{false, true} {
		name := "alone"
		if waiter {
			name = "with waiter"
		}
		t.Run(name, func(t *testing.T) {
			px := newProxied(t)
			ctx := ctxT(t, 30*time.Second)
			l, err := px.c.Acquire(ctx, "last")
			require.NoError(t, err)
			got := make(chan *lease.Lease, 1)
			if waiter {
				other := newClient(t, px.direct)
				go func() {
					l2, err := other.Acquire(ctx, "last")
					if err != nil {
						l2 = nil
					}
					got <- l2
				}()
				waitRecords(t, px.direct, "last", 2)
			}

			px.lostReply(t, l.Release)
			if waiter {
				l2 := <-got
				require.NotNil(t, l2, "the waiter acquires once the record is gone")
				defer l2.Release(ctx)
			} else {
				// The watch, reconnected, sees the delete.
				select {
				case <-l.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("Done did not close after the record was deleted")
				}
				require.ErrorIs(t, l.Err(), lease.ErrReleased)
			}
			require.NoError(t, until(t, ctx, l.Release), "the retry reports the release")
			require.ErrorIs(t, l.Err(), lease.ErrReleased)
			assert.NotErrorIs(t, l.Err(), lease.ErrLost)
			assert.Zero(t, metricValue(t, px.reg, "fencekit_lease_losses_total"), "no loss is counted")
		})
	}
}

// Thousands of Acquires whose ctx ends within milliseconds, against a held
// lock: every one fails with ctx's error, and none leaves a record behind.
func TestShortDeadlineAcquiresLeaveNothing(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	ctx := ctxT(t, 120*time.Second)
	holder, err := newClient(t, direct).Acquire(ctx, "busy")
	require.NoError(t, err)

	const clients, workers, perWorker = 3, 8, 70 // 1680 Acquires
	var cs []*lease.Client
	for range clients {
		c := newClient(t, etcdtest.Client(t, cl))
		warm, err := c.Acquire(ctx, "warm") // grant the session first
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		cs = append(cs, c)
	}
	var (
		mu   sync.Mutex
		errs = map[string]int{}
		wg   sync.WaitGroup
	)
	for i := range clients * workers {
		c := cs[i%clients]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				d := 200*time.Microsecond + rand.N(2800*time.Microsecond)
				actx, cancel := context.WithTimeout(ctx, d)
				l, err := c.Acquire(actx, "busy")
				cancel()
				if l != nil {
					l.Release(ctx)
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					mu.Lock()
					errs[errString(err)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	assert.Empty(t, errs, "every Acquire fails with ctx's error")

	require.NoError(t, holder.Release(ctx))
	next := newClient(t, direct)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	l, err := next.Acquire(actx, "busy")
	cancel()
	require.NoError(t, err, "no abandoned record blocks the lock")
	require.NoError(t, l.Release(ctx))
	require.Eventually(t, func() bool { return len(records(t, direct, "busy")) == 0 }, 15*time.Second, 20*time.Millisecond,
		"records left: %v", records(t, direct, "busy"))
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// An outsider overwrites a holder's record while the holder is cut off,
// and etcd compacts the events away before it reconnects: the catch-up
// read must still see the overwrite.
func TestOverwriteAcrossCompactionIsALoss(t *testing.T) {
	px := newProxied(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := px.c.Acquire(ctx, "ow")
	require.NoError(t, err)
	key, _ := heldRecord(t, px.direct, "ow")

	px.p.Blackhole()
	_, err = px.direct.Put(ctx, key, "intruder", clientv3.WithIgnoreLease())
	require.NoError(t, err)
	resp, err := px.direct.Put(ctx, "unrelated", "x")
	require.NoError(t, err)
	_, err = px.direct.Compact(ctx, resp.Header.Revision)
	require.NoError(t, err)
	px.p.Resume()
	px.p.ResetConns()

	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the overwrite was never reported")
	}
	require.ErrorIs(t, l.Err(), lease.ErrLost)
	require.ErrorIs(t, l.Err(), lease.ErrKeyOverwritten)
}

// With etcd unreachable, a cancelled Acquire returns within its ctx and
// leaves the clean-up to the background.
func TestAcquireReturnsWithinCtxWhenEtcdIsDown(t *testing.T) {
	px := newProxied(t)
	ctx := ctxT(t, 30*time.Second)
	warm, err := px.c.Acquire(ctx, "warm") // the session exists
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	px.p.Blackhole()
	defer px.p.Resume()
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = px.c.Acquire(actx, "down")
	elapsed := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, elapsed, 1500*time.Millisecond, "Acquire overran its 1 s ctx")
	px.p.Resume()
	px.p.ResetConns()
	require.Eventually(t, func() bool { return len(records(t, px.direct, "down")) == 0 }, 15*time.Second, 20*time.Millisecond)
}

// A worker loop that retries on ErrRetryable keeps going when its session
// ends during the wait (a partition), and the error names the cause.
func TestDoErrorsAfterPartitionAreRetryable(t *testing.T) {
	px := newProxied(t, lease.WithTTL(2*time.Second))
	ctx := ctxT(t, 30*time.Second)
	holder, err := newClient(t, px.direct).Acquire(ctx, "part")
	require.NoError(t, err)
	defer holder.Release(ctx)

	errc := make(chan error, 1)
	go func() {
		errc <- px.c.Do(ctx, "part", func(context.Context, *lease.Lease) error { return nil })
	}()
	waitRecords(t, px.direct, "part", 2)
	px.p.Blackhole()
	defer px.p.Resume()
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not return after its session's deadline")
	}
	require.ErrorIs(t, err, lease.ErrRetryable)
	require.ErrorIs(t, err, lease.ErrDeadline)

	// A lease lost inside Do is retryable too; a ctx error is not.
	px.p.Resume()
	px.p.ResetConns()
	require.NoError(t, holder.Release(ctx))
	direct := newClient(t, px.direct)
	err = direct.Do(ctx, "part", func(lctx context.Context, l *lease.Lease) error {
		// Delete this holder's record (found by its fencing revision: the
		// partitioned Client's record may still be going away).
		resp, err := px.direct.Get(ctx, lease.DefaultPrefix+"part/", clientv3.WithPrefix())
		require.NoError(t, err)
		for _, kv := range resp.Kvs {
			if kv.CreateRevision == l.Fence().Revision {
				_, err := px.direct.Delete(ctx, string(kv.Key))
				require.NoError(t, err)
			}
		}
		<-lctx.Done()
		return context.Cause(lctx)
	})
	require.ErrorIs(t, err, lease.ErrRetryable)
	require.ErrorIs(t, err, lease.ErrKeyDeleted)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = direct.Do(cctx, "part", func(context.Context, *lease.Lease) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, lease.ErrRetryable)
}

// A session revoked by an outsider is reported as such, not as a deleted
// record, although the watch sees the records go first; and since its TTL
// had not run out, as revoked early (ErrRevokedEarly, and its metric).
func TestRevokedSessionIsReportedAsSessionExpired(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	reg := prometheus.NewRegistry()
	c := newClient(t, cli, lease.WithMetrics(reg))
	ctx := ctxT(t, 20*time.Second)
	a, err := c.Acquire(ctx, "rv-a")
	require.NoError(t, err)
	b, err := c.Acquire(ctx, "rv-b")
	require.NoError(t, err)
	_, id := heldRecord(t, cli, "rv-a")
	_, err = cli.Revoke(ctx, id)
	require.NoError(t, err)
	for _, l := range []*lease.Lease{a, b} {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("revoke not signalled")
		}
		require.ErrorIs(t, l.Err(), lease.ErrSessionExpired)
		require.ErrorIs(t, l.Err(), lease.ErrRevokedEarly)
		require.NotErrorIs(t, l.Err(), lease.ErrKeyDeleted)
	}
	assert.Equal(t, 1.0, metricValue(t, reg, "fencekit_lease_sessions_revoked_early_total"), "one session revoked early")

	// A record deleted by hand is still ErrKeyDeleted.
	l, err := c.Acquire(ctx, "rv-a")
	require.NoError(t, err)
	key, _ := heldRecord(t, cli, "rv-a")
	_, err = cli.Delete(ctx, key)
	require.NoError(t, err)
	<-l.Done()
	require.ErrorIs(t, l.Err(), lease.ErrKeyDeleted)
}

// A record that no session keeps (an outsider's plain Put) blocks the lock
// for good; a waiter stuck behind it says so in a log and a metric.
func TestForeignRecordIsReported(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	reg := prometheus.NewRegistry()
	var (
		buf bytes.Buffer
		mu  sync.Mutex
	)
	logw := &lockedWriter{w: &buf, mu: &mu}
	c := newClient(t, cli, lease.WithTTL(time.Second), lease.WithMetrics(reg),
		lease.WithLogger(slog.New(slog.NewJSONHandler(logw, nil))))
	ctx := ctxT(t, 20*time.Second)
	_, err := cli.Put(ctx, lease.DefaultPrefix+"foreign/outsider", "not a lock record")
	require.NoError(t, err)

	actx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	_, err = c.Acquire(actx, "foreign")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, metricValue(t, reg, "fencekit_lease_foreign_records_total"), 1.0)
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, buf.String(), "no session keeps")
	assert.Contains(t, buf.String(), "foreign/outsider")
}

// The context of a lease carries its fencing token, for guard.Transport
// and the gRPC interceptors.
func TestLeaseContextCarriesFence(t *testing.T) {
	cl := etcdtest.Start(t)
	c := newClient(t, etcdtest.Client(t, cl))
	ctx := ctxT(t, 20*time.Second)
	require.NoError(t, c.Do(ctx, "tok", func(ctx context.Context, l *lease.Lease) error {
		tok, ok := fence.FromContext(ctx)
		require.True(t, ok)
		assert.Equal(t, l.Fence(), tok)
		got, ok := lease.FromContext(ctx, "tok")
		require.True(t, ok)
		assert.Same(t, l, got)
		return nil
	}))
}

// A Release called after its lease was lost (the safety suite's "last
// Release returned nil, then the lease ended lost (key-deleted)"): its worker calls Release on a lease that has already
// ended (its record was deleted behind its back, and hold stops only at its
// next look at Err). That Release's reply is lost: change records it as a
// pending Release of the last hold, although it was sent after the record
// had gone and so cannot be what removed it. The retry used to find the
// record gone, take it for that pending Release's doing, and return nil,
// while Err stayed the *LostError (ErrKeyDeleted); the same path returned
// nil for a second Release of a lease already released. Now only a Release
// sent while the Client still tracked the record can be pending.
func TestReleaseAfterLossWithLostReply(t *testing.T) {
	t.Run("key-deleted", func(t *testing.T) {
		px := newProxied(t)
		ctx := ctxT(t, 30*time.Second)
		l, err := px.c.Acquire(ctx, "r")
		require.NoError(t, err)

		key, _ := heldRecord(t, px.direct, "r")
		_, err = px.direct.Delete(ctx, key) // an outsider: DeleteHolder
		require.NoError(t, err)
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatal("the delete was not noticed")
		}
		require.ErrorIs(t, l.Err(), lease.ErrKeyDeleted)

		// The worker's Release, during a lost-replies fault.
		px.lostReply(t, l.Release)
		err = until(t, ctx, l.Release)

		assert.ErrorIs(t, l.Err(), lease.ErrKeyDeleted, "Err keeps the loss")
		assert.ErrorIs(t, err, lease.ErrNotFound,
			"the record went before this Release was sent: it is not the Release's doing")
	})
	t.Run("released-twice", func(t *testing.T) {
		px := newProxied(t)
		ctx := ctxT(t, 30*time.Second)
		l, err := px.c.Acquire(ctx, "r")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))

		px.lostReply(t, l.Release)
		err = until(t, ctx, l.Release)

		assert.ErrorIs(t, l.Err(), lease.ErrReleased)
		assert.Error(t, err, "Releasing a lease that was already released returns an error, never nil")
	})
}

// The safety suite's "deadline" cases are expected: the lease ends at
// its local validity deadline while the worker's Release is on its way (or
// before it is called), and a Release that then deletes the record returns
// nil with Err the earlier *LostError (ErrDeadline). This shows the
// first-ended-wins order with the deadline passing while the Release's
// request waits on a paused link.
func TestDeadlineWhileReleaseInFlight(t *testing.T) {
	px := newProxied(t, lease.WithTTL(2*time.Second))
	ctx := ctxT(t, 30*time.Second)
	l, err := px.c.Acquire(ctx, "r")
	require.NoError(t, err)

	px.p.Pause() // a partition: nothing goes through, keep-alives included
	done := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		done <- l.Release(rctx)
	}()
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the deadline did not end the lease")
	}
	require.ErrorIs(t, l.Err(), lease.ErrDeadline)
	px.p.Resume()
	px.p.ResetConns()
	err = <-done
	if err != nil {
		err = until(t, ctx, l.Release)
	}
	t.Logf("Release after the deadline: %v; Err: %v", err, l.Err())
	assert.ErrorIs(t, l.Err(), lease.ErrDeadline, "the first end wins")
}

// A record deleted and written again with the very bytes of the holder's
// record (its owner token and hold count) is not the holder's: its mod
// and creation revisions are new. The holder's Release, after the watch
// ended the lease, finds it someone else's and leaves it alone.
func TestRecordWrittenAgainIsNotTheHolders(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	l, err := c.Acquire(ctx, "again")
	require.NoError(t, err)
	require.NoError(t, l.Reenter(ctx)) // so that a Release would write, not delete

	key, _ := heldRecord(t, cli, "again")
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	value := string(resp.Kvs[0].Value)
	_, err = cli.Delete(ctx, key)
	require.NoError(t, err)
	put, err := cli.Put(ctx, key, value)
	require.NoError(t, err)
	<-l.Done()
	require.ErrorIs(t, l.Err(), lease.ErrLost)

	err = l.Release(ctx)
	require.ErrorIs(t, err, lease.ErrNotOwner)
	resp, err = cli.Get(ctx, key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, value, string(resp.Kvs[0].Value), "the record written again is untouched")
	assert.Equal(t, put.Header.Revision, resp.Kvs[0].ModRevision)
}

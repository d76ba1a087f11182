package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const testDelay = 2 * time.Second

// delaySetup is a lock's holder A, whose Client talks to etcd through a
// proxy (so that it can be cut off), next to a direct etcd client.
type delaySetup struct {
	ctx    context.Context  // started after etcd
	cli    *clientv3.Client // direct
	p      *faultproxy.Proxy
	a      *lease.Client // through p
	held   *lease.Lease  // A's lease, acquired WithLockDelay(testDelay)
	gone   <-chan time.Time
	record string
}

func newDelaySetup(t *testing.T, name string) *delaySetup {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	p, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	a := newClient(t, etcdtest.Client(t, cl, p.URL()), lease.WithTTL(time.Second))
	l, err := a.Acquire(ctx, name, lease.WithLockDelay(testDelay))
	require.NoError(t, err)
	assert.EqualValues(t, 4, markerLeaseTTL(t, ctx, cli, name), "the session's TTL + the delay + 1 s")
	st, err := newAdmin(t, cli).Inspect(ctx, name)
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, l.Fence(), st.Holder.Fence)
	assert.Equal(t, testDelay, st.Holder.LockDelay)
	assert.Empty(t, st.Waiters, "the marker is no waiter")
	return &delaySetup{ctx: ctx, cli: cli, p: p, a: a, held: l, record: st.Holder.Key, gone: deleteSeen(t, ctx, cli, st.Holder.Key)}
}

// deleteSeen delivers when a watch of key sees it deleted.
func deleteSeen(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) <-chan time.Time {
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	wch := cli.Watch(wctx, key)
	// The watch is confirmed before the test goes on.
	_, err := cli.Get(ctx, key)
	require.NoError(t, err)
	seen := make(chan time.Time, 1)
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					seen <- time.Now()
					return
				}
			}
		}
	}()
	return seen
}

// acquireLater acquires name through c and delivers when it is admitted.
func acquireLater(ctx context.Context, t *testing.T, c *lease.Client, name string) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		l, err := c.Acquire(ctx, name)
		at := time.Now()
		if assert.NoError(t, err) {
			assert.NoError(t, l.Release(ctx))
		}
		got <- at
	}()
	return got
}

// A holder cut off from etcd: its record expires with its session, and
// the next holder, a Client that never heard of the option, is admitted
// no sooner than the delay after that.
func TestLockDelayAfterPartition(t *testing.T) {
	s := newDelaySetup(t, "delayed")
	ctx := s.ctx
	b := newClient(t, s.cli, lease.WithTTL(time.Second))
	next := acquireLater(ctx, t, b, "delayed")
	waitRecords(t, s.cli, "delayed", 3) // A's record, A's marker, B's record

	s.p.Pause()
	<-s.held.Done()
	vanished := <-s.gone
	admitted := <-next
	waited := admitted.Sub(vanished)
	t.Logf("partitioned holder: successor admitted %v after the record vanished (lock-delay %v)", waited, testDelay)
	assert.GreaterOrEqual(t, waited, testDelay)
}

// A clean Release hands over at once.
func TestLockDelayCleanRelease(t *testing.T) {
	s := newDelaySetup(t, "clean")
	ctx := s.ctx
	b := newClient(t, s.cli)
	next := acquireLater(ctx, t, b, "clean")
	waitRecords(t, s.cli, "clean", 3)

	require.NoError(t, s.held.Release(ctx))
	released := <-s.gone
	admitted := <-next
	t.Logf("clean release: successor admitted %v after the record was deleted", admitted.Sub(released))
	assert.Less(t, admitted.Sub(released), testDelay, "a clean release waits out no delay")
	waitRecords(t, s.cli, "clean", 0)
}

// ForceRelease of a holder whose Client is cut off: the marker moves to a
// lease of the delay in the same call, so the lock waits the delay from
// the release (not the holder's TTL plus the delay); meanwhile Inspect
// shows the delay and no holder, the Verifier verifies no one, and a
// newcomer's TryAcquire finds the lock held.
func TestLockDelayForceRelease(t *testing.T) {
	s := newDelaySetup(t, "forced")
	ctx := s.ctx
	s.p.Pause()
	r, err := newAdmin(t, s.cli).ForceRelease(ctx, "forced", s.held.Fence().Revision)
	require.NoError(t, err)
	assert.Equal(t, testDelay, r.LockDelay)
	released := <-s.gone
	// Moved off the holder's lock-delay lease (TTL + delay + 1 s) to one
	// of the delay (+ 1 s).
	assert.EqualValues(t, 3, markerLeaseTTL(t, ctx, s.cli, "forced"))

	st, err := newAdmin(t, s.cli).Inspect(ctx, "forced")
	require.NoError(t, err)
	assert.Nil(t, st.Holder)
	assert.True(t, st.DelayedUntil.After(time.Now()), "delayed until %v", st.DelayedUntil)
	v, err := lease.NewVerifier(s.cli, lease.DefaultPrefix)
	require.NoError(t, err)
	require.ErrorIs(t, v.Verify(ctx, s.held.Fence()), fence.ErrUnverified)

	_, err = newClient(t, s.cli).TryAcquire(ctx, "forced")
	require.ErrorIs(t, err, lease.ErrHeld)
	admitted := <-acquireLater(ctx, t, newClient(t, s.cli), "forced")
	waited := admitted.Sub(released)
	t.Logf("force release: successor admitted %v after the record was deleted (lock-delay %v)", waited, testDelay)
	assert.GreaterOrEqual(t, waited, testDelay)
}

// markerLeaseTTL returns the TTL etcd granted the lease of the lock-delay
// marker of the lock called name (the only one there).
func markerLeaseTTL(t *testing.T, ctx context.Context, cli *clientv3.Client, name string) int64 {
	resp, err := cli.Get(ctx, lease.DefaultPrefix+name+"/", clientv3.WithPrefix())
	require.NoError(t, err)
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), ".d") {
			ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			require.NoError(t, err)
			return ttl.GrantedTTL
		}
	}
	t.Fatal("no marker")
	return 0
}

// An acquirer that arrives after the holder vanished, while nobody was
// waiting, honours the delay too.
func TestLockDelayNewcomer(t *testing.T) {
	s := newDelaySetup(t, "newcomer")
	ctx := s.ctx
	s.p.Pause()
	vanished := <-s.gone
	c := newClient(t, s.cli)
	_, err := c.TryAcquire(ctx, "newcomer")
	require.ErrorIs(t, err, lease.ErrHeld)
	admitted := <-acquireLater(ctx, t, c, "newcomer")
	waited := admitted.Sub(vanished)
	t.Logf("newcomer: admitted %v after the record vanished (lock-delay %v)", waited, testDelay)
	assert.GreaterOrEqual(t, waited, testDelay)
}

// A lease that reaches its maximum hold is not released: the lock waits
// out its delay.
func TestLockDelayAfterMaxHold(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, cli)
	l, err := c.Acquire(ctx, "capped-delay", lease.WithMaxHold(300*time.Millisecond), lease.WithLockDelay(testDelay))
	require.NoError(t, err)
	st, err := newAdmin(t, cli).Inspect(ctx, "capped-delay")
	require.NoError(t, err)
	gone := deleteSeen(t, ctx, cli, st.Holder.Key)
	next := acquireLater(ctx, t, newClient(t, cli), "capped-delay")
	<-l.Done()
	require.ErrorIs(t, l.Err(), lease.ErrMaxHold)
	dropped := <-gone
	waited := (<-next).Sub(dropped)
	t.Logf("max hold: successor admitted %v after the record was deleted", waited)
	assert.GreaterOrEqual(t, waited, testDelay)
}

// A waiter with the option that gives up leaves neither record nor
// marker; the delay rounds up to whole seconds.
func TestLockDelayWaiterGivesUp(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	a := newClient(t, cli)
	l, err := a.Acquire(ctx, "queue")
	require.NoError(t, err)
	b := newClient(t, cli)
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(wctx, "queue", lease.WithLockDelay(1500*time.Millisecond))
		errc <- err
	}()
	waitRecords(t, cli, "queue", 3)
	st, err := newAdmin(t, cli).Inspect(ctx, "queue")
	require.NoError(t, err)
	require.Len(t, st.Waiters, 1)
	assert.Equal(t, 2*time.Second, st.Waiters[0].LockDelay, "rounded up")
	assert.Zero(t, st.Holder.LockDelay)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	waitRecords(t, cli, "queue", 1)
	require.NoError(t, l.Release(ctx))
	// Nothing delays the lock now.
	requireAdmitted(t, cycleLater(ctx, newClient(t, cli), "queue"), time.Second, "the lock was delayed by a waiter that gave up")
}

// Invalid delays fail before anything is written.
func TestLockDelayInvalid(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t, cli)
	for _, d := range []time.Duration{-time.Second, 0, lease.MaxLockDelay + time.Nanosecond} {
		_, err := c.Acquire(ctx, "bad-delay", lease.WithLockDelay(d))
		require.ErrorIs(t, err, lease.ErrInvalidOption, "%v", d)
		_, err = c.TryAcquire(ctx, "bad-delay", lease.WithLockDelay(d))
		require.ErrorIs(t, err, lease.ErrInvalidOption, "%v", d)
	}
	assert.Empty(t, records(t, cli, "bad-delay"))
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Empty(t, leases.Leases, "no session or lock-delay lease was granted")
	l, err := c.Acquire(ctx, "bad-delay", lease.WithLockDelay(lease.MaxLockDelay))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

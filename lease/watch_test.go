package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchers is the number of watchers the members of cl serve.
func watchers(t *testing.T, cl *etcdtest.Cluster) float64 {
	return cl.Metric(t, "etcd_debugging_mvcc_watcher_total")
}

// A Client watches the record keys it holds or waits with, and the one
// record each waiter waits behind, and stops watching its own keys about a
// TTL after it has no record there; and, per session, the requests to
// release its records (one watch each, asks below).
func TestWatchesFollowTheClientsLocks(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	base := watchers(t, cl)
	c := newClient(t, cli, lease.WithTTL(time.Second))
	others := newClient(t, etcdtest.Client(t, cl))
	for i := range 5 {
		_, err := others.Acquire(ctx, fmt.Sprintf("unrelated-%d", i))
		require.NoError(t, err)
	}
	const asks = 1 // others' session
	require.Eventually(t, func() bool { return watchers(t, cl) == base+5+asks }, 5*time.Second, 10*time.Millisecond)

	a, err := c.Acquire(ctx, "w1")
	require.NoError(t, err)
	b, err := c.Acquire(ctx, "w2")
	require.NoError(t, err)
	actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Acquire(actx, "w1") // waits behind its own record: one new watch, of its own key
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return watchers(t, cl) == base+5+asks+1+3 }, 5*time.Second, 10*time.Millisecond,
		"one watch per record key this client has, and one for its session's asks: got %v", watchers(t, cl)-base)

	require.NoError(t, a.Release(ctx))
	require.NoError(t, b.Release(ctx))
	require.Eventually(t, func() bool { return watchers(t, cl) == base+5+asks+1 }, 10*time.Second, 50*time.Millisecond,
		"watches of directories without records stop after about a TTL; the session's asks stay")
}

// A Client with records in many directories (past the 512 at which it
// once switched to a watch of its whole prefix) keeps one watch per record
// key, all on one stream, receives no event of other Clients' locks, and
// still sees every loss.
func TestManyDirectoriesKeepTheirOwnWatches(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 60*time.Second)
	base := watchers(t, cl)
	reg := prometheus.NewRegistry()
	c := newClient(t, cli, lease.WithMetrics(reg))
	const n = 600
	ls := make([]*lease.Lease, n)
	for i := range ls {
		var err error
		ls[i], err = c.Acquire(ctx, fmt.Sprintf("many-%d", i))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return watchers(t, cl) == base+n+1 }, 10*time.Second, 20*time.Millisecond,
		"one watch per record key and the session's asks: got %v watchers", watchers(t, cl)-base)
	require.Equal(t, float64(n), gaugeValue(t, reg, "fencekit_lease_watches"))

	// Another Client's locks under the same prefix: none of their events
	// reach c.
	// Let the events of c's own writes arrive first.
	events := gaugeValue(t, reg, "fencekit_lease_watch_events_total")
	require.Eventually(t, func() bool {
		e := events
		time.Sleep(200 * time.Millisecond)
		events = gaugeValue(t, reg, "fencekit_lease_watch_events_total")
		return events == e
	}, 10*time.Second, time.Millisecond, "c's own events keep coming")
	other := newClient(t, etcdtest.Client(t, cl))
	for i := range 20 {
		l, err := other.Acquire(ctx, fmt.Sprintf("other-%d", i))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	time.Sleep(200 * time.Millisecond) // what would have reached c has
	require.Equal(t, events, gaugeValue(t, reg, "fencekit_lease_watch_events_total"),
		"events of another Client's locks reached this one")

	for _, i := range []int{0, 300, n - 1} {
		key, _ := heldRecord(t, cli, fmt.Sprintf("many-%d", i))
		_, err := cli.Delete(ctx, key)
		require.NoError(t, err)
		select {
		case <-ls[i].Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("loss of lease %d not signalled", i)
		}
		require.ErrorIs(t, ls[i].Err(), lease.ErrKeyDeleted)
	}
	// Waiting and handing over still work with this many watches.
	got := cycleLater(ctx, c, "many-5")
	waitRecords(t, cli, "many-5", 2)
	require.NoError(t, ls[5].Release(ctx))
	require.NoError(t, <-got)
}

// gaugeValue is the value of the unlabelled metric name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A holder's record deleted while its watch reconnects is still reported.
func TestDeleteWhileWatchReconnects(t *testing.T) {
	px := newProxied(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := px.c.Acquire(ctx, "rc")
	require.NoError(t, err)
	key, _ := heldRecord(t, px.direct, "rc")
	px.p.ResetConns()
	_, err = px.direct.Delete(ctx, key)
	require.NoError(t, err)
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the delete was never reported")
	}
	require.ErrorIs(t, l.Err(), lease.ErrKeyDeleted)
}

// A delete during a partition whose events are compacted away before the
// holder reconnects is still a loss.
func TestDeleteAcrossCompactionIsALoss(t *testing.T) {
	px := newProxied(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := px.c.Acquire(ctx, "dc")
	require.NoError(t, err)
	key, _ := heldRecord(t, px.direct, "dc")
	px.p.Blackhole()
	_, err = px.direct.Delete(ctx, key)
	require.NoError(t, err)
	resp, err := px.direct.Put(ctx, "unrelated", "x")
	require.NoError(t, err)
	_, err = px.direct.Compact(ctx, resp.Header.Revision)
	require.NoError(t, err)
	px.p.Resume()
	px.p.ResetConns()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the delete was never reported")
	}
	require.ErrorIs(t, l.Err(), lease.ErrLost)
}

// A waiter of a Client that never watched the lock's directory is woken
// by its predecessor's delete, without waiting for etcd's slow sweep of
// unsynced watchers.
func TestHandoffToAFreshClientIsPrompt(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	holder := newClient(t, cli)
	var took []time.Duration
	for i := range 10 {
		name := fmt.Sprintf("fresh-%d", i)
		h, err := holder.Acquire(ctx, name)
		require.NoError(t, err)
		w := newClient(t, etcdtest.Client(t, cl))
		got := make(chan time.Time, 1)
		go func() {
			l, err := w.Acquire(ctx, name)
			if err == nil {
				got <- time.Now()
				l.Release(ctx)
			}
			close(got)
		}()
		waitRecords(t, cli, name, 2)
		released := time.Now()
		require.NoError(t, h.Release(ctx))
		at, ok := <-got
		require.True(t, ok)
		took = append(took, at.Sub(released))
	}
	slices.Sort(took)
	assert.Less(t, took[len(took)/2], 80*time.Millisecond, "median handoff of %v", took)
	_ = clientv3.WithPrefix
}

// events is the number of watch events the members of cl have sent.
func events(t *testing.T, cl *etcdtest.Cluster) float64 {
	return cl.Metric(t, "etcd_debugging_mvcc_events_total")
}

// onMembers runs test on a 1- and a 3-member cluster; member(i) is the
// client URL of the i-th member, round robin, so that a queue's clients
// are spread over the members.
func onMembers(t *testing.T, test func(t *testing.T, cl *etcdtest.Cluster, member func(int) string)) {
	for _, members := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			cl := etcdtest.StartCluster(t, members)
			test(t, cl, func(i int) string { return cl.Members[i%members].ClientURL })
		})
	}
}

// A release wakes the waiter behind it, not the whole queue: each waiter
// watches only the record it waits behind, so the events etcd sends for
// one handoff do not grow with the queue.
func TestReleaseWakesOnlyTheNextWaiter(t *testing.T) {
	onMembers(t, func(t *testing.T, cl *etcdtest.Cluster, member func(int) string) {
		cli := etcdtest.Client(t, cl)
		ctx := ctxT(t, 30*time.Second)
		h, err := newClient(t, etcdtest.Client(t, cl, member(0))).Acquire(ctx, "line")
		require.NoError(t, err)
		const n = 8
		got := make(chan *lease.Lease, n)
		for i := range n {
			c := newClient(t, etcdtest.Client(t, cl, member(i+1)))
			go func() {
				l, err := c.Acquire(ctx, "line")
				if err != nil {
					t.Error(err)
					close(got)
					return
				}
				got <- l
			}()
			waitRecords(t, cli, "line", i+2)
		}
		time.Sleep(100 * time.Millisecond) // every waiter's watch confirmed
		before := events(t, cl)
		require.NoError(t, h.Release(ctx))
		first := <-got
		require.NotNil(t, first)
		sent := events(t, cl) - before
		// The holder's own watch and its successor's each get the delete.
		assert.GreaterOrEqual(t, sent, 2.0, "the events metric counts")
		assert.LessOrEqual(t, sent, 3.0, "events sent for one handoff with %d waiters", n)
		l := first
		for range n - 1 {
			require.NoError(t, l.Release(ctx))
			next := <-got
			require.NotNil(t, next)
			assert.Less(t, l.Fence().Revision, next.Fence().Revision, "first come, first served")
			l = next
		}
		require.NoError(t, l.Release(ctx))
	})
}

// A waiter whose predecessor gives up reads the queue again, waits behind
// the record before that, and is admitted when that one is released.
func TestWaiterBehindACancelledWaiter(t *testing.T) {
	onMembers(t, func(t *testing.T, cl *etcdtest.Cluster, member func(int) string) {
		cli := etcdtest.Client(t, cl)
		ctx := ctxT(t, 30*time.Second)
		h, err := newClient(t, etcdtest.Client(t, cl, member(0))).Acquire(ctx, "gap")
		require.NoError(t, err)
		actx, cancelA := context.WithCancel(ctx)
		aErr := make(chan error, 1)
		a := newClient(t, etcdtest.Client(t, cl, member(1)))
		go func() {
			_, err := a.Acquire(actx, "gap")
			aErr <- err
		}()
		waitRecords(t, cli, "gap", 2)
		got := make(chan error, 1)
		b := newClient(t, etcdtest.Client(t, cl, member(2)))
		go func() {
			l, err := b.Acquire(ctx, "gap")
			if err == nil {
				assert.Less(t, h.Fence().Revision, l.Fence().Revision)
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitRecords(t, cli, "gap", 3)
		cancelA()
		require.ErrorIs(t, <-aErr, context.Canceled)
		waitRecords(t, cli, "gap", 2)
		select {
		case err := <-got:
			t.Fatalf("admitted while the lock is held: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		require.NoError(t, h.Release(ctx))
		requireAdmitted(t, got, 5*time.Second, "the waiter was not admitted after the holder released")
	})
}

// A waiter cut off while the record it waits behind is released, and whose
// watch finds those events compacted away when it reconnects, reads what
// it missed and is admitted.
func TestWaiterAdmittedAcrossCompaction(t *testing.T) {
	px := newProxied(t)
	ctx := ctxT(t, 30*time.Second)
	h, err := newClient(t, px.direct).Acquire(ctx, "wc")
	require.NoError(t, err)
	got := cycleLater(ctx, px.c, "wc")
	waitRecords(t, px.direct, "wc", 2)
	time.Sleep(100 * time.Millisecond) // the waiter's watch is confirmed
	px.p.Blackhole()
	require.NoError(t, h.Release(ctx))
	resp, err := px.direct.Put(ctx, "unrelated", "x")
	require.NoError(t, err)
	_, err = px.direct.Compact(ctx, resp.Header.Revision)
	require.NoError(t, err)
	px.p.Resume()
	px.p.ResetConns()
	requireAdmitted(t, got, 10*time.Second, "the waiter was never admitted")
}

// A waiter that waits behind a record while its Client takes on hundreds
// of other locks (past the 512 watches at which it once switched to a
// watch of its whole prefix) is still woken by that record's release.
func TestWaiterWhileItsClientTakesManyLocks(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 60*time.Second)
	h, err := newClient(t, cli).Acquire(ctx, "switch")
	require.NoError(t, err)
	var logs testkit.LogBuffer
	c := newClient(t, etcdtest.Client(t, cl), lease.WithLogger(logs.Logger(slog.LevelInfo)))
	got := cycleLater(ctx, c, "switch")
	waitRecords(t, cli, "switch", 2)
	time.Sleep(100 * time.Millisecond) // the waiter's watches are confirmed
	for i := range 600 {               // past the 512 of old
		_, err := c.Acquire(ctx, fmt.Sprintf("switch-%d", i))
		require.NoError(t, err)
	}
	require.NotContains(t, logs.String(), "whole prefix")
	require.NoError(t, h.Release(ctx))
	requireAdmitted(t, got, 10*time.Second, "the waiter was not admitted")
}

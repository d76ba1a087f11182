package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// At most n permits are held at once, across Clients, however the
// contenders come and go, and one cut off from etcd lets its permit go
// before anyone else gets it.
func TestSemaphoreNeverExceedsItsSize(t *testing.T) {
	for _, members := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			cl := etcdtest.StartCluster(t, members)
			ctx := ctxT(t, 60*time.Second)
			const n, contenders, rounds = 3, 12, 4
			var holders, peak, served atomic.Int64
			var wg sync.WaitGroup
			// n permits are held at once, by n Clients; the next is refused.
			var held []*lease.Permit
			for range n {
				sem, err := newClient(t, etcdtest.Client(t, cl)).Semaphore("pool", n)
				require.NoError(t, err)
				p, err := sem.Acquire(ctx)
				require.NoError(t, err)
				held = append(held, p)
			}
			extra, err := newClient(t, etcdtest.Client(t, cl)).Semaphore("pool", n)
			require.NoError(t, err)
			_, err = extra.TryAcquire(ctx)
			require.ErrorIs(t, err, lease.ErrHeld)
			for _, p := range held {
				require.NoError(t, p.Release(ctx))
			}
			for i := range contenders {
				c := newClient(t, etcdtest.Client(t, cl), lease.WithTTL(2*time.Second))
				sem, err := c.Semaphore("pool", n)
				require.NoError(t, err)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						p, err := sem.Acquire(ctx)
						if err != nil {
							t.Errorf("contender %d: %v", i, err)
							return
						}
						h := holders.Add(1)
						for {
							old := peak.Load()
							if h <= old || peak.CompareAndSwap(old, h) {
								break
							}
						}
						select {
						case <-time.After(5 * time.Millisecond):
						case <-p.Done():
						}
						holders.Add(-1)
						served.Add(1)
						if err := p.Release(ctx); err != nil && !errors.Is(err, lease.ErrNotFound) {
							t.Errorf("release: %v", err)
						}
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, int64(contenders*rounds), served.Load())
			assert.LessOrEqual(t, peak.Load(), int64(n), "never more than n holders")
			assert.Empty(t, records(t, etcdtest.Client(t, cl), "pool"))
		})
	}
}

// A partitioned holder's permit ends before another contender can take it.
func TestSemaphorePermitLostToPartitionEndsFirst(t *testing.T) {
	px := newProxied(t, lease.WithTTL(2*time.Second))
	ctx := ctxT(t, 30*time.Second)
	sem, err := px.c.Semaphore("part", 1)
	require.NoError(t, err)
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	other, err := newClient(t, px.direct).Semaphore("part", 1)
	require.NoError(t, err)
	got := make(chan time.Time, 1)
	go func() {
		q, err := other.Acquire(ctx)
		if err == nil {
			got <- time.Now()
			q.Release(ctx)
		}
		close(got)
	}()
	waitRecords(t, px.direct, "part", 2)
	px.p.Blackhole()
	defer px.p.Resume()
	<-p.Done()
	doneAt := time.Now()
	require.ErrorIs(t, p.Err(), lease.ErrDeadline)
	at, ok := <-got
	require.True(t, ok)
	assert.True(t, doneAt.Before(at), "the permit ended %v after the next holder got one", doneAt.Sub(at))
}

// Participants must agree on the size and kind of a lock.
func TestSemaphoreSizeMismatch(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	c := newClient(t, cli)
	ctx := ctxT(t, 20*time.Second)
	three, err := c.Semaphore("size", 3)
	require.NoError(t, err)
	p, err := three.Acquire(ctx)
	require.NoError(t, err)

	two, err := newClient(t, cli).Semaphore("size", 2)
	require.NoError(t, err)
	_, err = two.Acquire(ctx)
	require.ErrorIs(t, err, lease.ErrMismatch)
	require.NotErrorIs(t, err, lease.ErrRetryable)
	_, err = newClient(t, cli).Acquire(ctx, "size")
	require.ErrorIs(t, err, lease.ErrMismatch, "a Lease cannot share a name with a semaphore")
	waitRecords(t, cli, "size", 1) // the refused records are gone
	require.NoError(t, p.Release(ctx))

	_, err = c.Semaphore("size", 0)
	require.Error(t, err)
	_, err = c.Semaphore("bad/name", 1)
	require.ErrorIs(t, err, lease.ErrInvalidName)
}

// Readers share, writers exclude everyone, and a reader arriving after a
// waiting writer waits for it: a stream of readers does not starve writers.
func TestRWMutexReadersShareWritersExclude(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	rw := func() *lease.RWMutex {
		m, err := newClient(t, etcdtest.Client(t, cl)).RWMutex("rw")
		require.NoError(t, err)
		return m
	}
	r1, err := rw().RLock(ctx)
	require.NoError(t, err)
	r2, err := rw().RLock(ctx)
	require.NoError(t, err, "readers overlap")

	_, err = rw().TryLock(ctx)
	require.ErrorIs(t, err, lease.ErrHeld)
	writer := rw()
	wgot := make(chan *lease.Lease, 1)
	go func() {
		w, err := writer.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		wgot <- w
	}()
	waitRecords(t, cli, "rw", 3)
	_, err = rw().TryRLock(ctx)
	require.ErrorIs(t, err, lease.ErrHeld, "a reader behind a waiting writer waits")
	late := rw()
	rgot := make(chan time.Time, 1)
	go func() {
		r, err := late.RLock(ctx)
		if err == nil {
			rgot <- time.Now()
			r.Release(ctx)
		}
		close(rgot)
	}()
	waitRecords(t, cli, "rw", 4)

	require.NoError(t, r1.Release(ctx))
	require.NoError(t, r2.Release(ctx))
	w := <-wgot
	require.NotNil(t, w)
	assert.Greater(t, w.Fence().Revision, r2.Revision())
	wreleased := time.Now()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-rgot:
		t.Fatal("a reader got in while the writer held the lock")
	default:
	}
	require.NoError(t, w.Release(ctx))
	at, ok := <-rgot
	require.True(t, ok)
	assert.True(t, at.After(wreleased))
	require.Eventually(t, func() bool { return len(records(t, cli, "rw")) == 0 }, 5*time.Second, 10*time.Millisecond)
}

// etcd#16221: a writer whose session is revoked while it waits must not
// get the lock together with the writer behind it.
func TestRWMutexRevokedWaiterDoesNotLock(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	mk := func() (*lease.Client, *lease.RWMutex) {
		c := newClient(t, etcdtest.Client(t, cl))
		m, err := c.RWMutex("16221")
		require.NoError(t, err)
		return c, m
	}
	_, m1 := mk()
	_, m2 := mk()
	_, m3 := mk()
	w1, err := m1.Lock(ctx)
	require.NoError(t, err)
	var holders atomic.Int32
	errs := make(chan error, 2)
	for i, m := range []*lease.RWMutex{m2, m3} {
		go func() {
			w, err := m.Lock(ctx)
			if err == nil {
				holders.Add(1)
				time.Sleep(100 * time.Millisecond)
				holders.Add(-1)
				err = w.Release(ctx)
			}
			errs <- err
		}()
		waitRecords(t, cli, "16221", 2+i) // queue in order: m2, then m3
	}
	// The queue in creation order (record keys sort by session id, which
	// is not monotonic across members).
	queue, err := cli.Get(ctx, lease.DefaultPrefix+"16221/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	require.NoError(t, err)
	require.Len(t, queue.Kvs, 3)
	resp, err := cli.Get(ctx, string(queue.Kvs[1].Key)) // m2's record: second in line
	require.NoError(t, err)
	_, err = cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
	require.NoError(t, w1.Release(ctx))
	var ok, failed int
	for range 2 {
		if err := <-errs; err == nil {
			ok++
		} else {
			failed++
			assert.ErrorIs(t, err, lease.ErrRetryable)
		}
		assert.LessOrEqual(t, holders.Load(), int32(1))
	}
	assert.Equal(t, 1, ok)
	assert.Equal(t, 1, failed)
}

// Candidates lead one at a time with rising terms; Leader and Observe tell
// everyone who leads, in order.
func TestElection(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	watcher, err := newClient(t, cli).Election("lead")
	require.NoError(t, err)
	_, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, lease.ErrNoLeader)

	octx, stop := context.WithCancel(ctx)
	seen := make(chan lease.Leader, 100)
	go func() {
		defer close(seen)
		for l := range watcher.Observe(octx) {
			seen <- l
		}
	}()
	first := <-seen
	assert.True(t, first.IsZero())

	var terms []*lease.Term
	for i := range 3 {
		e, err := newClient(t, etcdtest.Client(t, cl)).Election("lead")
		require.NoError(t, err)
		if i == 0 {
			term, err := e.Campaign(ctx, "node-0")
			require.NoError(t, err)
			terms = append(terms, term)
			continue
		}
		go func() {
			term, err := e.Campaign(ctx, fmt.Sprintf("node-%d", i))
			if err != nil {
				if !errors.Is(err, lease.ErrClosed) {
					t.Error(err)
				}
				return
			}
			<-term.Done()
		}()
		waitRecords(t, cli, "lead", i+1) // queue in order
	}
	ldr, err := watcher.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "node-0", ldr.Value)
	assert.Equal(t, terms[0].Fence(), ldr.Term)
	require.NoError(t, terms[0].Proclaim(ctx, "node-0 v2"))
	assert.Equal(t, "node-0 v2", terms[0].Value())
	require.NoError(t, terms[0].Resign(ctx))
	require.ErrorIs(t, terms[0].Err(), lease.ErrReleased)

	// The observer sees node-0, its new value, then node-1.
	var got []string
	var last, v2 lease.Leader
	for l := range seen {
		if l.Value == "node-0 v2" {
			v2 = l
		}
		if l.IsZero() {
			continue
		}
		if l.Term.Revision < last.Term.Revision {
			t.Fatalf("terms went backwards: %v after %v", l.Term, last.Term)
		}
		last = l
		got = append(got, l.Value)
		if l.Value == "node-1" {
			break
		}
	}
	stop()
	for range seen {
	}
	assert.Equal(t, []string{"node-0", "node-0 v2", "node-1"}, dedupe(got))
	assert.False(t, v2.Since.IsZero(), "a leader publishes when its term began")
	assert.WithinDuration(t, terms[0].Since(), v2.Since, time.Millisecond)

	_, err = watcher.Campaign(ctx, string([]byte{0xff}))
	require.Error(t, err, "a value that is not UTF-8 is refused")
	assert.Empty(t, records(t, cli, "lead")[2:], "and writes nothing")
}

// dedupe drops consecutive repeats.
func dedupe(s []string) []string {
	var out []string
	for _, v := range s {
		if len(out) == 0 || out[len(out)-1] != v {
			out = append(out, v)
		}
	}
	return out
}

// A permit's revision is no fencing token: the Verifier refuses it, and
// accepts the write lock's.
func TestVerifierRefusesPermits(t *testing.T) {
	cl := etcdtest.Start(t)
	c := newClient(t, etcdtest.Client(t, cl))
	ctx := ctxT(t, 20*time.Second)
	v := c.Verifier()
	sem, err := c.Semaphore("vs", 2)
	require.NoError(t, err)
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	require.Error(t, v.Verify(ctx, fenceToken("vs", p.Revision())))
	require.NoError(t, p.Release(ctx))

	rw, err := c.RWMutex("vrw")
	require.NoError(t, err)
	r, err := rw.RLock(ctx)
	require.NoError(t, err)
	require.Error(t, v.Verify(ctx, fenceToken("vrw", r.Revision())))
	require.NoError(t, r.Release(ctx))
	w, err := rw.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, v.Verify(ctx, w.Fence()))
	require.NoError(t, w.Release(ctx))
}

func fenceToken(name string, rev int64) fence.Token { return fence.Token{Lock: name, Revision: rev} }

// Inspect tells the kinds apart and which records hold.
func TestInspectRecipes(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	c := newClient(t, cli)
	ctx := ctxT(t, 20*time.Second)
	sem, err := c.Semaphore("insp", 2)
	require.NoError(t, err)
	for range 2 {
		_, err := sem.Acquire(ctx)
		require.NoError(t, err)
	}
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = sem.Acquire(actx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	e, err := c.Election("insp-e")
	require.NoError(t, err)
	_, err = e.Campaign(ctx, "me:1")
	require.NoError(t, err)

	st, err := newAdmin(t, cli).Inspect(ctx, "insp")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "semaphore/2", st.Holder.Kind)
	assert.True(t, st.Holder.Held)
	held := 1
	for _, w := range st.Waiters {
		if w.Held {
			held++
		}
	}
	assert.Equal(t, 2, held)
	st, err = newAdmin(t, cli).Inspect(ctx, "insp-e")
	require.NoError(t, err)
	assert.Equal(t, "lock", st.Holder.Kind)
	assert.Equal(t, "me:1", st.Holder.Value)
}

// A TryRLock or a semaphore's TryAcquire that fails with ErrHeld has
// deleted the record it wrote to find out by the time it returns: right
// after the call, the only record under the lock directories is the
// holder's.
func TestTryRecipesHeldLeaveNothingOnReturn(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 60*time.Second)
	t.Run("TryRLock", func(t *testing.T) {
		rw, err := newClient(t, cli).RWMutex("tr-rw")
		require.NoError(t, err)
		w, err := rw.Lock(ctx)
		require.NoError(t, err)
		key, id := heldRecord(t, cli, "tr-rw")
		other, err := newClient(t, cli).RWMutex("tr-rw")
		require.NoError(t, err)
		for round := range 10 {
			_, err := other.TryRLock(ctx)
			require.ErrorIs(t, err, lease.ErrHeld, "round %d", round)
			require.Empty(t, keysBut(t, cli, key, id), "round %d: the read lock's record is still in etcd", round)
		}
		require.NoError(t, w.Release(ctx))
	})
	t.Run("Semaphore.TryAcquire", func(t *testing.T) {
		sem, err := newClient(t, cli).Semaphore("tr-sem", 1)
		require.NoError(t, err)
		p, err := sem.Acquire(ctx)
		require.NoError(t, err)
		key, id := heldRecord(t, cli, "tr-sem")
		other, err := newClient(t, cli).Semaphore("tr-sem", 1)
		require.NoError(t, err)
		for round := range 10 {
			_, err := other.TryAcquire(ctx)
			require.ErrorIs(t, err, lease.ErrHeld, "round %d", round)
			require.Empty(t, keysBut(t, cli, key, id), "round %d: the waiter's record is still in etcd", round)
		}
		require.NoError(t, p.Release(ctx))
	})
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Five candidates, each with its own Client and link to etcd, campaign
// again and again while the leader is partitioned, the etcd leader is
// killed (3 members) and leaders resign. Never do two terms live at once,
// every failover elects a leader with a higher term, and an observer sees
// every change in order.
func TestElectionFailover(t *testing.T) {
	for _, members := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			cl := etcdtest.StartCluster(t, members)
			direct := etcdtest.Client(t, cl)
			ctx := ctxT(t, 90*time.Second)
			stop, cancel := context.WithCancel(ctx)
			defer cancel()

			var (
				live, maxLive atomic.Int32
				wg            sync.WaitGroup
				proxies       []*faultproxy.Proxy
				terms         = make([]atomic.Pointer[lease.Term], 5)
				resign        = make([]chan struct{}, 5)
			)
			for i := range 5 {
				p, err := faultproxy.New(strings.TrimPrefix(cl.Members[i%members].ClientURL, "http://"))
				require.NoError(t, err)
				t.Cleanup(func() { p.Close() })
				proxies = append(proxies, p)
				c := newClient(t, etcdtest.Client(t, cl, p.URL()), lease.WithTTL(2*time.Second))
				e, err := c.Election("failover")
				require.NoError(t, err)
				resign[i] = make(chan struct{}, 1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for stop.Err() == nil {
						term, err := e.Campaign(stop, fmt.Sprintf("c-%d", i))
						if err != nil {
							if !errors.Is(err, lease.ErrRetryable) && stop.Err() == nil {
								t.Errorf("candidate %d: %v", i, err)
								return
							}
							time.Sleep(50 * time.Millisecond)
							continue
						}
						if n := live.Add(1); n > maxLive.Load() {
							maxLive.Store(n)
						}
						terms[i].Store(term)
						select {
						case <-term.Done():
						case <-resign[i]: // the leader decides to step down
						case <-stop.Done():
						}
						terms[i].Store(nil)
						live.Add(-1) // it stops leading before it resigns
						rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
						_ = term.Resign(rctx)
						rcancel()
					}
				}()
			}

			watcher, err := newClient(t, direct).Election("failover")
			require.NoError(t, err)
			seen := make(chan lease.Leader, 1000)
			go func() {
				defer close(seen)
				for l := range watcher.Observe(stop) {
					seen <- l
				}
			}()
			var observed []lease.Leader
			nextLeader := func(after int64) lease.Leader {
				t.Helper()
				for {
					select {
					case l, ok := <-seen:
						require.True(t, ok, "observer ended")
						observed = append(observed, l)
						if !l.IsZero() && l.Term.Revision > after {
							return l
						}
					case <-time.After(20 * time.Second):
						st, err := newAdmin(t, direct).Inspect(ctx, "failover")
						t.Logf("observed %+v; queue %+v %v", observed, st, err)
						if st != nil && st.Holder != nil {
							t.Logf("holder %+v", *st.Holder)
						}
						t.Fatalf("no leader after term %d", after)
					}
				}
			}
			holder := func(l lease.Leader) int {
				var i int
				_, err := fmt.Sscanf(l.Value, "c-%d", &i)
				require.NoError(t, err)
				return i
			}

			cur := nextLeader(0)
			// 1. Partition the leader's link: it must stop before the next
			// leader starts.
			i := holder(cur)
			proxies[i].Blackhole()
			next := nextLeader(cur.Term.Revision)
			assert.NotEqual(t, i, holder(next))
			proxies[i].Resume()
			proxies[i].ResetConns()
			cur = next

			// 2. Resign.
			var term *lease.Term
			require.Eventually(t, func() bool {
				term = terms[holder(cur)].Load()
				return term != nil && term.Fence() == cur.Term
			}, 10*time.Second, 5*time.Millisecond, "the leader's Campaign returns")
			resign[holder(cur)] <- struct{}{}
			cur = nextLeader(cur.Term.Revision)

			// 3. Kill the etcd leader (3 members).
			if members == 3 {
				m := cl.Members[cl.Leader()]
				m.Stop()
				require.NoError(t, cl.WaitLeader(ctx))
				time.Sleep(500 * time.Millisecond)
				require.NoError(t, m.Restart(ctx))
				require.NoError(t, cl.WaitLeader(ctx))
				// Whoever leads now leads with a term no lower.
				l, err := watcher.Leader(ctx)
				if err == nil {
					assert.GreaterOrEqual(t, l.Term.Revision, cur.Term.Revision)
				}
			}

			cancel()
			wg.Wait()
			for range seen {
			}
			assert.LessOrEqual(t, maxLive.Load(), int32(1), "two terms live at once")
			var last int64
			distinct := map[int64]bool{}
			for _, l := range observed {
				if l.IsZero() {
					continue
				}
				assert.GreaterOrEqual(t, l.Term.Revision, last, "terms observed out of order")
				last = l.Term.Revision
				distinct[l.Term.Revision] = true
			}
			assert.GreaterOrEqual(t, len(distinct), 3)
		})
	}
}

// Observe yields every term of a failover run, in order, while etcd
// compacts its history to the current revision again and again (as a busy
// cluster with revision-based auto-compaction does) and the observer stays
// connected: compaction alone is no gap.
func TestObserveUnderCompaction(t *testing.T) {
	for _, every := range []time.Duration{100 * time.Millisecond, 3 * time.Millisecond} {
		t.Run(every.String(), func(t *testing.T) {
			cl := etcdtest.Start(t)
			direct := etcdtest.Client(t, cl)
			ctx := ctxT(t, 60*time.Second)
			const terms = 36

			watcher, err := newClient(t, direct).Election("compacted")
			require.NoError(t, err)
			octx, stopObserving := context.WithCancel(ctx)
			defer stopObserving()
			seen := make(chan lease.Leader, 4*terms)
			go func() {
				defer close(seen)
				for l := range watcher.Observe(octx) {
					seen <- l
				}
			}()
			require.True(t, (<-seen).IsZero(), "no leader yet")

			compacting, stopCompacting := context.WithCancel(ctx)
			compacted := make(chan int, 1)
			go func() {
				n := 0
				defer func() { compacted <- n }()
				for sleepCtx(compacting, every) {
					resp, err := direct.Get(compacting, "compaction-probe")
					if err != nil {
						continue
					}
					if _, err := direct.Compact(compacting, resp.Header.Revision); err == nil {
						n++
					}
				}
			}()

			// Three candidates campaign again and again, each queued behind
			// the leader: a term lasts a few milliseconds, so several pass
			// between compactions.
			var (
				won   []lease.Leader
				mu    sync.Mutex
				wg    sync.WaitGroup
				count atomic.Int32
			)
			for i := range 3 {
				e, err := newClient(t, etcdtest.Client(t, cl)).Election("compacted")
				require.NoError(t, err)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for count.Add(1) <= terms {
						term, err := e.Campaign(ctx, fmt.Sprintf("c-%d", i))
						if err != nil {
							t.Errorf("candidate %d: %v", i, err)
							return
						}
						mu.Lock()
						won = append(won, lease.Leader{Value: term.Value(), Term: term.Fence()})
						mu.Unlock()
						time.Sleep(2 * time.Millisecond)
						if err := term.Resign(ctx); err != nil {
							t.Errorf("candidate %d: resign: %v", i, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			stopCompacting()
			t.Logf("%d compactions", <-compacted)
			require.Len(t, won, terms)
			sort.Slice(won, func(i, j int) bool { return won[i].Term.Revision < won[j].Term.Revision })

			// Every term, in order (a term may show twice: once before its
			// start time is published, once after).
			last := won[len(won)-1].Term.Revision
			var got []int64
			timeout := time.After(10 * time.Second)
			for len(got) == 0 || got[len(got)-1] < last {
				select {
				case l, ok := <-seen:
					require.True(t, ok, "observer ended")
					assert.False(t, l.Gap, "a gap while connected: %+v", l)
					if !l.IsZero() && (len(got) == 0 || got[len(got)-1] != l.Term.Revision) {
						got = append(got, l.Term.Revision)
					}
				case <-timeout:
					t.Fatalf("observed %d of %d terms: %v", len(got), terms, got)
				}
			}
			var want []int64
			for _, l := range won {
				want = append(want, l.Term.Revision)
			}
			assert.Equal(t, want, got, "observed %d of %d terms", len(got), terms)
			stopObserving()
			for range seen {
			}
		})
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// An observer cut off from etcd while terms pass and the history is
// compacted cannot see those terms: it yields the leader it finds once
// back, with Gap set, and goes on from there without gaps.
func TestObserveGap(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	p, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	watcher, err := newClient(t, etcdtest.Client(t, cl, p.URL())).Election("gap")
	require.NoError(t, err)
	e, err := newClient(t, direct).Election("gap")
	require.NoError(t, err)

	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := make(chan lease.Leader, 100)
	go func() {
		defer close(seen)
		for l := range watcher.Observe(octx) {
			seen <- l
		}
	}()
	next := func() lease.Leader {
		t.Helper()
		select {
		case l, ok := <-seen:
			require.True(t, ok, "observer ended")
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("nothing observed")
			return lease.Leader{}
		}
	}
	require.True(t, next().IsZero())
	first, err := e.Campaign(ctx, "first")
	require.NoError(t, err)
	for l := next(); l.Term != first.Fence() || l.Since.IsZero(); l = next() {
		require.False(t, l.Gap)
	}

	// Cut off, the observer misses two terms that etcd then compacts away.
	p.Blackhole()
	require.NoError(t, first.Resign(ctx))
	missed, err := e.Campaign(ctx, "missed")
	require.NoError(t, err)
	require.NoError(t, missed.Resign(ctx))
	last, err := e.Campaign(ctx, "last")
	require.NoError(t, err)
	resp, err := direct.Get(ctx, "probe")
	require.NoError(t, err)
	_, err = direct.Compact(ctx, resp.Header.Revision)
	require.NoError(t, err)
	p.Resume()
	p.ResetConns()

	l := next()
	assert.True(t, l.Gap, "the leader after a gap says so: %+v", l)
	assert.Equal(t, last.Fence(), l.Term)
	assert.Equal(t, "last", l.Value)

	// Then every change again, without Gap.
	require.NoError(t, last.Proclaim(ctx, "last v2"))
	l = next()
	assert.False(t, l.Gap)
	assert.Equal(t, "last v2", l.Value)
	require.NoError(t, last.Resign(ctx))
	l = next()
	assert.False(t, l.Gap)
	assert.True(t, l.IsZero())
	stop()
	for range seen {
	}
}

// A plain Lease with a lock-delay leads an election's name and is force
// released: for the whole delay nobody leads. Leader returns a
// *NoLeaderError (matching ErrNoLeader) with the delay's end, Observe
// reports the end of the vanished term as no leader with that end, and
// then the next candidate once the delay is over.
func TestElectionLockDelayNoLeader(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	ctx := ctxT(t, 30*time.Second)
	const name = "delayed-election"
	const delay = 3 * time.Second
	held, err := newClient(t, etcdtest.Client(t, cl)).Acquire(ctx, name, lease.WithLockDelay(delay))
	require.NoError(t, err)
	op := newClient(t, direct)
	e, err := op.Election(name)
	require.NoError(t, err)

	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := make(chan lease.Leader, 100)
	go func() {
		defer close(seen)
		for l := range e.Observe(octx) {
			seen <- l
		}
	}()
	next := func() lease.Leader {
		t.Helper()
		select {
		case l, ok := <-seen:
			require.True(t, ok, "observer ended")
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("nothing observed")
			return lease.Leader{}
		}
	}
	first := next()
	assert.Equal(t, held.Fence(), first.Term, "the lease leads: %+v", first)
	assert.True(t, first.DelayedUntil.IsZero())
	for range 20 { // the marker sorts before or after the record: either way the lease leads
		ldr, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, held.Fence(), ldr.Term)
	}
	w := campaignLater(ctx, t, newClient(t, etcdtest.Client(t, cl)), name, "next")
	waitRecords(t, direct, name, 3)

	_, err = newAdmin(t, direct).ForceRelease(ctx, name, held.Fence().Revision)
	require.NoError(t, err)
	released := time.Now()
	<-held.Done()

	ldr, err := e.Leader(ctx)
	require.ErrorIs(t, err, lease.ErrNoLeader, "the vanished term leads nothing: got %+v", ldr)
	var nl *lease.NoLeaderError
	require.ErrorAs(t, err, &nl)
	assert.Equal(t, name, nl.Election)
	assert.WithinRange(t, nl.DelayedUntil, released.Add(delay-time.Second), released.Add(delay+3*time.Second))
	t.Logf("Leader: %v", err)

	// The record goes first, then ForceRelease moves the marker to a
	// lease of the delay: Observe may report the delay's end as the
	// holder's session would have set it, then as moved.
	ended := next()
	assert.True(t, ended.IsZero(), "Observe reports the end of the vanished term: %+v", ended)
	assert.False(t, ended.DelayedUntil.IsZero(), "and the delay: %+v", ended)
	assert.Less(t, time.Since(released), delay, "reported within the delay")
	for ended.DelayedUntil.After(released.Add(delay + 3*time.Second)) {
		ended = next()
		require.True(t, ended.IsZero(), "nobody leads during the delay: %+v", ended)
	}
	assert.WithinRange(t, ended.DelayedUntil, released.Add(delay-time.Second), released.Add(delay+3*time.Second))

	tw := w.term(t, 10*time.Second)
	assert.GreaterOrEqual(t, time.Since(released), delay)
	for l := next(); l.Term != tw.Fence() || l.Since.IsZero(); l = next() {
		assert.True(t, l.IsZero() || l.Term == tw.Fence(), "nobody else leads meanwhile: %+v", l)
	}
	require.NoError(t, tw.Resign(ctx))
	stop()
	for range seen {
	}
}

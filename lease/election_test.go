package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/etcdtest"
	"github.com/fencekit/fencekit/internal/faultproxy"
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
						st, err := newClient(t, direct).Inspect(ctx, "failover")
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

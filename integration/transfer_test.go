//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
)

// recordingStore is a guard store that keeps, in order, every token it
// accepted, so that a test can check them apart from the guard's own
// check.
type recordingStore struct {
	guard.MemoryStore
	mu       sync.Mutex
	accepted []int64
	refused  int
}

func (s *recordingStore) Advance(ctx context.Context, resource string, t fence.Token) (fence.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mark, err := s.MemoryStore.Advance(ctx, resource, t)
	if err == nil {
		s.accepted = append(s.accepted, t.Revision)
	} else {
		s.refused++
	}
	return mark, err
}

// electionRing is n candidates of one election, each with its own Client
// and etcd connection, that campaign again whenever their term ends and
// write through a guard while they lead.
type electionRing struct {
	name    string
	elects  []*lease.Election
	proxies []*faults.Proxy
	led     chan ledTerm // each new term, as its Campaign returns
	cur     atomic.Pointer[lease.Term]
	overlap atomic.Int32 // terms that began while their predecessor's Done was open
	wg      sync.WaitGroup
}

// ledTerm is a term that began, and who leads it.
type ledTerm struct {
	i    int
	term *lease.Term
}

func newElectionRing(t *testing.T, cl *etcdtest.Cluster, name string, n int) *electionRing {
	t.Helper()
	r := &electionRing{name: name, led: make(chan ledTerm, n)}
	members := cl.Members()
	for i := range n {
		p, err := cl.NewProxy(members[i%len(members)])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c, err := lease.New(cl.ClientThrough(t, p), lease.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		e, err := c.Election(name)
		if err != nil {
			t.Fatal(err)
		}
		r.elects, r.proxies = append(r.elects, e), append(r.proxies, p)
	}
	return r
}

// run starts the candidates; each writes through g while it leads.
func (r *electionRing) run(ctx context.Context, t *testing.T, g *guard.Guard) {
	for i, e := range r.elects {
		r.wg.Go(func() {
			for ctx.Err() == nil {
				term, err := e.Campaign(ctx, fmt.Sprintf("c%d", i))
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, lease.ErrRetryable) {
						t.Errorf("candidate %d: %v", i, err)
						return
					}
					continue
				}
				if prev := r.cur.Swap(term); prev != nil {
					select {
					case <-prev.Done():
					default:
						r.overlap.Add(1)
					}
				}
				select {
				case r.led <- ledTerm{i, term}:
				case <-ctx.Done():
				}
				r.lead(ctx, term, g)
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
				_ = term.Release(rctx)
				cancel()
			}
		})
	}
}

// lead writes through g with the term's token until the term ends.
func (r *electionRing) lead(ctx context.Context, term *lease.Term, g *guard.Guard) {
	tctx, cancel := term.Context(ctx)
	defer cancel()
	tgt := guard.Target{Resource: r.name, Lock: r.name}
	for tctx.Err() == nil {
		_ = g.Do(tctx, tgt, term.Fence(), func(context.Context) error { return nil })
		time.Sleep(time.Millisecond)
	}
}

// next waits for the next term to begin.
func (r *electionRing) next(t *testing.T, d time.Duration) ledTerm {
	t.Helper()
	select {
	case lt := <-r.led:
		return lt
	case <-time.After(d):
		t.Fatalf("no new term within %v", d)
	}
	return ledTerm{}
}

// Five candidates, 50 transfers to a waiting candidate chosen at random,
// with the leader writing through a guard and other locks cycling on the
// same cluster: every transfer lands on the chosen candidate, no term
// begins while its predecessor's is live, and the guard accepts tokens in
// rising order only. The gap from the old term's end to the new term's
// start is logged.
func TestTransferUnderLoad(t *testing.T) {
	for _, members := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			cl := etcdtest.Start(t, etcdtest.WithMembers(members))
			ring := newElectionRing(t, cl, "transfer", 5)
			store := &recordingStore{}
			g, err := guard.New(store)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			stop, halt := context.WithCancel(ctx)
			defer func() { halt(); ring.wg.Wait() }()
			ring.run(stop, t, g)
			loadLocks(stop, t, cl, &ring.wg)

			cur := ring.next(t, 20*time.Second)
			var gaps, took []time.Duration
			rng := rand.New(rand.NewPCG(1, uint64(members)))
			for n := range 50 {
				cands := waitCandidates(ctx, t, ring.elects[0], 4)
				to := cands[rng.IntN(len(cands))]
				start := time.Now()
				ended := make(chan time.Time, 1)
				go func() { <-cur.term.Done(); ended <- time.Now() }()
				if err := cur.term.Transfer(ctx, to); err != nil {
					t.Fatalf("transfer %d to %v: %v", n, to, err)
				}
				if !errors.Is(cur.term.Err(), lease.ErrTransferred) {
					t.Fatalf("transfer %d: the old term's Err is %v", n, cur.term.Err())
				}
				next := ring.next(t, 10*time.Second)
				if next.term.Fence() != to.Term {
					t.Fatalf("transfer %d: %v leads, not the chosen %v", n, next.term.Fence(), to.Term)
				}
				if next.term.Fence().Revision <= cur.term.Fence().Revision {
					t.Fatalf("transfer %d: term %d after %d", n, next.term.Fence().Revision, cur.term.Fence().Revision)
				}
				gaps = append(gaps, next.term.Acquired().Sub(<-ended))
				took = append(took, next.term.Acquired().Sub(start))
				cur = next
			}
			if n := ring.overlap.Load(); n != 0 {
				t.Errorf("%d terms began while their predecessor's was live", n)
			}
			store.mu.Lock()
			accepted, refused := slices.Clone(store.accepted), store.refused
			store.mu.Unlock()
			if !slices.IsSorted(accepted) {
				t.Errorf("the guard accepted tokens out of order: %v", accepted)
			}
			if len(accepted) == 0 {
				t.Error("no write was accepted")
			}
			t.Logf("%d members: old term's end to new term's start: %s; Transfer call to new term's start: %s; %d writes accepted, %d stale refused",
				members, quantiles(gaps), quantiles(took), len(accepted), refused)
		})
	}
}

// loadLocks keeps two other locks cycling on cl until ctx ends.
func loadLocks(ctx context.Context, t *testing.T, cl *etcdtest.Cluster, wg *sync.WaitGroup) {
	for i := range 2 {
		c, err := lease.New(cl.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := c.Acquire(ctx, fmt.Sprintf("load-%d", i))
				if err == nil {
					_ = l.Release(context.WithoutCancel(ctx))
				}
			}
		})
	}
}

// waitCandidates waits until n candidates wait in e, and returns them.
func waitCandidates(ctx context.Context, t *testing.T, e *lease.Election, n int) []lease.Candidate {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cands, err := e.Candidates(ctx)
		if err == nil && len(cands) == n {
			return cands
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d candidates waiting, not %d (%v)", len(cands), n, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// quantiles formats the median, 99th percentile and maximum of ds.
func quantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %v p99 %v max %v (n=%d)", s[len(s)/2], s[len(s)*99/100], s[len(s)-1], len(s))
}

// A Transfer by a leader cut off from etcd fails safe: it returns an
// error (the outcome of its transaction unknown, or its read of the queue
// failed, in which case nothing changed), no other candidate leads while
// the old term's Done is open, and once the old term is over another
// candidate leads with a higher term.
func TestTransferPartitionedLeader(t *testing.T) {
	cl := etcdtest.Start(t)
	ring := newElectionRing(t, cl, "transfer-cut", 3)
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop, halt := context.WithCancel(ctx)
	defer func() { halt(); ring.wg.Wait() }()
	ring.run(stop, t, g)
	cur := ring.next(t, 20*time.Second)
	cands := waitCandidates(ctx, t, ring.elects[(cur.i+1)%3], 2)

	ring.proxies[cur.i].Pause()
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	err = cur.term.Transfer(tctx, cands[1])
	tcancel()
	if err == nil {
		t.Fatal("a leader cut off from etcd transferred its term")
	}
	var nc *lease.NotCandidateError
	if errors.As(err, &nc) {
		t.Fatalf("refused as if the candidate were not waiting: %v", err)
	}
	t.Logf("transfer while cut off: %v; term: %v", err, cur.term.Err())
	next := ring.next(t, 20*time.Second)
	ring.proxies[cur.i].Resume()
	if !closedCh(cur.term.Done()) {
		t.Fatal("a new term began while the cut-off leader's term was live")
	}
	if next.term.Fence().Revision <= cur.term.Fence().Revision {
		t.Fatalf("term %d after %d", next.term.Fence().Revision, cur.term.Fence().Revision)
	}
	if n := ring.overlap.Load(); n != 0 {
		t.Errorf("%d terms began while their predecessor's was live", n)
	}
}

func closedCh(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

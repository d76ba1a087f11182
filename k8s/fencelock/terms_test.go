package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"github.com/fencekit/fencekit/lease"
	"k8s.io/client-go/tools/leaderelection"
)

// envCount reads a count from the environment (for longer runs from
// scripts/), or returns def.
func envCount(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// termRec is one term of the re-campaign test, on the test process's
// monotonic clock.
type termRec struct {
	tok          fence.Token
	start        time.Time
	lost         time.Time // when the term's ctx was cancelled
	lastReturned time.Time // when its last runnable returned
	endedBy      string    // the fault injected while it led ("" if none)
}

type recampaign struct {
	t   *testing.T
	g   *guard.Guard
	tgt guard.Target

	mu       sync.Mutex
	terms    []*termRec
	running  int
	overlaps []string
	last     fence.Token // the token of the newest accepted write
	nAcc     int         // accepted writes
	backward []string    // accepted writes whose token is below the one before
	strays   []error     // the stray writes' outcomes
	strayWG  sync.WaitGroup
	quit     chan struct{} // closed at the end: a stray with no later term writes nothing
}

// newTerm is Terms.New: two writers and a slow stopper, plus a stray
// goroutine that holds the token past the term and writes once the next
// term has written.
func (r *recampaign) newTerm(ctx context.Context) ([]fencelock.Runnable, error) {
	tok, ok := fence.FromContext(ctx)
	if !ok {
		return nil, errors.New("the term's ctx carries no token")
	}
	rec := &termRec{tok: tok, start: time.Now()}
	r.mu.Lock()
	if r.running > 0 {
		r.overlaps = append(r.overlaps, fmt.Sprintf("term %d started while %d runnables of the last term ran", tok.Revision, r.running))
	}
	r.terms = append(r.terms, rec)
	r.mu.Unlock()
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		rec.lost = time.Now()
		r.mu.Unlock()
	})
	r.strayWG.Go(func() { r.stray(tok) })
	track := func(run func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			r.mu.Lock()
			r.running++
			r.mu.Unlock()
			err := run(ctx)
			r.mu.Lock()
			r.running--
			rec.lastReturned = time.Now()
			r.mu.Unlock()
			return err
		}
	}
	return []fencelock.Runnable{
		{Name: "writer-a", Run: track(r.writer)},
		{Name: "writer-b", Run: track(r.writer)},
		{Name: "slow-stop", Run: track(func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // a flush on the way out
			return nil
		})},
	}, nil
}

// writer writes with the term's token until ctx ends.
func (r *recampaign) writer(ctx context.Context) error {
	tok, _ := fence.FromContext(ctx)
	for ctx.Err() == nil {
		err := r.g.Do(ctx, r.tgt, tok, func(context.Context) error {
			r.accept(tok)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("write refused while leading: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// accept records an accepted write (only a count and the last token, so
// that the heap figures show the library's memory, not the history's).
func (r *recampaign) accept(tok fence.Token) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tok.Revision < r.last.Revision {
		r.backward = append(r.backward, fmt.Sprintf("token %d accepted after %d", tok.Revision, r.last.Revision))
	}
	r.last = tok
	r.nAcc++
}

// stray waits until a later term has written, then writes with tok.
func (r *recampaign) stray(tok fence.Token) {
	for {
		r.mu.Lock()
		newer := r.last.Revision > tok.Revision
		r.mu.Unlock()
		if newer {
			break
		}
		select {
		case <-r.quit:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	err := r.g.Do(context.Background(), r.tgt, tok, func(context.Context) error {
		r.accept(tok)
		return nil
	})
	r.mu.Lock()
	r.strays = append(r.strays, err)
	r.mu.Unlock()
}

func (r *recampaign) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.terms)
}

// TestRunTermsRecampaign: one candidate leads through Lock.RunTerms while
// its terms are lost again and again (its session revoked, its links to
// etcd cut or stalled past the TTL, and with three members the etcd leader
// killed during the cut). Every term's runnables must have returned
// before the next term starts, tokens rise strictly, and a stray goroutine
// that writes with an ended term's token after the next term wrote is
// refused. The time from each loss to the next term is at most TTL + 1 s.
func TestRunTermsRecampaign(t *testing.T) {
	for _, members := range []int{1, 3} {
		t.Run(fmt.Sprintf("members=%d", members), func(t *testing.T) {
			recampaignRun(t, members, envCount(t, "FENCEKIT_K8S_TERMS", 50))
		})
	}
}

func recampaignRun(t *testing.T, members, want int) {
	c := etcdtest.Start(t, etcdtest.WithMembers(members))
	admin := c.Client(t)
	ps := c.Proxies(t)
	cli := c.ClientThrough(t, ps...)
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	r := &recampaign{t: t, g: g, tgt: guard.Target{Resource: "orders", Lock: "orders"}, quit: make(chan struct{})}
	lock, err := fencelock.New(cli, "orders", "pod-0", fencelock.WithTTL(testTTL), fencelock.WithSafetyMargin(testMargin))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- lock.RunTerms(ctx, fencelock.Terms{
			Elector: leaderelection.LeaderElectionConfig{
				LeaseDuration: testTTL, RenewDeadline: 400 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
			},
			New:         r.newTerm,
			StopTimeout: time.Second,
		})
	}()
	waitTerms := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for r.count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("term %d did not start within 10 s", n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitTerms(1)
	var mem []uint64
	for i := 0; r.count() <= want; i++ {
		n := r.count()
		time.Sleep(50 * time.Millisecond) // let the term write
		var f faults.Fault
		hold := testTTL + 100*time.Millisecond
		switch i % 3 {
		case 0:
			f, hold = faults.RevokeHolder(admin, faults.LockPrefix(lease.DefaultPrefix, "orders")), 0
		case 1:
			f = faults.Partition(ps...)
		case 2: // paused: the candidate's traffic held past the TTL, then delivered late
			for _, p := range ps {
				p.Pause()
			}
			time.Sleep(hold)
			for _, p := range ps {
				p.Resume()
			}
		}
		if members == 3 && i%3 == 1 { // the etcd leader killed while the candidate is cut off
			f = together(f, faults.KillLeader(c.FaultMembers()...))
		}
		kind := "pause"
		if f != nil {
			kind = f.Kind()
		}
		r.mu.Lock()
		if last := r.terms[len(r.terms)-1]; last.endedBy == "" {
			last.endedBy = kind
		}
		r.mu.Unlock()
		if f != nil {
			err := faults.Apply(ctx, f, hold)
			if errors.Is(err, faults.ErrNoTarget) {
				continue // the term ended on its own just before (a loaded machine): the next one comes anyway
			}
			if err != nil && !errors.Is(err, faults.ErrOutcomeUnknown) {
				t.Fatalf("fault %d (%s): %v", i, f.Kind(), err)
			}
		}
		waitTerms(n + 1)
		if i%10 == 0 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mem = append(mem, ms.HeapAlloc)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunTerms: %v", err)
	}
	close(r.quit)
	r.strayWG.Wait()
	r.check(t, want, mem)
}

// check asserts the histories and logs the figures.
func (r *recampaign) check(t *testing.T, want int, mem []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.overlaps) > 0 {
		t.Errorf("a term started before the last one's runnables returned: %v", r.overlaps)
	}
	if len(r.terms) < want {
		t.Errorf("%d terms, want at least %d", len(r.terms), want)
	}
	var gaps []time.Duration
	byKind := map[string][]time.Duration{}
	for i, tr := range r.terms {
		if i == 0 {
			continue
		}
		prev := r.terms[i-1]
		if tr.tok.Revision <= prev.tok.Revision {
			t.Errorf("term %d's token %d not above the last term's %d", i, tr.tok.Revision, prev.tok.Revision)
		}
		if prev.lastReturned.After(tr.start) {
			t.Errorf("term %d started before term %d's runnables returned", i, i-1)
		}
		gap := tr.start.Sub(prev.lost)
		kind := prev.endedBy
		if kind == "" {
			kind = "none (lost on its own)"
		}
		byKind[kind] = append(byKind[kind], gap)
		if !strings.Contains(kind, "leader") {
			gaps = append(gaps, gap) // etcd answered throughout: the bound applies
		}
	}
	if len(r.backward) > 0 {
		t.Errorf("writes accepted out of token order: %v", r.backward)
	}
	refused := 0
	for _, err := range r.strays {
		if errors.Is(err, fence.ErrStale) {
			refused++
		} else {
			t.Errorf("a stray write of an ended term was not refused as stale: %v", err)
		}
	}
	for kind, ds := range byKind {
		slices.Sort(ds)
		t.Logf("loss to next term after %s: %d terms, median %v, max %v", kind, len(ds), ds[len(ds)/2], ds[len(ds)-1])
	}
	if len(mem) >= 10 { // a long run: the heap must stay flat
		first, last := slices.Min(mem[1:4]), slices.Min(mem[len(mem)-3:])
		if last > 2*first+8<<20 {
			t.Errorf("heap grew from %d to %d bytes over %d terms", first, last, len(r.terms))
		}
	}
	slices.Sort(gaps)
	if len(gaps) > 0 {
		if mx := gaps[len(gaps)-1]; mx > testTTL+time.Second {
			t.Errorf("loss to next term: max %v, want at most TTL + 1 s", mx)
		}
		t.Logf("%d terms (tokens strictly rising), %d writes accepted in token order, %d stray writes of ended terms refused; "+
			"loss to next term: median %v, p90 %v, max %v (TTL %v); heap after GC every 10 terms: %v",
			len(r.terms), r.nAcc, refused, gaps[len(gaps)/2], gaps[len(gaps)*9/10], gaps[len(gaps)-1], testTTL, mem)
	}
}

// both is two faults injected and healed together, each healed in the
// order injected.
type both [2]faults.Fault

func together(a, b faults.Fault) faults.Fault { return both{a, b} }

func (f both) Kind() string { return f[0].Kind() + "+" + f[1].Kind() }

func (f both) Inject(ctx context.Context) error {
	if err := f[0].Inject(ctx); err != nil {
		return err
	}
	return f[1].Inject(ctx)
}

func (f both) Heal(ctx context.Context) error {
	return errors.Join(f[0].Heal(ctx), f[1].Heal(ctx))
}

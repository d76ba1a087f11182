package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
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

// The failover tests run client-go's real LeaderElector, one per
// candidate, each with its own Lock on its own etcd client behind fault
// proxies, and take the leader down again and again: its Run's ctx
// cancelled (kill), its links cut (partition), or its writer stopped
// holding its token while its links are cut (pause: a goroutine cannot
// be stopped with SIGSTOP, so the elector's goroutines run on; the writer
// wakes after the successor wrote). Every leader writes to one guarded
// resource all the time with the token from its ctx.

const (
	testTTL    = time.Second
	testMargin = 200 * time.Millisecond
	candidates = 4
)

// event is one callback of one candidate, on the test process's
// monotonic clock.
type event struct {
	cand    int
	started bool // OnStartedLeading; else OnStoppedLeading
	at      time.Time
	tok     fence.Token
}

type write struct {
	cand int
	tok  fence.Token
}

type world struct {
	t      *testing.T
	g      *guard.Guard
	tgt    guard.Target
	mu     sync.Mutex
	events []event
	writes []write // accepted, in the guard's order
	stale  []error // refusals of the paused writers' late writes
	cands  []*cand
	logs   ringLog
}

// ringLog keeps the last lines written to it.
type ringLog struct {
	mu    sync.Mutex
	lines []string
}

func (r *ringLog) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, time.Now().Format("05.000")+" "+string(p))
	if len(r.lines) > 200 {
		r.lines = r.lines[len(r.lines)-200:]
	}
	return len(p), nil
}

type cand struct {
	id      int
	w       *world
	lock    *fencelock.Lock
	proxies []*faults.Proxy
	cfg     leaderelection.LeaderElectionConfig

	mu     sync.Mutex
	kill   context.CancelFunc
	pause  chan struct{} // non-nil: the writer stops at its next write
	paused chan struct{} // closed when it has stopped, holding its token
}

func newWorld(t *testing.T, c *etcdtest.Cluster, name string) *world {
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, g: g, tgt: guard.Target{Resource: "orders", Lock: name}}
	for i := range candidates {
		ps := c.Proxies(t)
		cli := c.ClientThrough(t, ps...)
		log := slog.New(slog.NewTextHandler(&w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("cand", i)
		lock, err := fencelock.New(cli, name, fmt.Sprintf("cand-%d", i),
			fencelock.WithTTL(testTTL), fencelock.WithSafetyMargin(testMargin), fencelock.WithLogger(log),
			fencelock.WithLeaseOptions(lease.WithLogger(log)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lock.Close() })
		cd := &cand{id: i, w: w, lock: lock, proxies: ps}
		cd.cfg, err = lock.Config(leaderelection.LeaderElectionConfig{
			LeaseDuration: testTTL, RenewDeadline: 400 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
			Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: cd.lead, OnStoppedLeading: cd.stopped},
		})
		if err != nil {
			t.Fatal(err)
		}
		w.cands = append(w.cands, cd)
	}
	return w
}

// run runs every candidate's elector again and again until ctx ends.
func (w *world) run(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, cd := range w.cands {
		wg.Go(func() {
			for ctx.Err() == nil {
				el, err := leaderelection.NewLeaderElector(cd.cfg)
				if err != nil {
					w.t.Error(err)
					return
				}
				rctx, cancel := context.WithCancel(ctx)
				cd.mu.Lock()
				cd.kill = cancel
				cd.mu.Unlock()
				el.Run(rctx)
				cancel()
			}
		})
	}
	return &wg
}

func (w *world) record(e event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, e)
}

// lead is OnStartedLeading: write with the ctx's token until ctx ends.
func (cd *cand) lead(ctx context.Context) {
	tok, ok := fence.FromContext(ctx)
	cd.w.record(event{cand: cd.id, started: true, at: time.Now(), tok: tok})
	if !ok {
		cd.w.t.Errorf("cand-%d: OnStartedLeading's ctx carries no fencing token", cd.id)
		return
	}
	if got, err := cd.lock.Fence(); err != nil || got != tok {
		cd.w.t.Errorf("cand-%d: Lock.Fence() = %v, %v; the ctx carries %v", cd.id, got, err, tok)
	}
	for ctx.Err() == nil {
		cd.mu.Lock()
		pause, paused := cd.pause, cd.paused
		cd.mu.Unlock()
		if pause != nil {
			close(paused)
			<-pause // "paused" until the successor has written
			cd.w.lateWrite(cd.id, tok)
			return
		}
		err := cd.w.g.Do(ctx, cd.w.tgt, tok, func(context.Context) error {
			cd.w.mu.Lock()
			cd.w.writes = append(cd.w.writes, write{cd.id, tok})
			cd.w.mu.Unlock()
			return nil
		})
		if err != nil && ctx.Err() == nil {
			cd.w.t.Errorf("cand-%d: write refused while leading: %v", cd.id, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (cd *cand) stopped() { cd.w.record(event{cand: cd.id, at: time.Now()}) }

// lateWrite is a paused leader's write with its old token.
func (w *world) lateWrite(id int, tok fence.Token) {
	err := w.g.Do(context.Background(), w.tgt, tok, func(context.Context) error {
		w.mu.Lock()
		w.writes = append(w.writes, write{id, tok})
		w.mu.Unlock()
		return nil
	})
	w.mu.Lock()
	w.stale = append(w.stale, err)
	w.mu.Unlock()
}

// leader returns the candidate leading now (started, not stopped) and its
// number of leaderships so far.
func (w *world) leader() (id, terms int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id = -1
	for _, e := range w.events {
		switch {
		case e.started:
			id, terms = e.cand, terms+1
		case e.cand == id:
			id = -1
		}
	}
	return id, terms
}

func (w *world) wait(what string, d time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			w.dump()
			w.t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// dump logs the last events and what each candidate sees.
func (w *world) dump() {
	w.mu.Lock()
	evs := slices.Clone(w.events)
	w.mu.Unlock()
	if len(evs) > 12 {
		evs = evs[len(evs)-12:]
	}
	for _, e := range evs {
		w.t.Logf("event cand-%d started=%v term=%d at %v", e.cand, e.started, e.tok.Revision, time.Since(e.at).Round(time.Millisecond))
	}
	w.logs.mu.Lock()
	for _, line := range w.logs.lines[max(0, len(w.logs.lines)-80):] {
		w.t.Log(strings.TrimSpace(line))
	}
	w.logs.mu.Unlock()
	for _, cd := range w.cands {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		rec, _, err := cd.lock.Get(ctx)
		cancel()
		tok, ferr := cd.lock.Fence()
		w.t.Logf("cand-%d: Get %+v, %v; Fence %v, %v; Check %v", cd.id, rec, err, tok, ferr, cd.lock.Check(nil))
	}
}

// writesBy counts accepted writes with tok.
func (w *world) writesBy(tok fence.Token) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, wr := range w.writes {
		if wr.tok == tok {
			n++
		}
	}
	return n
}

func (w *world) currentToken(id int) fence.Token {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.events) - 1; i >= 0; i-- {
		if e := w.events[i]; e.cand == id && e.started {
			return e.tok
		}
	}
	return fence.Token{}
}

type fault int

const (
	kill fault = iota
	partition
	pause
)

func (f fault) String() string { return [...]string{"kill", "partition", "pause"}[f] }

// failover takes the current leader down with f and returns the time
// until another candidate's OnStartedLeading.
func (w *world) failover(f fault) time.Duration {
	w.t.Helper()
	w.wait("a leader that wrote", 10*time.Second, func() bool {
		id, _ := w.leader()
		return id >= 0 && w.writesBy(w.currentToken(id)) > 0
	})
	id, terms := w.leader()
	cd := w.cands[id]
	var heal faults.Fault
	cd.mu.Lock()
	if f == pause {
		cd.pause, cd.paused = make(chan struct{}), make(chan struct{})
	}
	pauseCh, pausedCh := cd.pause, cd.paused
	cd.mu.Unlock()
	if f == pause {
		<-pausedCh
	}
	at := time.Now()
	switch f {
	case kill:
		cd.mu.Lock()
		cd.kill()
		cd.mu.Unlock()
	case partition, pause:
		heal = faults.Partition(cd.proxies...)
		if err := heal.Inject(context.Background()); err != nil {
			w.t.Fatal(err)
		}
	}
	var took time.Duration
	w.t.Logf("fault %v on cand-%d", f, id)
	w.wait("the next leader", testTTL+3*time.Second, func() bool {
		// Usually another candidate; the one taken down may lead again
		// when it queued before the others (after quick kills).
		nid, n := w.leader()
		if nid >= 0 && n > terms {
			took = w.startedAfter(at).Sub(at)
			return true
		}
		return false
	})
	if f == pause {
		nid, _ := w.leader()
		tok := w.currentToken(nid)
		w.wait("the successor's first write", 5*time.Second, func() bool { return w.writesBy(tok) > 0 })
		w.mu.Lock()
		before := len(w.stale)
		w.mu.Unlock()
		close(pauseCh)
		w.wait("the paused writer's late write", 5*time.Second, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.stale) > before
		})
		cd.mu.Lock()
		cd.pause, cd.paused = nil, nil
		cd.mu.Unlock()
	}
	if heal != nil {
		if err := heal.Heal(context.Background()); err != nil {
			w.t.Fatal(err)
		}
	}
	return took
}

// startedAfter returns the time of the first OnStartedLeading after at.
func (w *world) startedAfter(at time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.started && e.at.After(at) {
			return e.at
		}
	}
	return time.Time{}
}

// check asserts the safety properties over the whole history and returns
// the number of overlaps (a leadership that started before the previous
// one stopped).
func (w *world) check() (overlaps int) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	type span struct {
		cand        int
		start, stop time.Time
		tok         fence.Token
	}
	var spans []span
	open := map[int]int{} // cand -> index in spans
	events := slices.Clone(w.events)
	slices.SortStableFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	for _, e := range events {
		if e.started {
			open[e.cand] = len(spans)
			spans = append(spans, span{cand: e.cand, start: e.at, tok: e.tok})
			continue
		}
		if i, ok := open[e.cand]; ok {
			spans[i].stop = e.at
			delete(open, e.cand)
		}
	}
	for i := 1; i < len(spans); i++ {
		prev, cur := spans[i-1], spans[i]
		if prev.stop.IsZero() || !prev.stop.Before(cur.start) {
			overlaps++
			w.t.Errorf("cand-%d started leading (term %d) at +%v before cand-%d stopped (term %d, stopped at +%v)",
				cur.cand, cur.tok.Revision, cur.start.Sub(spans[0].start), prev.cand, prev.tok.Revision, prev.stop.Sub(spans[0].start))
		}
		if cur.tok.Revision <= prev.tok.Revision {
			w.t.Errorf("term %d after term %d", cur.tok.Revision, prev.tok.Revision)
		}
	}
	// Accepted writes: tokens never go back, and each term is one
	// candidate's.
	owner := map[int64]int{}
	for i, wr := range w.writes {
		if o, ok := owner[wr.tok.Revision]; ok && o != wr.cand {
			w.t.Errorf("term %d written by cand-%d and cand-%d", wr.tok.Revision, o, wr.cand)
		}
		owner[wr.tok.Revision] = wr.cand
		if i > 0 && wr.tok.Revision < w.writes[i-1].tok.Revision {
			w.t.Errorf("write %d with term %d accepted after term %d", i, wr.tok.Revision, w.writes[i-1].tok.Revision)
		}
	}
	for _, err := range w.stale {
		if !errors.As(err, new(*fence.RefusedError)) || !errors.Is(err, fence.ErrStale) {
			w.t.Errorf("a paused leader's late write: got %v, want a *fence.RefusedError matching fence.ErrStale", err)
		}
	}
	return overlaps
}

func TestFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("failover trials take about a minute")
	}
	plans := []struct {
		members int
		faults  []fault
	}{
		{1, plan(20, 5, 5)},
		{3, plan(14, 4, 4)},
	}
	var all []time.Duration
	byFault := map[fault][]time.Duration{}
	for _, p := range plans {
		t.Run(fmt.Sprintf("members=%d", p.members), func(t *testing.T) {
			c := etcdtest.Start(t, etcdtest.WithMembers(p.members))
			w := newWorld(t, c, "failover")
			ctx, cancel := context.WithCancel(context.Background())
			wg := w.run(ctx)
			defer func() {
				cancel()
				wg.Wait()
				overlaps := w.check()
				t.Logf("members=%d: %d leaderships, %d accepted writes, %d late writes refused, %d overlaps",
					p.members, countStarts(w), len(w.writes), len(w.stale), overlaps)
			}()
			for i, f := range p.faults {
				took := w.failover(f)
				all = append(all, took)
				byFault[f] = append(byFault[f], took)
				if os.Getenv("FENCELOCK_DUMP") != "" && (took > testTTL+time.Second || f == kill && took > 500*time.Millisecond) {
					t.Logf("slow failover %d (%v): %v", i, f, took)
					w.dump()
				}
				if limit := testTTL + time.Second; took > limit {
					t.Errorf("failover %d (%v) took %v, more than TTL + 1 s = %v", i, f, took, limit)
				}
			}
		})
	}
	t.Logf("failovers: %d, %s", len(all), summary(all))
	for _, f := range []fault{kill, partition, pause} {
		t.Logf("  %-9v %d, %s", f, len(byFault[f]), summary(byFault[f]))
	}
}

// plan interleaves the faults.
func plan(kills, partitions, pauses int) []fault {
	var fs []fault
	for kills+partitions+pauses > 0 {
		for _, f := range []fault{kill, kill, partition, kill, pause} {
			n := map[fault]*int{kill: &kills, partition: &partitions, pause: &pauses}[f]
			if *n > 0 {
				*n--
				fs = append(fs, f)
			}
		}
	}
	return fs
}

func countStarts(w *world) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.started {
			n++
		}
	}
	return n
}

func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %v, max %v", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Lock sets taken in crossing orders under contention and faults: 8
// Clients, each behind its own fault proxy, repeatedly take a random set of
// 2 to 4 of 6 locks (in random name order) and write to each lock's
// resource, twice, over HTTP: guard.Transport sends the set's tokens
// (Set.Context) and the server's guard.Middleware checks, for each
// resource, the token of its lock. Faults meanwhile: partitioned, slowed
// and paused links (the proxy holds every byte), and paused holders (a
// worker freezes mid-set with its link paused past the TTL, like a process
// in a long GC pause, then wakes and writes with the set's tokens as if it
// still held them). Checked: no deadlock (every AcquireAll returns within
// its own deadline, and every Client keeps making progress); no two live
// holders of one lock at once; FIFO per lock (a lock's holders are
// admitted in the order of their revisions: a holder recorded after a
// newer one must have lost its lock, never released it); and each
// resource's history (integration/check: no token backwards, one holder's
// writes contiguous, every acknowledged write applied).
// FENCEKIT_SETS_DURATION sets the length (20 s by default; the issue's
// soak is 60 s), FENCEKIT_SETS_MEMBERS the cluster size (1 or 3).
func TestSetsUnderFaults(t *testing.T) {
	duration := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FENCEKIT_SETS_DURATION")); err == nil {
		duration = d
	}
	members := 1
	if n, err := strconv.Atoi(os.Getenv("FENCEKIT_SETS_MEMBERS")); err == nil {
		members = n
	}
	cl := etcdtest.Start(t, etcdtest.WithMembers(members))
	locks := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	book := newSetBook(locks)
	srv := httptest.NewServer(g.Middleware(func(r *http.Request) (guard.Target, bool) {
		name, ok := strings.CutPrefix(r.URL.Path, "/r/")
		return guard.Target{Resource: name, Lock: name}, ok
	})(http.HandlerFunc(book.serve)))
	defer srv.Close()
	tr := &guard.Transport{Base: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer tr.CloseIdleConnections()
	w := &setWriter{client: &http.Client{Transport: tr}, url: srv.URL + "/r/", book: book}

	const clients = 8
	proxies := make([]*faults.Proxy, clients)
	sets := make([]*lease.Client, clients)
	for i := range clients {
		p, err := cl.NewProxy(cl.Members()[i%members])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies[i] = p
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		c, err := lease.New(cli, lease.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sets[i] = c
	}

	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	var wg sync.WaitGroup
	done := make([]int, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done[i] = setWorker(ctx, t, sets[i], proxies[i], w, locks, uint64(i))
		}()
	}
	faultCount := injectSetFaults(ctx, t, proxies)
	wg.Wait()

	book.mu.Lock()
	defer book.mu.Unlock()
	t.Logf("%v on %d member(s), faults %v: sets completed per client %v; writes accepted %d, refused %d; "+
		"paused holders %d, their late writes accepted %d (no newer holder had written) and refused %d; "+
		"admissions recorded after a newer holder's %d (each lost its lock)",
		duration, members, faultCount, done, book.writes, book.refused, book.pauses, book.lateOK, book.lateRefused, len(book.outOfOrder))
	for i, n := range done {
		if n == 0 {
			t.Errorf("client %d completed no set: stuck?", i)
		}
	}
	for _, l := range book.outOfOrder {
		if errors.Is(l.Err(), lease.ErrReleased) {
			book.violations = append(book.violations, fmt.Sprintf("%s: %v was admitted after a newer holder yet released its lock (not FIFO)", l.Name(), l.Fence()))
		}
	}
	for _, name := range locks {
		h := book.history[name]
		rep, err := check.Check(h.Applied(), h.Acked(), book.state[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %s", name, rep)
		if err := rep.Err(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(book.violations) > 0 {
		t.Fatalf("%d violations, first: %s", len(book.violations), book.violations[0])
	}
}

// setBook is what the workers and the resources saw: the live holder of
// each lock, each resource's state and history, and the problems found.
type setBook struct {
	mu          sync.Mutex
	holder      map[string]*lease.Lease
	releasing   map[*lease.Lease]bool // Release called: etcd may hand the lock on before it returns
	outOfOrder  []*lease.Lease        // admissions recorded after a newer holder's
	history     map[string]*check.History
	state       map[string][]int64 // per resource: the elements it applied
	writes      int
	refused     int
	pauses      int
	lateOK      int
	lateRefused int
	violations  []string
}

func newSetBook(locks []string) *setBook {
	b := &setBook{holder: map[string]*lease.Lease{}, releasing: map[*lease.Lease]bool{},
		history: map[string]*check.History{}, state: map[string][]int64{}}
	for _, l := range locks {
		b.history[l] = &check.History{}
	}
	return b
}

// serve is the resources' handler, behind the guard's middleware: it
// applies a write of the element in the body under the token the guard
// checked (the one of the resource's lock among the set's).
func (b *setBook) serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/r/")
	tok, ok := fence.FromContext(r.Context())
	body, err := io.ReadAll(r.Body)
	elem, perr := strconv.ParseInt(string(body), 10, 64)
	if !ok || tok.Lock != name || err != nil || perr != nil {
		http.Error(w, "bad write", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.state[name] = append(b.state[name], elem)
	b.mu.Unlock()
	b.history[name].Apply(tok.Revision, elem) // serialized per resource by the guard
	w.WriteHeader(http.StatusNoContent)
}

// admit records l as the holder of its lock; a holder before it whose
// lease has not ended yet is a violation. An admission recorded after a
// newer holder's is noted: that holder must turn out to have lost its lock.
func (b *setBook) admit(l *lease.Lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.holder[l.Name()]
	if prev != nil && !b.releasing[prev] && prev.Err() == nil {
		b.violations = append(b.violations, fmt.Sprintf("%s: %v admitted while %v still held it", l.Name(), l.Fence(), prev.Fence()))
	}
	if prev != nil && prev.Fence().Revision > l.Fence().Revision {
		b.outOfOrder = append(b.outOfOrder, l)
		return // the newer holder stays the one to compare with
	}
	if prev != nil {
		delete(b.releasing, prev)
	}
	b.holder[l.Name()] = l
}

// release records that the holder of leases is releasing them.
func (b *setBook) release(leases []*lease.Lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range leases {
		b.releasing[l] = true
	}
}

// setWriter writes to the resources over HTTP, through guard.Transport.
type setWriter struct {
	client *http.Client
	url    string
	book   *setBook
	elems  atomic.Int64
}

// write sends one write to the resource of lock name, with the tokens ctx
// carries, and reports whether the resource accepted it.
func (w *setWriter) write(ctx context.Context, name string) (bool, error) {
	elem := w.elems.Add(1)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.url+name, strings.NewReader(strconv.FormatInt(elem, 10)))
	if err != nil {
		return false, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusNoContent:
		w.book.history[name].Ack(elem)
		return true, nil
	case http.StatusConflict:
		return false, nil
	case http.StatusBadRequest, http.StatusPreconditionRequired:
		return false, fmt.Errorf("%w: PUT %s: status %d", errUnreadable, name, resp.StatusCode)
	}
	return false, fmt.Errorf("PUT %s: status %d", name, resp.StatusCode)
}

// setWorker takes sets until ctx ends, and returns how many it completed.
// One set in ten, the worker pauses: its link and itself freeze past the
// lease TTL, then it writes with the set's tokens regardless.
func setWorker(ctx context.Context, t *testing.T, c *lease.Client, p *faults.Proxy, w *setWriter, locks []string, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 30))
	completed := 0
	for ctx.Err() == nil {
		names := append([]string(nil), locks...)
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:2+rng.IntN(3)]
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		set, err := c.AcquireAll(actx, names)
		cancel()
		if took := time.Since(start); took > 6*time.Second {
			t.Errorf("AcquireAll returned %v after its 5 s deadline", took)
		}
		if err != nil {
			continue // timed out, or lost to a fault: try another set
		}
		for _, l := range set.Leases() {
			w.book.admit(l)
		}
		if rng.IntN(10) == 0 {
			pausedHolder(ctx, t, set, p, w, names)
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = set.Release(rctx) // lost by now, most likely
			cancel()
			continue
		}
		wctx, done := set.Context(ctx)
		for _, name := range names {
			for range 2 {
				ok, err := w.write(wctx, name)
				w.book.wrote(name, ok, err)
			}
		}
		done()
		w.book.release(set.Leases())
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if set.Release(rctx) == nil {
			completed++
		}
		cancel()
	}
	return completed
}

// pausedHolder freezes a holder of set, and its link, for 1.5 TTLs, then
// writes with the set's tokens as a process waking from a pause would,
// unaware that its set has ended.
func pausedHolder(ctx context.Context, t *testing.T, set *lease.Set, p *faults.Proxy, w *setWriter, names []string) {
	if err := faults.Apply(ctx, linkPause(p), 1500*time.Millisecond); err != nil && ctx.Err() == nil {
		t.Errorf("pause: %v", err)
	}
	late := fence.NewTokensContext(context.WithoutCancel(ctx), set.Fences()...)
	w.book.mu.Lock()
	w.book.pauses++
	w.book.mu.Unlock()
	for _, name := range names {
		ok, err := w.write(late, name)
		if err != nil {
			w.book.wrote(name, false, err)
		}
		w.book.mu.Lock()
		if ok {
			w.book.lateOK++
		} else {
			w.book.lateRefused++
		}
		w.book.mu.Unlock()
	}
}

// wrote counts the outcome of a write of a live holder to the resource of
// lock name. A request the guard found missing or malformed is a
// violation: the set's tokens did not travel.
func (b *setBook) wrote(name string, ok bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case ok:
		b.writes++
	case err == nil:
		b.refused++
	case errors.Is(err, errUnreadable):
		b.violations = append(b.violations, fmt.Sprintf("%s: %v", name, err))
	}
}

// errUnreadable reports a write the guard refused as missing or malformed.
var errUnreadable = errors.New("tokens not read")

// linkPause holds every byte through p while injected, as a paused process
// or a frozen VM would leave its connections; Heal forwards them again.
func linkPause(p *faults.Proxy) faults.Fault { return &pauseFault{p: p} }

type pauseFault struct{ p *faults.Proxy }

func (f *pauseFault) Kind() string                 { return faults.KindPause }
func (f *pauseFault) Inject(context.Context) error { f.p.Pause(); return nil }
func (f *pauseFault) Heal(context.Context) error   { f.p.Resume(); return nil }

// injectSetFaults partitions, slows or pauses a random client's link, one
// at a time, until ctx ends, and returns how many faults of each kind it
// injected.
func injectSetFaults(ctx context.Context, t *testing.T, proxies []*faults.Proxy) map[string]int {
	rng := rand.New(rand.NewPCG(1, 2))
	n := map[string]int{}
	for {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(time.Duration(300+rng.IntN(700)) * time.Millisecond):
		}
		p := proxies[rng.IntN(len(proxies))]
		var f faults.Fault
		var hold time.Duration
		switch rng.IntN(3) {
		case 0:
			f, hold = faults.Partition(p), partitionHold
		case 1:
			f, hold = faults.SlowLink(linkDelay, p), slowHold
		default:
			f, hold = linkPause(p), partitionHold
		}
		if err := faults.Apply(ctx, f, hold); err != nil && ctx.Err() == nil {
			t.Errorf("fault: %v", err)
		}
		n[f.Kind()]++
	}
}

package guard_test

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
)

func tok(lock string, rev int64) fence.Token { return fence.Token{Lock: lock, Revision: rev} }

func newGuard(t *testing.T, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(guard.NewMemoryStore(), opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	return g
}

func TestNewValidates(t *testing.T) {
	if _, err := guard.New(nil); err == nil {
		t.Error("New(nil store): got nil error")
	}
	if _, err := guard.New(guard.NewMemoryStore(), nil); err == nil {
		t.Error("New with nil option: got nil error")
	}
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithLogger(nil)); err == nil {
		t.Error("WithLogger(nil): got nil error")
	}
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithMetrics(nil)); err == nil {
		t.Error("WithMetrics(nil): got nil error")
	}
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(nil)); err == nil {
		t.Error("WithVerifier(nil): got nil error")
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := guard.New(guard.NewMemoryStore(), guard.WithCheckTimeout(d)); err == nil {
			t.Errorf("WithCheckTimeout(%v): got nil error", d)
		}
	}
}

// TestMiddlewarePanicsOnMisuse: misuse of the middleware's constructor
// panics when it is called, never per request, so that Middleware returns
// only the standard func(http.Handler) http.Handler.
func TestMiddlewarePanicsOnMisuse(t *testing.T) {
	g := newGuard(t)
	route := func(*http.Request) (guard.Target, bool) { return guard.Target{}, false }
	for name, f := range map[string]func(){
		"nil route":                 func() { g.Middleware(nil) },
		"nil option":                func() { g.Middleware(route, nil) },
		"WithUnfencedMethods(\"\")": func() { guard.WithUnfencedMethods("") },
		"nil handler":               func() { g.Middleware(route)(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	// Chained inline, it serves.
	h := g.Middleware(route)(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("status %d, want 404", rec.Code)
	}
}

// TestDoRule walks one resource through every case of the rule.
func TestDoRule(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t)
	tgt := guard.Target{Resource: "orders/1", Lock: "orders"}
	var applied []fence.Token
	write := func(ctx context.Context) error {
		got, ok := fence.FromContext(ctx)
		if !ok {
			return errors.New("write ctx carries no token")
		}
		applied = append(applied, got)
		return nil
	}
	steps := []struct {
		name    string
		token   fence.Token
		wantErr []error // every one must match; nil means accepted
		mark    int64   // mark afterwards
	}{
		{"first", tok("orders", 5), nil, 5},
		{"equal", tok("orders", 5), nil, 5},
		{"newer", tok("orders", 9), nil, 9},
		{"older", tok("orders", 7), []error{fence.ErrStale}, 9},
		{"wrong lock, higher revision", tok("payments", 100), []error{fence.ErrWrongLock}, 9},
		{"revision zero", tok("orders", 0), []error{fence.ErrInvalid}, 9},
		{"negative revision", tok("orders", -4), []error{fence.ErrInvalid}, 9},
		{"zero token", fence.Token{}, []error{fence.ErrInvalid}, 9},
		{"equal again", tok("orders", 9), nil, 9},
	}
	var wantApplied []fence.Token
	for _, s := range steps {
		err := g.Do(ctx, tgt, s.token, write)
		if s.wantErr == nil {
			if err != nil {
				t.Errorf("%s: Do(%v) = %v, want nil", s.name, s.token, err)
			}
			wantApplied = append(wantApplied, s.token)
		}
		for _, w := range s.wantErr {
			if !errors.Is(err, w) {
				t.Errorf("%s: Do(%v) = %v, want an error matching %v", s.name, s.token, err, w)
			}
		}
		mark, err := g.Mark(ctx, tgt.Resource)
		if err != nil || mark != tok("orders", s.mark) {
			t.Errorf("%s: Mark = %v, %v; want %v", s.name, mark, err, tok("orders", s.mark))
		}
	}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("applied %v, want %v", applied, wantApplied)
	}

	var rej *fence.RefusedError
	err := g.Do(ctx, tgt, tok("orders", 3), write)
	if !errors.As(err, &rej) {
		t.Fatalf("Do(stale) = %v, want *RejectedError", err)
	}
	if rej.Resource != tgt.Resource || rej.Token != tok("orders", 3) || rej.Mark != tok("orders", 9) {
		t.Errorf("RejectedError = %+v, want resource %q, token 3, mark 9", rej, tgt.Resource)
	}
}

func TestDoReturnsWriteErrorAndKeepsMark(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t)
	tgt := guard.Target{Resource: "r", Lock: "l"}
	boom := errors.New("boom")
	if err := g.Do(ctx, tgt, tok("l", 4), func(context.Context) error { return boom }); err != boom {
		t.Fatalf("Do = %v, want the write's own error", err)
	}
	if mark, _ := g.Mark(ctx, "r"); mark != tok("l", 4) {
		t.Errorf("mark after failed write = %v, want 4:l", mark)
	}
}

func TestDoInvalidTarget(t *testing.T) {
	g := newGuard(t)
	for _, tgt := range []guard.Target{{Resource: "", Lock: "l"}, {Resource: "r", Lock: ""}, {Resource: "r", Lock: strings.Repeat("x", fence.MaxNameLen+1)}} {
		err := g.Do(context.Background(), tgt, tok("l", 1), func(context.Context) error {
			t.Error("write ran for an invalid target")
			return nil
		})
		if !errors.Is(err, guard.ErrInvalidTarget) {
			t.Errorf("Do(%+v) = %v, want ErrInvalidTarget", tgt, err)
		}
	}
}

func TestDoPanicsOnNilWrite(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Do(nil write) did not panic")
		}
	}()
	newGuard(t).Do(context.Background(), guard.Target{Resource: "r", Lock: "l"}, tok("l", 1), nil)
}

// TestDoWaitsAndGivesUpOnContext checks that a write in progress holds the
// resource, and that a waiter leaves when its context ends.
func TestDoWaitsAndGivesUpOnContext(t *testing.T) {
	g := newGuard(t)
	tgt := guard.Target{Resource: "r", Lock: "l"}
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.Do(context.Background(), tgt, tok("l", 1), func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := g.Do(ctx, tgt, tok("l", 2), func(context.Context) error {
		t.Error("second write ran while the first held the resource")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do while held = %v, want context.DeadlineExceeded", err)
	}
	// Another resource is not blocked.
	if err := g.Do(context.Background(), guard.Target{Resource: "other", Lock: "l"}, tok("l", 2), func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do on another resource = %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("first Do = %v", err)
	}
	if mark, _ := g.Mark(context.Background(), "r"); mark != tok("l", 1) {
		t.Errorf("mark = %v, want 1:l (the abandoned write must not advance it)", mark)
	}
}

// TestClaim: after a new holder claims, an old holder's write is refused,
// and Claim waits for a write in progress under the old token.
func TestClaim(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t)
	a := guard.Target{Resource: "a", Lock: "jobs"}
	if err := g.Do(ctx, a, tok("jobs", 3), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}

	inside, release := make(chan struct{}), make(chan struct{})
	var oldDone atomic.Bool
	go func() {
		g.Do(ctx, a, tok("jobs", 3), func(context.Context) error {
			close(inside)
			<-release
			oldDone.Store(true)
			return nil
		})
	}()
	<-inside
	claimed := make(chan error, 1)
	go func() { claimed <- g.Claim(ctx, tok("jobs", 8), "b", "a", "a") }()
	select {
	case err := <-claimed:
		t.Fatalf("Claim returned (%v) while an older write was in progress", err)
	case <-time.After(30 * time.Millisecond):
	}
	close(release)
	if err := <-claimed; err != nil {
		t.Fatalf("Claim = %v", err)
	}
	if !oldDone.Load() {
		t.Error("Claim returned before the older write finished")
	}
	for _, r := range []string{"a", "b"} {
		if mark, _ := g.Mark(ctx, r); mark != tok("jobs", 8) {
			t.Errorf("mark of %s = %v, want 8:jobs", r, mark)
		}
		err := g.Do(ctx, guard.Target{Resource: r, Lock: "jobs"}, tok("jobs", 5), func(context.Context) error {
			t.Errorf("old holder wrote %s after Claim", r)
			return nil
		})
		if !errors.Is(err, fence.ErrStale) {
			t.Errorf("old holder's write to %s = %v, want ErrStale", r, err)
		}
	}
	// A stale claim fails and says so.
	if err := g.Claim(ctx, tok("jobs", 6), "a"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("stale Claim = %v, want ErrStale", err)
	}
	if err := g.Claim(ctx, tok("jobs", 0), "a"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Claim with revision 0 = %v, want ErrMalformed", err)
	}
}

// TestObservability checks the log records of each outcome, and that the
// lock name appears in logs only as its hash.
func TestObservability(t *testing.T) {
	ctx := context.Background()
	var buf testkit.LogBuffer
	g := newGuard(t, guard.WithLogger(buf.Logger(slog.LevelDebug)))
	const lock = "secret-lock-name"
	tgt := guard.Target{Resource: "res-1", Lock: lock}
	nop := func(context.Context) error { return nil }
	g.Do(ctx, tgt, tok(lock, 10), nop)
	g.Do(ctx, tgt, tok(lock, 4), nop)
	g.Do(ctx, tgt, tok("other-lock", 50), nop)
	g.Do(ctx, tgt, tok(lock, 0), nop)

	out := buf.String()
	if strings.Contains(out, lock) {
		t.Errorf("log contains the lock name:\n%s", out)
	}
	recs := buf.Records(t)
	want := []string{"accepted", "stale", "wrong_lock", "malformed"}
	if len(recs) != len(want) {
		t.Fatalf("got %d log records, want %d:\n%s", len(recs), len(want), out)
	}
	for i, r := range recs {
		if r["outcome"] != want[i] || r["resource"] != "res-1" || r["lock"] != guard.LockHash(lock) {
			t.Errorf("record %d = %v, want outcome %s for res-1 and the lock's hash", i, r, want[i])
		}
	}
	if r := recs[0]; r["level"] != "DEBUG" || r["fence"] != 10.0 {
		t.Errorf("accepted record = %v, want level DEBUG and fence 10", r)
	}
	if r := recs[1]; r["level"] != "WARN" || r["fence"] != 4.0 || r["mark"] != 10.0 {
		t.Errorf("stale record = %v, want level WARN, fence 4 and mark 10", r)
	}
	if r := recs[2]; r["fence_lock"] != guard.LockHash("other-lock") {
		t.Errorf("wrong-lock record lacks the token's lock hash: %v", r)
	}
	if h := guard.LockHash(lock); len(h) != 16 {
		t.Errorf("LockHash = %q, want 16 hex digits", h)
	}
}

// --- Concurrency: the accepted writes never go backwards in token. ---

// doFunc is a fenced write: run write if rev may write the resource.
type doFunc func(ctx context.Context, rev int64, write func(context.Context) error) error

// runWriters has many goroutines write one resource through do with
// interleaved tokens (a rising counter with jitter, so many are equal or
// stale), and returns the tokens in the order the resource applied them.
func runWriters(t *testing.T, do doFunc, writers, perWriter int) []int64 {
	t.Helper()
	var (
		counter atomic.Int64
		mu      sync.Mutex
		applied []int64
		wg      sync.WaitGroup
	)
	counter.Store(10)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWriter {
				rev := max(counter.Add(1)+int64(rng.IntN(7))-3, 1)
				err := do(context.Background(), rev, func(context.Context) error {
					// The resource's work; the token is appended when the
					// write takes effect.
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
					mu.Lock()
					applied = append(applied, rev)
					mu.Unlock()
					return nil
				})
				if err != nil && !errors.Is(err, fence.ErrStale) {
					t.Errorf("write %d: %v", rev, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return applied
}

// backwards returns the positions in applied whose token is lower than
// one applied before it.
func backwards(applied []int64) []int {
	var bad []int
	var high int64
	for i, rev := range applied {
		if rev < high {
			bad = append(bad, i)
		}
		high = max(high, rev)
	}
	return bad
}

// naiveGuard is the bug the Guard exists to prevent: it checks the mark,
// then writes, with nothing holding the resource in between. The sleep
// stands for the work a real service does between the two (a database
// round trip, a GC pause) and makes the race show up reliably.
type naiveGuard struct {
	mu   sync.Mutex
	mark int64
}

func (n *naiveGuard) do(ctx context.Context, rev int64, write func(context.Context) error) error {
	n.mu.Lock()
	mark := n.mark
	n.mu.Unlock()
	if rev < mark {
		return &fence.RefusedError{Outcome: fence.Stale, Token: tok("l", rev), Mark: tok("l", mark)}
	}
	time.Sleep(time.Millisecond)
	n.mu.Lock()
	n.mark = max(n.mark, rev)
	n.mu.Unlock()
	return write(ctx)
}

func TestConcurrentWritesNeverGoBackwards(t *testing.T) {
	g := newGuard(t)
	tgt := guard.Target{Resource: "counter", Lock: "l"}
	applied := runWriters(t, func(ctx context.Context, rev int64, write func(context.Context) error) error {
		return g.Do(ctx, tgt, tok("l", rev), write)
	}, 16, 60)
	if len(applied) < 100 {
		t.Errorf("only %d writes accepted; the test exercises too little", len(applied))
	}
	if bad := backwards(applied); len(bad) > 0 {
		t.Errorf("%d of %d accepted writes went backwards in token, first at %d: %v", len(bad), len(applied), bad[0], applied[max(bad[0]-3, 0):bad[0]+1])
	}
	t.Logf("%d writes accepted, none backwards", len(applied))
}

// TestConcurrencyCheckCatchesNaiveGuard shows the property check of
// TestConcurrentWritesNeverGoBackwards can fail: it catches a check-then-
// write implementation.
func TestConcurrencyCheckCatchesNaiveGuard(t *testing.T) {
	for attempt := 1; attempt <= 5; attempt++ {
		var n naiveGuard
		applied := runWriters(t, n.do, 16, 30)
		if bad := backwards(applied); len(bad) > 0 {
			t.Logf("attempt %d: naive guard let %d of %d writes go backwards", attempt, len(bad), len(applied))
			return
		}
	}
	t.Error("the property check never caught the naive check-then-write guard")
}

// zeroStore is a Store written before fence.ErrNoMark: its Mark returns
// the zero Token for "no mark".
type zeroStore struct{ guard.MemoryStore }

func (s *zeroStore) Mark(ctx context.Context, r string) (fence.Token, error) {
	m, err := s.MemoryStore.Mark(ctx, r)
	if errors.Is(err, fence.ErrNoMark) {
		return fence.Token{}, nil
	}
	return m, err
}

// TestMarkNoMark: a resource without a mark is an error matching
// fence.ErrNoMark, from the store and from the Guard (also over a store
// that still returns a zero Token), never a zero Token and nil.
func TestMarkNoMark(t *testing.T) {
	ctx := context.Background()
	store := guard.NewMemoryStore()
	if m, err := store.Mark(ctx, "r"); !errors.Is(err, fence.ErrNoMark) || !m.IsZero() {
		t.Errorf("MemoryStore.Mark of a new resource = %v, %v; want fence.ErrNoMark", m, err)
	}
	for _, s := range []guard.Store{store, &zeroStore{}} {
		g, err := guard.New(s)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := g.Mark(ctx, "r"); !errors.Is(err, fence.ErrNoMark) || !m.IsZero() {
			t.Errorf("%T: Guard.Mark of a new resource = %v, %v; want fence.ErrNoMark", s, m, err)
		}
		// A refused token leaves no mark either.
		g.Do(ctx, guard.Target{Resource: "r", Lock: "l"}, tok("other", 3), func(context.Context) error { return nil })
		if _, err := g.Mark(ctx, "r"); !errors.Is(err, fence.ErrNoMark) {
			t.Errorf("%T: after a refusal: %v, want fence.ErrNoMark", s, err)
		}
		if err := g.Do(ctx, guard.Target{Resource: "r", Lock: "l"}, tok("l", 3), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if m, err := g.Mark(ctx, "r"); err != nil || m != tok("l", 3) {
			t.Errorf("%T: after a write: %v, %v; want 3:l", s, m, err)
		}
	}
}

// TestTargetLockNameRule: a Target's lock name follows fence.ValidateName,
// the rule of package lease.
func TestTargetLockNameRule(t *testing.T) {
	g := newGuard(t)
	for _, lock := range []string{"", "a/b", "a\nb", "\xff", strings.Repeat("x", fence.MaxNameLen+1)} {
		err := g.Do(context.Background(), guard.Target{Resource: "r", Lock: lock}, tok("l", 1), func(context.Context) error { return nil })
		if !errors.Is(err, guard.ErrInvalidTarget) || !errors.Is(err, fence.ErrInvalidName) {
			t.Errorf("lock %q: %v, want ErrInvalidTarget and fence.ErrInvalidName", lock, err)
		}
	}
	if err := g.Do(context.Background(), guard.Target{Resource: "r", Lock: strings.Repeat("x", fence.MaxNameLen)}, tok(strings.Repeat("x", fence.MaxNameLen), 1), func(context.Context) error { return nil }); err != nil {
		t.Errorf("a lock name of MaxNameLen bytes: %v", err)
	}
}

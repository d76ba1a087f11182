package guard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// counters returns the values of the metric family name in reg, keyed by
// its label pairs.
func counters(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	return promtest.Values(t, reg, name)
}

// failingStore is a Store whose every call fails.
type failingStore struct{}

func (failingStore) Advance(context.Context, string, fence.Token) (fence.Token, error) {
	return fence.Token{}, errors.New("store down")
}

func (failingStore) Mark(context.Context, string) (fence.Token, error) {
	return fence.Token{}, errors.New("store down")
}

// TestMetricsCountDecisions drives every outcome through Do and the HTTP
// middleware and checks fencekit_guard_decisions_total, with a second
// Guard sharing the registry's counter.
func TestMetricsCountDecisions(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	g := newGuard(t, guard.WithMetrics(reg))
	const name = "fencekit_guard_decisions_total"

	// Every outcome's series exists before any decision.
	want := map[string]float64{
		"outcome=accepted": 0, "outcome=stale": 0, "outcome=wrong_lock": 0,
		"outcome=missing": 0, "outcome=malformed": 0, "outcome=failed": 0, "outcome=mark_ahead": 0,
		"outcome=unverified": 0,
	}
	if got := counters(t, reg, name); !equalCounts(got, want) {
		t.Fatalf("before any decision: %v, want %v", got, want)
	}

	tgt := guard.Target{Resource: "orders/1", Lock: "orders"}
	nop := func(context.Context) error { return nil }
	g.Do(ctx, tgt, tok("orders", 10), nop) // accepted
	g.Do(ctx, tgt, tok("orders", 10), nop) // accepted (same holder)
	g.Do(ctx, tgt, tok("orders", 9), nop)  // stale
	g.Do(ctx, tgt, tok("other", 11), nop)  // wrong_lock
	g.Do(ctx, tgt, tok("orders", -1), nop) // malformed

	// Missing and malformed headers are decided by the middleware.
	mw := g.Middleware(func(*http.Request) (guard.Target, bool) { return tgt, true })
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, hdr := range []string{"", "not-a-token"} {
		r := httptest.NewRequest(http.MethodPut, "/orders/1", nil)
		if hdr != "" {
			r.Header.Set(guard.Header, hdr)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	// A second Guard on the same registry shares the counter; its store
	// fails.
	g2, err := guard.New(failingStore{}, guard.WithMetrics(reg))
	if err != nil {
		t.Fatalf("second Guard on the same registry: %v", err)
	}
	if err := g2.Do(ctx, tgt, tok("orders", 12), nop); err == nil || errors.As(err, new(*fence.RefusedError)) {
		t.Fatalf("Do on a failing store = %v, want a store error", err)
	}

	want = map[string]float64{
		"outcome=accepted": 2, "outcome=stale": 1, "outcome=wrong_lock": 1,
		"outcome=missing": 1, "outcome=malformed": 2, "outcome=failed": 1, "outcome=mark_ahead": 0,
		"outcome=unverified": 0,
	}
	if got := counters(t, reg, name); !equalCounts(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
}

// TestMetricsResourceLabel checks that the resource label appears only
// with WithResourceLabel, and that the two shapes cannot share a registry.
func TestMetricsResourceLabel(t *testing.T) {
	ctx := context.Background()
	nop := func(context.Context) error { return nil }

	reg := prometheus.NewPedanticRegistry()
	g := newGuard(t, guard.WithMetrics(reg))
	g.Do(ctx, guard.Target{Resource: "secret-resource", Lock: "l"}, tok("l", 1), nop)
	for k := range counters(t, reg, "fencekit_guard_decisions_total") {
		if strings.Contains(k, "resource") {
			t.Errorf("series %q has a resource label without WithResourceLabel", k)
		}
	}
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithMetrics(reg), guard.WithResourceLabel()); err == nil {
		t.Error("a Guard with the resource label registered next to one without it")
	}

	reg = prometheus.NewPedanticRegistry()
	g = newGuard(t, guard.WithMetrics(reg), guard.WithResourceLabel())
	g.Do(ctx, guard.Target{Resource: "a", Lock: "l"}, tok("l", 5), nop)
	g.Do(ctx, guard.Target{Resource: "a", Lock: "l"}, tok("l", 4), nop)
	g.Do(ctx, guard.Target{Resource: "b", Lock: "l"}, tok("l", 4), nop)
	want := map[string]float64{
		"outcome=accepted,resource=a": 1,
		"outcome=stale,resource=a":    1,
		"outcome=accepted,resource=b": 1,
	}
	if got := counters(t, reg, "fencekit_guard_decisions_total"); !equalCounts(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithMetrics(reg), guard.WithResourceLabel()); err != nil {
		t.Errorf("second labelled Guard on the same registry: %v", err)
	}
}

func TestMetricsOptionsValidate(t *testing.T) {
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithMetrics(nil)); err == nil {
		t.Error("WithMetrics(nil): got nil error")
	}
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithResourceLabel()); err == nil {
		t.Error("WithResourceLabel without WithMetrics: got nil error")
	}
	// A registry that already has another collector of that name.
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "fencekit_guard_decisions_total", Help: "x"}))
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithMetrics(reg)); err == nil {
		t.Error("registering over a foreign collector of the same name: got nil error")
	}
}

// TestLockHashIsLogattrHash: guard's records and lease's carry the same
// lock digest.
func TestLockHashIsLogattrHash(t *testing.T) {
	for _, name := range []string{"orders", "", "a b/c", strings.Repeat("x", 300)} {
		if got, want := guard.LockHash(name), logattr.Hash(name); got != want {
			t.Errorf("LockHash(%q) = %s, want %s", name, got, want)
		}
	}
}

func equalCounts(got, want map[string]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

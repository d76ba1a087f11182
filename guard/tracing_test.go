package guard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/spantest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// guardSpans returns the spans of package guard's tracer.
func guardSpans(exp *spantest.Recorder) []spantest.Span {
	return testkit.ScopeSpans(exp, "github.com/fencekit/fencekit/guard")
}

// wantSpan is what a test expects of one decision span; zero numbers are
// expected absent.
type wantSpan struct {
	name, outcome, resource, lock string
	fence, mark                   int64
	fenceLock                     string // lock of the token when it differs
	status                        string // substring of the Error status; "" for an accepted token
}

func checkSpan(t *testing.T, s spantest.Span, w wantSpan) {
	t.Helper()
	a := testkit.SpanAttrs(s)
	if s.Name != w.name {
		t.Errorf("span name %q, want %q", s.Name, w.name)
	}
	if got := a["fencekit.outcome"].AsString(); got != w.outcome {
		t.Errorf("%s: outcome %q, want %q", s.Name, got, w.outcome)
	}
	if got := a["fencekit.resource"].AsString(); got != w.resource {
		t.Errorf("%s: resource %q, want %q", s.Name, got, w.resource)
	}
	if got := a["fencekit.lock"].AsString(); got != guard.LockHash(w.lock) {
		t.Errorf("%s: lock %q, want the hash %q", s.Name, got, guard.LockHash(w.lock))
	}
	checkInt := func(key attribute.Key, want int64) {
		t.Helper()
		v, ok := a[key]
		switch {
		case want == 0 && ok:
			t.Errorf("%s: %s = %s, want none", s.Name, key, fmt.Sprint(v.AsInterface()))
		case want != 0 && v.Type() != attribute.INT64:
			t.Errorf("%s: %s = %s (%s), want int64 %d", s.Name, key, fmt.Sprint(v.AsInterface()), v.Type(), want)
		case want != 0 && v.AsInt64() != want:
			t.Errorf("%s: %s = %d, want %d", s.Name, key, v.AsInt64(), want)
		}
	}
	checkInt("fencekit.fence", w.fence)
	checkInt("fencekit.mark", w.mark)
	if v, ok := a["fencekit.fence_lock"]; w.fenceLock == "" && ok {
		t.Errorf("%s: fence_lock %q, want none", s.Name, v.AsString())
	} else if w.fenceLock != "" && v.AsString() != guard.LockHash(w.fenceLock) {
		t.Errorf("%s: fence_lock %q, want the hash of %q", s.Name, v.AsString(), w.fenceLock)
	}
	if w.status == "" {
		if s.Status.Code != otelcodes.Unset {
			t.Errorf("%s: status %v %q, want unset", s.Name, s.Status.Code, s.Status.Description)
		}
	} else if s.Status.Code != otelcodes.Error || !strings.Contains(s.Status.Description, w.status) {
		t.Errorf("%s: status %v %q, want Error containing %q", s.Name, s.Status.Code, s.Status.Description, w.status)
	}
	if !s.EndTime.After(s.StartTime) && !s.EndTime.Equal(s.StartTime) {
		t.Errorf("%s: not ended", s.Name)
	}
}

// Every decision of Do, Claim and the HTTP middleware is one span, a child
// of the caller's, with the log's fields and no lock name.
func TestTracingDecisions(t *testing.T) {
	tp, exp := testkit.Tracing(t)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	g := newGuard(t, guard.WithTracerProvider(tp))
	report := guard.Target{Resource: "report", Lock: "report-writer"}
	var inWrite trace.SpanContext
	write := func(ctx context.Context) error {
		inWrite = trace.SpanContextFromContext(ctx)
		return nil
	}

	if err := g.Do(ctx, report, tok("report-writer", 5), write); err != nil {
		t.Fatalf("Do(5): %v", err)
	}
	if !inWrite.Equal(parent.SpanContext()) {
		t.Errorf("write ran in span %v, want the caller's %v", inWrite.SpanID(), parent.SpanContext().SpanID())
	}
	g.Do(ctx, report, tok("report-writer", 3), write)
	g.Do(ctx, report, tok("other-writer", 9), write)
	g.Do(ctx, report, tok("report-writer", -1), write)
	if err := g.Claim(ctx, tok("report-writer", 6), "report", "summary"); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	failing, err := guard.New(failingStore{}, guard.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	failing.Do(ctx, report, tok("report-writer", 7), write)

	srv := newItemServer(t, g)
	send(t, http.MethodPut, srv.srv.URL+"/items/1", "x")
	send(t, http.MethodPut, srv.srv.URL+"/items/1", "x", "not a token")
	send(t, http.MethodPut, srv.srv.URL+"/items/1", "x", "4:items")
	send(t, http.MethodPut, srv.srv.URL+"/items/1", "x", "2:items")
	send(t, http.MethodGet, srv.srv.URL+"/items/1", "") // unfenced: no decision
	parent.End()

	want := []wantSpan{
		{name: "fencekit.guard.do", outcome: "accepted", resource: "report", lock: "report-writer", fence: 5, mark: 5},
		{name: "fencekit.guard.do", outcome: "stale", resource: "report", lock: "report-writer", fence: 3, mark: 5,
			status: "guard: stale fencing token"},
		{name: "fencekit.guard.do", outcome: "wrong_lock", resource: "report", lock: "report-writer", fence: 9,
			fenceLock: "other-writer", status: "guard: fencing token for another lock"},
		{name: "fencekit.guard.do", outcome: "malformed", resource: "report", lock: "report-writer", fence: -1,
			status: "guard: malformed fencing token"},
		{name: "fencekit.guard.claim", outcome: "accepted", resource: "report", lock: "report-writer", fence: 6, mark: 6},
		{name: "fencekit.guard.claim", outcome: "accepted", resource: "summary", lock: "report-writer", fence: 6, mark: 6},
		{name: "fencekit.guard.do", outcome: "failed", resource: "report", lock: "report-writer", fence: 7,
			status: "store down"},
		{name: "fencekit.guard.serve", outcome: "missing", resource: "item/1", lock: "items",
			status: "guard: fencing token missing"},
		{name: "fencekit.guard.serve", outcome: "malformed", resource: "item/1", lock: "items",
			status: "guard: malformed fencing token"},
		{name: "fencekit.guard.serve", outcome: "accepted", resource: "item/1", lock: "items", fence: 4, mark: 4},
		{name: "fencekit.guard.serve", outcome: "stale", resource: "item/1", lock: "items", fence: 2, mark: 4,
			status: "guard: stale fencing token"},
	}
	spans := guardSpans(exp)
	if len(spans) != len(want) {
		for _, s := range spans {
			t.Logf("span %s %v", s.Name, s.Attributes)
		}
		t.Fatalf("%d guard spans, want %d", len(spans), len(want))
	}
	for i, s := range spans {
		checkSpan(t, s, want[i])
		if i < 7 && s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d (%s) has parent %v, want the caller's span", i, s.Name, s.Parent.SpanID())
		}
		for _, text := range testkit.SpanTexts(s) {
			for _, lock := range []string{"report-writer", "other-writer", "items"} {
				if strings.Contains(text, lock) {
					t.Errorf("span %s carries lock name %q: %q", s.Name, lock, text)
				}
			}
		}
	}
}

// Without WithTracerProvider a Guard records nothing: no span of its own,
// nothing on the caller's span, nothing through the global provider.
func TestTracingOffRecordsNothing(t *testing.T) {
	testkit.TracesNothing(t, func(ctx context.Context) {
		g := newGuard(t)
		report := guard.Target{Resource: "report", Lock: "report-writer"}
		nop := func(context.Context) error { return nil }
		if err := g.Do(ctx, report, tok("report-writer", 5), nop); err != nil {
			t.Fatal(err)
		}
		g.Do(ctx, report, tok("report-writer", 3), nop)
		g.Claim(ctx, tok("report-writer", 6), "report")
		srv := newItemServer(t, g)
		send(t, http.MethodPut, srv.srv.URL+"/items/1", "x", "4:items")
		send(t, http.MethodPut, srv.srv.URL+"/items/1", "x")
	})
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithTracerProvider(nil)); err == nil {
		t.Error("New with a nil TracerProvider: no error")
	}
}

// The story with real leases, traced end to end on one provider: no span
// of lease or guard carries an owner token, and guard's spans record A's
// and B's writes, A's stale write after B took over, and a forged token
// the verifier refuses.
func TestTracingKeepsOwnerTokensSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	tp, exp := testkit.Tracing(t)
	locksA, err := lease.New(etcdtest.Client(t, c), lease.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer locksA.Close()
	locksB, err := lease.New(etcdtest.Client(t, c), lease.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer locksB.Close()
	inspect := etcdtest.Client(t, c)

	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(locksB.Verifier()), guard.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	svc := newItemServer(t, g)
	tr := &guard.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	write := func(ctx context.Context, tk fence.Token) int {
		t.Helper()
		status, _ := svc.putWithToken(t, ctx, client, tk, "/items/report", "x")
		return status
	}

	a, err := locksA.Acquire(ctx, "items")
	if err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	tokenA := testkit.OwnerToken(t, ctx, inspect, a)
	if st := write(ctx, a.Fence()); st != http.StatusNoContent {
		t.Fatalf("A's write: %d", st)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("A release: %v", err)
	}
	b, err := locksB.Acquire(ctx, "items")
	if err != nil {
		t.Fatalf("B acquire: %v", err)
	}
	tokenB := testkit.OwnerToken(t, ctx, inspect, b)
	if st := write(ctx, b.Fence()); st != http.StatusNoContent {
		t.Fatalf("B's write: %d", st)
	}
	if st := write(ctx, a.Fence()); st != guard.HTTPStatus(fence.Stale) {
		t.Fatalf("A's late write: %d, want %d", st, guard.HTTPStatus(fence.Stale))
	}
	forged := fence.Token{Lock: "items", Revision: b.Fence().Revision + 1000}
	if st := write(ctx, forged); st != guard.HTTPStatus(fence.Unverified) {
		t.Fatalf("forged token: %d, want %d", st, guard.HTTPStatus(fence.Unverified))
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("B release: %v", err)
	}

	testkit.NoOwnerTokens(t, exp.GetSpans(), map[string]string{"A": tokenA, "B": tokenB})
	if len(testkit.ScopeSpans(exp, "github.com/fencekit/fencekit/lease")) == 0 {
		t.Error("no lease spans: the test checks less than it claims")
	}
	var outcomes []string
	for _, s := range guardSpans(exp) {
		a := testkit.SpanAttrs(s)
		outcomes = append(outcomes, fmt.Sprintf("%s %d", a["fencekit.outcome"].AsString(), a["fencekit.fence"].AsInt64()))
		for _, text := range testkit.SpanTexts(s) {
			if strings.Contains(text, "items") {
				t.Errorf("guard span %s carries the lock name: %q", s.Name, text)
			}
		}
	}
	want := []string{
		fmt.Sprintf("accepted %d", a.Fence().Revision),
		fmt.Sprintf("accepted %d", b.Fence().Revision),
		fmt.Sprintf("stale %d", a.Fence().Revision),
		fmt.Sprintf("unverified %d", forged.Revision),
	}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Errorf("guard spans %v, want %v", outcomes, want)
	}
}

package guard_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lockWorld is an etcd with lease clients and the tokens the bad-input
// tests need: the holder of "items", a released acquisition of it, a
// waiter's record, another lock's holder, and a holder of "items" in
// another etcd cluster.
type lockWorld struct {
	c                    *etcdtest.Cluster
	cli                  *clientv3.Client
	locks                *lease.Client
	holder               *lease.Lease
	released, waiter     fence.Token
	otherLock, otherClus fence.Token
}

func newLockWorld(t *testing.T) *lockWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	w := &lockWorld{c: c, cli: etcdtest.Client(t, c)}
	newClient := func(cli *clientv3.Client) *lease.Client {
		l, err := lease.New(cli, lease.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	w.locks = newClient(w.cli)
	first, err := w.locks.Acquire(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	w.released = first.Fence()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w.holder, err = w.locks.Acquire(ctx, "items"); err != nil {
		t.Fatal(err)
	}
	other, err := w.locks.Acquire(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	w.otherLock = fence.Token{Lock: "items", Revision: other.Fence().Revision}

	// A waiter queues behind the holder until cleanup ends its wait.
	waiters := newClient(etcdtest.Client(t, c))
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); waiters.Acquire(wctx, "items") }()
	t.Cleanup(func() { wcancel(); wg.Wait() })
	for w.waiter.IsZero() {
		resp, err := w.cli.Get(ctx, lease.DefaultPrefix+"items/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) >= 2 {
			w.waiter = fence.Token{Lock: "items", Revision: resp.Kvs[1].CreateRevision}
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Another cluster, its revision pushed past this one's, so that its
	// holder's revision cannot coincide with ours.
	c2 := etcdtest.Start(t)
	cli2 := etcdtest.Client(t, c2)
	for {
		resp, err := cli2.Put(ctx, "filler", "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision > w.waiter.Revision+3 {
			break
		}
	}
	l2, err := newClient(cli2).Acquire(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	w.otherClus = l2.Fence()
	return w
}

// forgeries are the tokens of lock "items" that no current holder has,
// by name, with the raw header value to send.
func (w *lockWorld) forgeries() map[string]string {
	return map[string]string{
		"far future":    "1099511627776:items",
		"released":      w.released.String(),
		"waiter":        w.waiter.String(),
		"other lock":    w.otherLock.String(),
		"other cluster": w.otherClus.String(),
		"revision zero": "0:items",
		"negative":      "-5:items",
		"not a number":  "x:items",
		"empty":         "",
		"other lock's":  strconv.FormatInt(w.otherLock.Revision, 10) + ":payments",
	}
}

// TestVerifiedHTTPRefusesForgedTokens: with a verifier, no token but the
// current holder's raises the mark, before and after the holder wrote,
// and the holder's writes are accepted throughout.
func TestVerifiedHTTPRefusesForgedTokens(t *testing.T) {
	w := newLockWorld(t)
	reg := prometheus.NewRegistry()
	var logs testkit.LogBuffer
	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(w.locks.Verifier()), guard.WithMetrics(reg),
		guard.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	svc := newItemServer(t, g)
	ctx := context.Background()
	real := w.holder.Fence().String()

	refuseAll := func(phase string, mark fence.Token) {
		t.Helper()
		for name, v := range w.forgeries() {
			status, p := send(t, http.MethodPut, svc.srv.URL+"/items/1", "forged "+name, v)
			if status == http.StatusNoContent || status < 400 || status >= 500 {
				t.Errorf("%s: %s token %q: status %d, want a refusal", phase, name, v, status)
			}
			if status == guard.HTTPStatus(fence.Unverified) && (p.Type != guard.ProblemType(fence.Unverified) || p.Token != v) {
				t.Errorf("%s: %s: problem %+v", phase, name, p)
			}
			got, err := g.Mark(ctx, "item/1")
			if mark.IsZero() && errors.Is(err, fence.ErrNoMark) {
				err = nil // no mark, as wanted
			}
			if err != nil || got != mark {
				t.Fatalf("%s: after %s token the mark is %v (%v), want %v", phase, name, got, err, mark)
			}
		}
	}
	refuseAll("no mark yet", fence.Token{})
	if status, _ := send(t, http.MethodPut, svc.srv.URL+"/items/1", "real", real); status != http.StatusNoContent {
		t.Fatalf("holder's first write: %d", status)
	}
	refuseAll("after the holder wrote", w.holder.Fence())
	if status, _ := send(t, http.MethodPut, svc.srv.URL+"/items/1", "real again", real); status != http.StatusNoContent {
		t.Errorf("holder's next write: %d", status)
	}
	if got := svc.item("1"); got != "real again" {
		t.Errorf("item = %q, want the holder's", got)
	}
	for _, tk := range svc.appliedTokens() {
		if tk != w.holder.Fence() {
			t.Errorf("applied a write with %v", tk)
		}
	}

	// The far-future, waiter, other-lock and other-cluster tokens are
	// newer than the mark in both phases, and unverified each time.
	counts := counters(t, reg, "fencekit_guard_decisions_total")
	if counts["outcome=unverified"] < 8 || counts["outcome=accepted"] != 2 {
		t.Errorf("decisions %v, want >= 8 unverified and 2 accepted", counts)
	}
	if !strings.Contains(logs.String(), `"outcome":"unverified"`) {
		t.Errorf("no unverified record in the log:\n%s", logs.String())
	}
}

// TestVerifiedDoErrors: the error of an unverified token matches
// fence.ErrUnverified, is a *fence.RefusedError of outcome unverified
// holding the unchanged mark, and is not a stale refusal.
func TestVerifiedDoErrors(t *testing.T) {
	w := newLockWorld(t)
	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(w.locks.Verifier()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tgt := guard.Target{Resource: "r", Lock: "items"}
	noop := func(context.Context) error { return nil }
	if err := g.Do(ctx, tgt, w.holder.Fence(), noop); err != nil {
		t.Fatalf("holder: %v", err)
	}
	err = g.Do(ctx, tgt, w.waiter, func(context.Context) error { t.Error("forged write ran"); return nil })
	var ue *fence.RefusedError
	if !errors.As(err, &ue) || !errors.Is(err, fence.ErrUnverified) || ue.Outcome != fence.Unverified ||
		errors.Is(err, fence.ErrStale) || ue.Mark != w.holder.Fence() || ue.Token != w.waiter {
		t.Errorf("waiter's token: %v, want *fence.RefusedError (unverified) with mark %v", err, w.holder.Fence())
	}
	// A stale token is stale, without asking etcd.
	if err := g.Do(ctx, tgt, w.released, noop); !errors.Is(err, fence.ErrStale) {
		t.Errorf("released token below the mark: %v, want stale", err)
	}
}

// TestVerifiedConcurrentForgeries: one forged token sent by 50 goroutines
// at once moves nothing, and the holder writes afterwards.
func TestVerifiedConcurrentForgeries(t *testing.T) {
	w := newLockWorld(t)
	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(w.locks.Verifier()))
	if err != nil {
		t.Fatal(err)
	}
	svc := newItemServer(t, g)
	var wg sync.WaitGroup
	statuses := make([]int, 50)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPut, svc.srv.URL+"/items/1", strings.NewReader("forged"))
			if err != nil {
				return
			}
			req.Header.Set(guard.Header, "1099511627776:items")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	for i, s := range statuses {
		if s != guard.HTTPStatus(fence.Unverified) {
			t.Errorf("forger %d: status %d, want %d", i, s, guard.HTTPStatus(fence.Unverified))
		}
	}
	if mark, _ := g.Mark(context.Background(), "item/1"); !mark.IsZero() {
		t.Errorf("mark after 50 forgeries: %v", mark)
	}
	if status, _ := send(t, http.MethodPut, svc.srv.URL+"/items/1", "real", w.holder.Fence().String()); status != http.StatusNoContent {
		t.Errorf("holder after the forgeries: %d", status)
	}
}

// TestVerifierUnreachable: when etcd cannot be reached the decision is
// failed (503), never accept, and the mark does not move; a token equal
// to the mark needs no verification and is still accepted. The server
// bounds each request to 500 ms, as servers should.
func TestVerifierUnreachable(t *testing.T) {
	w := newLockWorld(t)
	proxy, err := faultproxy.New(strings.TrimPrefix(w.cli.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	v, err := lease.NewVerifier(etcdtest.Client(t, w.c, proxy.URL()), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(v))
	if err != nil {
		t.Fatal(err)
	}
	mw := g.Middleware(itemRoute)
	svc := &itemServer{items: map[string]string{}}
	bounded := mw(http.HandlerFunc(svc.serve))
	svc.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 500*time.Millisecond)
		defer cancel()
		bounded.ServeHTTP(rw, r.WithContext(ctx))
	}))
	defer svc.srv.Close()

	real := w.holder.Fence().String()
	if status, _ := send(t, http.MethodPut, svc.srv.URL+"/items/1", "real", real); status != http.StatusNoContent {
		t.Fatalf("holder's first write: %d", status)
	}
	proxy.Blackhole() // the verifier's etcd is unreachable
	status, p := send(t, http.MethodPut, svc.srv.URL+"/items/1", "newer", w.waiter.String())
	if status != http.StatusServiceUnavailable || p.Type != guard.ProblemType(fence.Failed) {
		t.Errorf("newer token, etcd unreachable: %d %+v, want 503", status, p)
	}
	if mark, _ := g.Mark(context.Background(), "item/1"); mark != w.holder.Fence() {
		t.Errorf("mark = %v, want the holder's", mark)
	}
	if status, _ := send(t, http.MethodPut, svc.srv.URL+"/items/1", "again", real); status != http.StatusNoContent {
		t.Errorf("holder's write equal to the mark, etcd unreachable: %d, want 204", status)
	}
	// Do with a deadline: the check budget ends before it, and the
	// failure is the verifier's (ErrUnavailable), not the caller's ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = g.Do(ctx, guard.Target{Resource: "item/1", Lock: "items"}, w.waiter, func(context.Context) error { return nil })
	if !errors.Is(err, guard.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Errorf("Do, etcd unreachable: %v (ctx %v), want ErrUnavailable before the deadline", err, ctx.Err())
	}
	// Do whose ctx its caller cancels: the caller's reason, not ErrUnavailable.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err = g.Do(ctx, guard.Target{Resource: "item/1", Lock: "items"}, w.waiter, func(context.Context) error { return nil })
	if !errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrUnavailable) {
		t.Errorf("Do cancelled, etcd unreachable: %v, want a failure matching context.Canceled", err)
	}
	proxy.Resume()
}

// TestVerifierUnreachableUnboundedRequests: with requests that carry no
// deadline of their own and etcd unreachable, a request whose token needs
// verification gets the documented 503 once the Guard's own check budget
// (the default, DefaultCheckTimeout) runs out; and the holder's requests,
// equal to the mark and needing no etcd, do not queue behind it.
func TestVerifierUnreachableUnboundedRequests(t *testing.T) {
	w := newLockWorld(t)
	proxy, err := faultproxy.New(strings.TrimPrefix(w.cli.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	v, err := lease.NewVerifier(etcdtest.Client(t, w.c, proxy.URL()), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(v))
	if err != nil {
		t.Fatal(err)
	}
	svc := newItemServer(t, g)
	real := w.holder.Fence().String()
	if status, _ := send(t, http.MethodPut, svc.srv.URL+"/items/1", "real", real); status != http.StatusNoContent {
		t.Fatalf("holder's first write: %d", status)
	}
	proxy.Blackhole()
	defer proxy.Resume()

	type answer struct {
		status int
		took   time.Duration
		err    error
	}
	put := func(token string, limit time.Duration) answer {
		// No body: the server then sees the client give up (the old
		// code's waits end only that way).
		req, err := http.NewRequest(http.MethodPut, svc.srv.URL+"/items/1", http.NoBody)
		if err != nil {
			return answer{err: err}
		}
		req.Header.Set(guard.Header, token)
		start := time.Now()
		resp, err := (&http.Client{Timeout: limit}).Do(req)
		if err != nil {
			return answer{err: err, took: time.Since(start)}
		}
		resp.Body.Close()
		return answer{status: resp.StatusCode, took: time.Since(start)}
	}
	verifying := make(chan answer, 1)
	go func() { verifying <- put(w.waiter.String(), guard.DefaultCheckTimeout+5*time.Second) }()
	time.Sleep(300 * time.Millisecond) // the newer token is being verified
	if a := put(real, 2*time.Second); a.err != nil || a.status != http.StatusNoContent {
		t.Errorf("holder's write while another request waits on etcd: %d %v after %v, want 204 at once", a.status, a.err, a.took)
	}
	a := <-verifying
	if a.err != nil || a.status != http.StatusServiceUnavailable || a.took > guard.DefaultCheckTimeout+time.Second {
		t.Errorf("newer token, etcd unreachable, request without deadline: %d %v after %v, want 503 within %v",
			a.status, a.err, a.took, guard.DefaultCheckTimeout)
	}
	if mark, _ := g.Mark(context.Background(), "item/1"); mark != w.holder.Fence() {
		t.Errorf("mark = %v, want the holder's", mark)
	}
}

// TestResetMarkRecoversPoisonedResource: a guard without a verifier
// accepts a forged far-future token; every real holder is then stale until
// an operator resets the mark, which needs the exact old mark.
func TestResetMarkRecoversPoisonedResource(t *testing.T) {
	var logs testkit.LogBuffer
	g, err := guard.New(guard.NewMemoryStore(), guard.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tgt := guard.Target{Resource: "orders/1", Lock: "orders"}
	noop := func(context.Context) error { return nil }
	real, poison := tok("orders", 7), tok("orders", 1<<40)
	if err := g.Do(ctx, tgt, poison, noop); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, tgt, real, noop); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("real holder on a poisoned mark: %v, want stale", err)
	}
	// Not by accident: the old mark must be given exactly.
	for _, old := range []fence.Token{{}, real, tok("orders", 1<<40-1)} {
		err := g.ResetMark(ctx, tgt.Resource, old, real)
		if !errors.Is(err, fence.ErrMarkChanged) {
			t.Errorf("reset from %v: %v, want fence.ErrMarkChanged", old, err)
		}
		if mark, err := g.Mark(ctx, tgt.Resource); err != nil || mark != poison {
			t.Errorf("reset from %v: mark %v, %v; want it unchanged at %v", old, mark, err, poison)
		}
	}
	for _, next := range []fence.Token{{}, tok("orders", 0), tok("other", 7)} {
		if err := g.ResetMark(ctx, tgt.Resource, poison, next); err == nil {
			t.Errorf("reset to %v: nil error", next)
		}
	}
	if mark, _ := g.Mark(ctx, tgt.Resource); mark != poison {
		t.Fatalf("mark after refused resets: %v", mark)
	}
	if err := g.ResetMark(ctx, tgt.Resource, poison, real); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if err := g.Do(ctx, tgt, real, noop); err != nil {
		t.Errorf("real holder after the reset: %v", err)
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"guard: mark reset by operator"`) ||
		!strings.Contains(logs.String(), `"mark_old":1099511627776,"mark":7`) {
		t.Errorf("no Warn record with both marks:\n%s", logs.String())
	}
}

// TestResetMarkNeedsResetter: a store without ResetMark cannot be reset.
func TestResetMarkNeedsResetter(t *testing.T) {
	g, err := guard.New(failingStore{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.ResetMark(context.Background(), "r", fence.Token{}, tok("l", 1)); err == nil {
		t.Error("ResetMark on a store without it: nil error")
	}
	if _, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(nil)); err == nil {
		t.Error("WithVerifier(nil): nil error")
	}
}

package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
)

// A resource accepts the current holder's tokens and refuses older ones.
func ExampleGuard_Do() {
	ctx := context.Background()
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	report := guard.Target{Resource: "report", Lock: "report-writer"}
	write := func(ctx context.Context) error {
		t, _ := fence.FromContext(ctx)
		fmt.Println("written with", t)
		return nil
	}

	// Holder B (revision 12) writes; holder A (revision 7) was superseded.
	fmt.Println(g.Do(ctx, report, fence.Token{Lock: "report-writer", Revision: 12}, write))
	err = g.Do(ctx, report, fence.Token{Lock: "report-writer", Revision: 7}, write)
	fmt.Println(errors.As(err, new(*fence.RefusedError)), errors.Is(err, fence.ErrStale))
	var rej *fence.RefusedError
	if errors.As(err, &rej) {
		fmt.Println("mark:", rej.Mark)
	}
	// Output:
	// written with 12:report-writer
	// <nil>
	// true true
	// mark: 12:report-writer
}

// A new holder claims the resources it will read, so that an old holder
// cannot write between its read and its write.
func ExampleGuard_Claim() {
	ctx := context.Background()
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	newHolder := fence.Token{Lock: "jobs", Revision: 40}
	if err := g.Claim(ctx, newHolder, "queue", "results"); err != nil {
		panic(err)
	}
	// ... read "queue" and "results" ...
	oldHolder := fence.Token{Lock: "jobs", Revision: 31}
	err = g.Do(ctx, guard.Target{Resource: "results", Lock: "jobs"}, oldHolder, func(context.Context) error {
		fmt.Println("never runs")
		return nil
	})
	fmt.Println(err)
	// Output:
	// fence: resource "results" refused stale token: lock "jobs" revision 31 is older than accepted revision 40: if this is the lock's current holder, the mark is ahead of the lock service (a new etcd cluster starts revisions again): reset it with Guard.ResetMark
}

// An HTTP service fenced by the middleware, and a client that sends its
// token with Transport.
func ExampleGuard_Middleware() {
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	// PUT /reports/{name} writes report {name}, fenced by lock "reports".
	route := func(r *http.Request) (guard.Target, bool) {
		name, ok := strings.CutPrefix(r.URL.Path, "/reports/")
		return guard.Target{Resource: "report/" + name, Lock: "reports"}, ok
	}
	mw := g.Middleware(route)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	defer srv.Close()

	tr := &guard.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	put := func(t fence.Token) {
		ctx := context.Background()
		if !t.IsZero() {
			ctx = fence.NewContext(ctx, t)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/reports/q3", strings.NewReader("..."))
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		fmt.Println(t.Revision, resp.Status)
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			var p guard.Problem
			json.NewDecoder(resp.Body).Decode(&p)
			fmt.Printf("  %s: resource %s, token %q, mark %q\n", p.Title, p.Resource, p.Token, p.Mark)
		}
		io.Copy(io.Discard, resp.Body)
	}
	put(fence.Token{Lock: "reports", Revision: 9})
	put(fence.Token{Lock: "reports", Revision: 9})
	put(fence.Token{Lock: "reports", Revision: 5})
	put(fence.Token{})
	// Output:
	// 9 204 No Content
	// 9 204 No Content
	// 5 409 Conflict
	//   Stale fencing token: resource report/q3, token "5:reports", mark "9:reports"
	// 0 428 Precondition Required
	//   Fencing token required: resource report/q3, token "", mark ""
}

// The header value is the token's text form.
func ExampleTokenFromHeader() {
	h := http.Header{}
	h.Set(guard.Header, fence.Token{Lock: "orders eu", Revision: 1042}.String())
	fmt.Println(guard.Header+":", h.Get(guard.Header))
	t, err := guard.TokenFromHeader(h)
	fmt.Println(t.Lock, t.Revision, err)
	// Output:
	// Fencing-Token: 1042:orders%20eu
	// orders eu 1042 <nil>
}

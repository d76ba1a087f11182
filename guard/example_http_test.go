package guard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
)

// A fenced HTTP service and a client, end to end: the client puts the
// token in each request's context and sends through Transport; the
// service's middleware admits the holder and refuses a holder it
// superseded with 409.
func Example() {
	// The service: PUT /reports/{name} writes report {name}, fenced by
	// lock "reports".
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	route := func(r *http.Request) (guard.Target, bool) {
		name, ok := strings.CutPrefix(r.URL.Path, "/reports/")
		return guard.Target{Resource: "report/" + name, Lock: "reports"}, ok
	}
	reports := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // admitted: the token is in r.Context()
	})
	srv := httptest.NewServer(g.Middleware(route)(reports))
	defer srv.Close()

	// A client: Transport sends the token of each request's context.
	tr := &guard.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	put := func(t fence.Token) {
		ctx := fence.NewContext(context.Background(), t) // a lease's: l.Fence()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/reports/q3", nil)
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(t, resp.Status)
	}
	put(fence.Token{Lock: "reports", Revision: 9}) // the holder
	put(fence.Token{Lock: "reports", Revision: 9}) // the holder again
	put(fence.Token{Lock: "reports", Revision: 5}) // a holder it superseded
	// Output:
	// 9:reports 204 No Content
	// 9:reports 204 No Content
	// 5:reports 409 Conflict
}

// Transport sends the token found in each request's context as the
// Fencing-Token header, and refuses to send an invalid one.
func ExampleTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("server received %s: %q\n", guard.Header, r.Header.Get(guard.Header))
	}))
	defer srv.Close()
	tr := &guard.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	post := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}

	ctx := context.Background()
	post(fence.NewContext(ctx, fence.Token{Lock: "orders", Revision: 42}))
	post(ctx) // no token in the context: sent unchanged
	err := post(fence.NewContext(ctx, fence.Token{Lock: "orders"}))
	fmt.Println("revision 0 not sent:", errors.Is(err, fence.ErrInvalid))
	// Output:
	// server received Fencing-Token: "42:orders"
	// server received Fencing-Token: ""
	// revision 0 not sent: true
}

// A resource that has accepted no token has no mark: Mark says so with
// an error matching fence.ErrNoMark, as sqlguard's Mark does with its
// ErrNotFound.
func ExampleGuard_Mark() {
	ctx := context.Background()
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	_, err = g.Mark(ctx, "report/q3")
	fmt.Println(errors.Is(err, fence.ErrNoMark))

	tgt := guard.Target{Resource: "report/q3", Lock: "reports"}
	g.Do(ctx, tgt, fence.Token{Lock: "reports", Revision: 12}, func(context.Context) error { return nil })
	fmt.Println(g.Mark(ctx, "report/q3"))
	// Output:
	// true
	// 12:reports <nil>
}

// Every refusal's answer comes from its outcome: one table for the
// status and the problem type.
func ExampleHTTPStatus() {
	for _, o := range []fence.Outcome{fence.Stale, fence.MarkAhead, fence.Unverified, fence.Missing, fence.Failed} {
		fmt.Println(o, guard.HTTPStatus(o), strings.TrimPrefix(guard.ProblemType(o), "https://pkg.go.dev/github.com/fencekit/fencekit/guard"))
	}
	// Output:
	// stale 409 #ProblemStale
	// mark_ahead 409 #ProblemMarkAhead
	// unverified 403 #ProblemUnverified
	// missing 428 #ProblemMissing
	// failed 503 #ProblemUnavailable
}

package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/prometheus/client_golang/prometheus"
)

// itemServer is a fenced HTTP service: PUT /items/{id} stores the body as
// item id, fenced by lock "items". It records which token each applied
// write carried.
type itemServer struct {
	srv *httptest.Server

	mu      sync.Mutex
	items   map[string]string
	applied []fence.Token
}

func itemRoute(r *http.Request) (guard.Target, bool) {
	id, ok := strings.CutPrefix(r.URL.Path, "/items/")
	if !ok {
		return guard.Target{}, false
	}
	return guard.Target{Resource: "item/" + id, Lock: "items"}, true
}

func newItemServer(t *testing.T, g *guard.Guard, opts ...guard.HTTPOption) *itemServer {
	t.Helper()
	s := &itemServer{items: map[string]string{}}
	mw := g.Middleware(itemRoute, opts...)
	s.srv = httptest.NewServer(mw(http.HandlerFunc(s.serve)))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *itemServer) serve(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/items/")
	tk, hasToken := fence.FromContext(r.Context())
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		s.mu.Lock()
		v := s.items[id]
		s.mu.Unlock()
		if hasToken {
			w.Header().Set("Seen-Token", tk.String())
		}
		io.WriteString(w, v)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.items[id] = string(body)
	s.applied = append(s.applied, tk)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *itemServer) item(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.items[id]
}

func (s *itemServer) appliedTokens() []fence.Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fence.Token(nil), s.applied...)
}

// send makes a request with the raw header values given (none: no
// header), and returns the status and the decoded problem, if any.
func send(t *testing.T, method, url, body string, header ...string) (int, guard.Problem) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range header {
		req.Header.Add(guard.Header, h)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, decodeProblem(t, resp)
}

// putWithToken PUTs body to path on s through client, with tk in the
// request's context for a guard.Transport to send, and returns the
// response's status and body.
func (s *itemServer) putWithToken(t *testing.T, ctx context.Context, client *http.Client, tk fence.Token, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(fence.NewContext(ctx, tk), http.MethodPut, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func decodeProblem(t *testing.T, resp *http.Response) guard.Problem {
	t.Helper()
	var p guard.Problem
	if resp.StatusCode < 400 {
		return p
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("status %d with Content-Type %q, want application/problem+json", resp.StatusCode, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Errorf("decode problem: %v", err)
	}
	if p.Status != resp.StatusCode {
		t.Errorf("problem status %d, response status %d", p.Status, resp.StatusCode)
	}
	return p
}

func TestHTTPRule(t *testing.T) {
	var logs testkit.LogBuffer
	reg := prometheus.NewPedanticRegistry()
	s := newItemServer(t, newGuard(t, guard.WithMetrics(reg), guard.WithLogger(logs.Logger(slog.LevelDebug))))
	url := s.srv.URL + "/items/1"
	steps := []struct {
		name    string
		header  []string
		status  int
		problem string // problem type
		token   string
		mark    string
	}{
		{"first", []string{"5:items"}, http.StatusNoContent, "", "", ""},
		{"newer", []string{"8:items"}, http.StatusNoContent, "", "", ""},
		{"equal", []string{"8:items"}, http.StatusNoContent, "", "", ""},
		{"older", []string{"6:items"}, http.StatusConflict, guard.ProblemType(fence.Stale), "6:items", "8:items"},
		{"wrong lock, higher", []string{"900:payments"}, http.StatusConflict, guard.ProblemType(fence.WrongLock), "900:payments", ""},
		{"missing", nil, http.StatusPreconditionRequired, guard.ProblemType(fence.Missing), "", ""},
		{"malformed", []string{"eight:items"}, http.StatusBadRequest, guard.ProblemType(fence.Malformed), "", ""},
		{"revision zero", []string{"0:items"}, http.StatusBadRequest, guard.ProblemType(fence.Malformed), "", ""},
		{"negative revision", []string{"-8:items"}, http.StatusBadRequest, guard.ProblemType(fence.Malformed), "", ""},
		{"no lock name", []string{"9:"}, http.StatusBadRequest, guard.ProblemType(fence.Malformed), "", ""},
		{"two tokens", []string{"9:items", "10:items"}, http.StatusBadRequest, guard.ProblemType(fence.Malformed), "", ""},
		{"equal after refusals", []string{"8:items"}, http.StatusNoContent, "", "", ""},
	}
	var want []fence.Token
	for _, st := range steps {
		status, p := send(t, http.MethodPut, url, st.name, st.header...)
		if status != st.status {
			t.Errorf("%s: status %d, want %d (problem %+v)", st.name, status, st.status, p)
			continue
		}
		if st.status == http.StatusNoContent {
			tk, _ := fence.Parse(st.header[0])
			want = append(want, tk)
			if got := s.item("1"); got != st.name {
				t.Errorf("%s: item = %q, want the write applied", st.name, got)
			}
			continue
		}
		if p.Type != st.problem || p.Resource != "item/1" || p.Lock != "items" || p.Token != st.token || p.Mark != st.mark || p.Title == "" || p.Detail == "" {
			t.Errorf("%s: problem %+v, want type %s, resource item/1, token %q, mark %q", st.name, p, st.problem, st.token, st.mark)
		}
	}
	if got := s.appliedTokens(); !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v", got, want)
	}
	if got := s.item("1"); got != "equal after refusals" {
		t.Errorf("item = %q, refused writes must leave it alone", got)
	}
	wantOutcomes := map[string]float64{"outcome=accepted": 4, "outcome=stale": 1, "outcome=wrong_lock": 1, "outcome=missing": 1,
		"outcome=malformed": 5, "outcome=failed": 0, "outcome=mark_ahead": 0, "outcome=unverified": 0}
	if got := promtest.Values(t, reg, "fencekit_guard_decisions_total"); !maps.Equal(got, wantOutcomes) {
		t.Errorf("decisions %v, want %v", got, wantOutcomes)
	}
	for _, r := range logs.Records(t) {
		if r["resource"] != "item/1" || r["lock"] != guard.LockHash("items") {
			t.Errorf("record %v, want resource item/1 and lock items", r)
		}
	}
}

func TestHTTPUnfencedMethods(t *testing.T) {
	s := newItemServer(t, newGuard(t))
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
		if status, _ := send(t, m, s.srv.URL+"/items/1", ""); status != http.StatusOK {
			t.Errorf("%s without token: status %d, want 200", m, status)
		}
	}
	// A route that declines passes too.
	if status, _ := send(t, http.MethodPost, s.srv.URL+"/other", "x"); status != http.StatusNoContent {
		t.Errorf("POST to an unrouted path: status %d, want 204", status)
	}
	// A valid token on an unfenced request reaches the handler's context.
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/items/1", nil)
	req.Header.Set(guard.Header, "4:items")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Seen-Token"); got != "4:items" {
		t.Errorf("handler saw token %q, want 4:items", got)
	}

	// With every method fenced, GET needs a token.
	fenced := newItemServer(t, newGuard(t), guard.WithUnfencedMethods())
	if status, p := send(t, http.MethodGet, fenced.srv.URL+"/items/1", ""); status != http.StatusPreconditionRequired || p.Type != guard.ProblemType(fence.Missing) {
		t.Errorf("fenced GET without token: status %d, problem %+v; want 428", status, p)
	}
}

// TestTransport sends tokens through the client-side RoundTripper.
func TestTransport(t *testing.T) {
	s := newItemServer(t, newGuard(t))
	tr := &guard.Transport{}
	client := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	put := func(ctx context.Context, body string, extra string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.srv.URL+"/items/7", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if extra != "" {
			req.Header.Set(guard.Header, extra)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if req.Header.Get(guard.Header) != extra {
				t.Errorf("Transport modified the caller's request header")
			}
		}
		return resp, err
	}
	ctx := fence.NewContext(context.Background(), tok("items", 20))
	if resp, err := put(ctx, "a", ""); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT with token 20 in ctx: %v, %v", resp, err)
	}
	// The context's token replaces a header set by hand.
	if resp, err := put(ctx, "b", "1:items"); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT with token 20 in ctx and 1 in header: %v, %v", resp, err)
	}
	old := fence.NewContext(context.Background(), tok("items", 19))
	if resp, err := put(old, "c", ""); err != nil || resp.StatusCode != guard.HTTPStatus(fence.Stale) {
		t.Fatalf("PUT with stale token in ctx: %v, %v; want 409", resp, err)
	}
	// No token in ctx: sent as is.
	if resp, err := put(context.Background(), "d", ""); err != nil || resp.StatusCode != guard.HTTPStatus(fence.Missing) {
		t.Fatalf("PUT without token: %v, %v; want 428", resp, err)
	}
	// An invalid token in ctx is not sent.
	bad := fence.NewContext(context.Background(), tok("items", 0))
	if _, err := put(bad, "e", ""); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("PUT with revision 0 in ctx: %v, want ErrInvalid", err)
	}
	want := []fence.Token{tok("items", 20), tok("items", 20)}
	if got := s.appliedTokens(); !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v", got, want)
	}
	if got := s.item("7"); got != "b" {
		t.Errorf("item = %q, want b", got)
	}
}

func TestTokenFromHeader(t *testing.T) {
	h := http.Header{}
	if _, err := guard.TokenFromHeader(h); !errors.Is(err, fence.ErrMissing) {
		t.Errorf("empty header: %v, want ErrMissing", err)
	}
	h.Set(guard.Header, "12:a%20b")
	if got, err := guard.TokenFromHeader(h); err != nil || got != tok("a b", 12) {
		t.Errorf("TokenFromHeader = %v, %v; want 12:a b", got, err)
	}
	h.Set(guard.Header, "12:a b")
	if _, err := guard.TokenFromHeader(h); !errors.Is(err, fence.ErrInvalid) || !errors.Is(err, fence.ErrSyntax) {
		t.Errorf("unescaped space: %v, want ErrMalformed and fence.ErrSyntax", err)
	}
}

// TestHTTPConcurrentWritesNeverGoBackwards runs the concurrency property
// over a real HTTP server.
func TestHTTPConcurrentWritesNeverGoBackwards(t *testing.T) {
	s := newItemServer(t, newGuard(t))
	tr := &guard.Transport{Base: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	runWriters(t, func(ctx context.Context, rev int64, _ func(context.Context) error) error {
		ctx = fence.NewContext(ctx, tok("items", rev))
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.srv.URL+"/items/c", strings.NewReader("x"))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusNoContent:
			return nil
		case guard.HTTPStatus(fence.Stale):
			return fence.ErrStale
		}
		return errors.New(resp.Status)
	}, 8, 25)
	applied := s.appliedTokens()
	revs := make([]int64, len(applied))
	for i, tk := range applied {
		revs[i] = tk.Revision
	}
	if len(revs) < 20 {
		t.Errorf("only %d writes accepted", len(revs))
	}
	if bad := backwards(revs); len(bad) > 0 {
		t.Errorf("%d accepted writes went backwards: %v", len(bad), revs)
	}
}

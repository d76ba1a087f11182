package guard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
)

func TestTokensFromValues(t *testing.T) {
	many := make([]string, fence.MaxTokens+1)
	for i := range many {
		many[i] = fmt.Sprintf("5:l%d", i)
	}
	cases := []struct {
		name string
		vs   []string
		want []fence.Token
		o    fence.Outcome // when want is nil
	}{
		{"none", nil, nil, fence.Missing},
		{"one", []string{"42:orders"}, []fence.Token{tok("orders", 42)}, 0},
		{"list", []string{"42:a,42:b"}, []fence.Token{tok("a", 42), tok("b", 42)}, 0},
		{"list with spaces", []string{"42:a , \t42:b"}, []fence.Token{tok("a", 42), tok("b", 42)}, 0},
		{"lines", []string{"42:a", "42:b,7:c"}, []fence.Token{tok("a", 42), tok("b", 42), tok("c", 7)}, 0},
		{"escaped comma", []string{"3:a%2Cb,3:c"}, []fence.Token{tok("a,b", 3), tok("c", 3)}, 0},
		{"most", many[:fence.MaxTokens], nil, 0},
		{"empty value", []string{""}, nil, fence.Malformed},
		{"trailing comma", []string{"42:a,"}, nil, fence.Malformed},
		{"leading comma", []string{",42:a"}, nil, fence.Malformed},
		{"empty element", []string{"42:a,,42:b"}, nil, fence.Malformed},
		{"bad element", []string{"42:a,x:b"}, nil, fence.Malformed},
		{"revision zero", []string{"42:a,0:b"}, nil, fence.Malformed},
		{"same lock twice", []string{"42:a,42:a"}, nil, fence.Malformed},
		{"same lock, other revisions", []string{"42:a", "43:a"}, nil, fence.Malformed},
		{"too many", many, nil, fence.Malformed},
	}
	for _, c := range cases {
		got, err := guard.TokensFromValues(c.vs)
		if c.name == "most" {
			if err != nil || len(got) != fence.MaxTokens {
				t.Errorf("%s: %d tokens, %v; want %d", c.name, len(got), err, fence.MaxTokens)
			}
			continue
		}
		if c.want != nil {
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
			}
			continue
		}
		var r *fence.RefusedError
		if got != nil || !errors.As(err, &r) || r.Outcome != c.o {
			t.Errorf("%s: %v, %v; want outcome %v", c.name, got, err, c.o)
		}
		if c.o == fence.Malformed && !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v does not match fence.ErrInvalid", c.name, err)
		}
	}
}

func TestTokenForLock(t *testing.T) {
	ts := []fence.Token{tok("a", 4), tok("b", 4)}
	for _, c := range []struct {
		lock string
		want fence.Token
	}{{"a", tok("a", 4)}, {"b", tok("b", 4)}, {"c", tok("a", 4)}} {
		if got := guard.TokenForLock(ts, c.lock); got != c.want {
			t.Errorf("TokenForLock(%q) = %v, want %v", c.lock, got, c.want)
		}
	}
	if got := guard.TokenForLock(nil, "a"); !got.IsZero() {
		t.Errorf("TokenForLock(nil) = %v, want the zero Token", got)
	}
}

func TestHeaderValue(t *testing.T) {
	if v, err := guard.HeaderValue(tok("a b", 9)); err != nil || v != "9:a%20b" {
		t.Errorf("one token: %q, %v; want its text form", v, err)
	}
	v, err := guard.HeaderValue(tok("a", 9), tok("b,c", 9))
	if err != nil || v != "9:a,9:b%2Cc" {
		t.Errorf("two tokens: %q, %v", v, err)
	}
	if back, err := guard.TokensFromValues([]string{v}); err != nil || !slices.Equal(back, []fence.Token{tok("a", 9), tok("b,c", 9)}) {
		t.Errorf("round trip: %v, %v", back, err)
	}
	for _, ts := range [][]fence.Token{nil, {tok("a", 0)}, {tok("a", 1), tok("a", 2)}, {tok("a", 1), tok("", 1)}} {
		if v, err := guard.HeaderValue(ts...); !errors.Is(err, fence.ErrInvalid) || v != "" {
			t.Errorf("HeaderValue(%v) = %q, %v; want fence.ErrInvalid", ts, v, err)
		}
	}
}

// rawServer answers every request with 204 and records each request's
// bytes as they arrived on the wire (request line and header).
type rawServer struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []string
	done chan struct{}
}

func newRawServer(t *testing.T) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, done: make(chan struct{})}
	go s.serve()
	t.Cleanup(func() {
		ln.Close()
		<-s.done
	})
	return s
}

func (s *rawServer) serve() {
	defer close(s.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				var b strings.Builder
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					b.WriteString(line)
					if line == "\r\n" {
						break
					}
				}
				s.mu.Lock()
				s.seen = append(s.seen, b.String())
				s.mu.Unlock()
				if _, err := io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n"); err != nil {
					return
				}
			}
		}()
	}
}

func (s *rawServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// TestTransportSingleTokenOnTheWire: a request whose context carries one
// token, through fence.NewContext or as a set of one, is byte for byte the
// request that set the header by hand, as the Transport always sent it;
// a set's request differs only in the header's value.
func TestTransportSingleTokenOnTheWire(t *testing.T) {
	s := newRawServer(t)
	base := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(base.CloseIdleConnections)
	send := func(rt http.RoundTripper, ctx context.Context, header string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+s.ln.Addr().String()+"/items/7", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		if header != "" {
			req.Header.Set(guard.Header, header)
		}
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	bg := context.Background()
	send(base, bg, "20:items") // by hand: the form before sets
	send(&guard.Transport{Base: base}, fence.NewContext(bg, tok("items", 20)), "")
	send(&guard.Transport{Base: base}, fence.NewTokensContext(bg, tok("items", 20)), "")
	send(&guard.Transport{Base: base}, fence.NewTokensContext(bg, tok("items", 20), tok("other lock", 20)), "")
	got := s.requests()
	if len(got) != 4 {
		t.Fatalf("%d requests reached the server, want 4", len(got))
	}
	if !strings.Contains(got[0], "\r\nFencing-Token: 20:items\r\n") {
		t.Fatalf("hand-made request lacks the header:\n%s", got[0])
	}
	for i, name := range []string{"", "fence.NewContext", "fence.NewTokensContext of one"} {
		if i > 0 && got[i] != got[0] {
			t.Errorf("%s sent\n%q\nwant byte-identical\n%q", name, got[i], got[0])
		}
	}
	want := strings.Replace(got[0], "Fencing-Token: 20:items\r\n", "Fencing-Token: 20:items,20:other%20lock\r\n", 1)
	if got[3] != want {
		t.Errorf("set of two sent\n%q\nwant\n%q", got[3], want)
	}
}

// accountServer is a fenced service in which each account is bound to a
// lock of its own: PUT /acct/{id} writes account id under lock
// "acct-{id}". GET is unfenced and answers with the tokens in its context.
type accountServer struct {
	srv *httptest.Server
	mu  sync.Mutex
	ran map[string][]fence.Token // by account: the token each applied write's context carried
}

func newAccountServer(t *testing.T, g *guard.Guard) *accountServer {
	t.Helper()
	s := &accountServer{ran: map[string][]fence.Token{}}
	route := func(r *http.Request) (guard.Target, bool) {
		id, ok := strings.CutPrefix(r.URL.Path, "/acct/")
		return guard.Target{Resource: "acct/" + id, Lock: "acct-" + id}, ok
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			for _, t := range fence.TokensFromContext(r.Context()) {
				w.Header().Add("Seen-Token", t.String())
			}
			return
		}
		tk, _ := fence.FromContext(r.Context())
		s.mu.Lock()
		s.ran[r.URL.Path] = append(s.ran[r.URL.Path], tk)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	s.srv = httptest.NewServer(g.Middleware(route)(h))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *accountServer) applied(path string) []fence.Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ran[path])
}

// TestHTTPSetTokens: a request carrying a set's tokens is checked, at
// each resource, with the token of the resource's lock.
func TestHTTPSetTokens(t *testing.T) {
	g := newGuard(t)
	s := newAccountServer(t, g)
	tr := &guard.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	do := func(ctx context.Context, method, path string) (*http.Response, guard.Problem, error) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, s.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, guard.Problem{}, err
		}
		defer resp.Body.Close()
		return resp, decodeProblem(t, resp), nil
	}
	bg := context.Background()
	set10 := fence.NewTokensContext(bg, tok("acct-1", 10), tok("acct-2", 10))
	for _, path := range []string{"/acct/1", "/acct/2"} {
		if resp, p, err := do(set10, http.MethodPut, path); err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("PUT %s with set 10: %v, %+v", path, err, p)
		}
	}
	// A newer holder of acct-1 alone supersedes the set at account 1 only.
	if resp, p, err := do(fence.NewContext(bg, tok("acct-1", 11)), http.MethodPut, "/acct/1"); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT /acct/1 with 11: %v, %+v", err, p)
	}
	resp, p, err := do(set10, http.MethodPut, "/acct/1")
	if err != nil || resp.StatusCode != http.StatusConflict || p.Outcome != "stale" || p.Token != "10:acct-1" || p.Mark != "11:acct-1" {
		t.Errorf("PUT /acct/1 with set 10 after 11: %v, %+v; want stale, naming 10:acct-1 and mark 11:acct-1", err, p)
	}
	if resp, p, err := do(set10, http.MethodPut, "/acct/2"); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("PUT /acct/2 with set 10: %v, %+v", err, p)
	}
	// No token of the set is for account 3's lock: wrong lock, naming the first.
	resp, p, err = do(set10, http.MethodPut, "/acct/3")
	if err != nil || resp.StatusCode != http.StatusConflict || p.Outcome != "wrong_lock" || p.Token != "10:acct-1" || p.Lock != "acct-3" {
		t.Errorf("PUT /acct/3 with set 10: %v, %+v; want wrong_lock", err, p)
	}
	// Two tokens of one lock are not sent.
	if _, _, err := do(fence.NewTokensContext(bg, tok("acct-1", 12), tok("acct-1", 13)), http.MethodPut, "/acct/1"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("PUT with two tokens of acct-1 in ctx: %v, want fence.ErrInvalid", err)
	}
	// Nor are they accepted when sent by hand, nor malformed lists.
	for _, h := range [][]string{{"12:acct-1,13:acct-1"}, {"12:acct-1", "12:acct-1"}, {"12:acct-1,"}, {"12:acct-1,,12:acct-2"}} {
		if status, p := send(t, http.MethodPut, s.srv.URL+"/acct/1", "", h...); status != http.StatusBadRequest || p.Outcome != "malformed" {
			t.Errorf("headers %q: status %d, %+v; want 400 malformed", h, status, p)
		}
	}
	// Unfenced requests carry the whole set onward.
	resp, _, err = do(set10, http.MethodGet, "/acct/1")
	if err != nil || !slices.Equal(resp.Header.Values("Seen-Token"), []string{"10:acct-1", "10:acct-2"}) {
		t.Errorf("GET with set 10: handler saw %v, %v; want both tokens", resp.Header.Values("Seen-Token"), err)
	}
	if got, want := s.applied("/acct/1"), []fence.Token{tok("acct-1", 10), tok("acct-1", 11)}; !slices.Equal(got, want) {
		t.Errorf("account 1 applied %v, want %v", got, want)
	}
	if got, want := s.applied("/acct/2"), []fence.Token{tok("acct-2", 10), tok("acct-2", 10)}; !slices.Equal(got, want) {
		t.Errorf("account 2 applied %v, want %v (the handler's context carries its lock's token)", got, want)
	}
	for r, want := range map[string]fence.Token{"acct/1": tok("acct-1", 11), "acct/2": tok("acct-2", 10)} {
		if m, err := g.Mark(bg, r); err != nil || m != want {
			t.Errorf("mark of %s: %v, %v; want %v", r, m, err, want)
		}
	}
	if _, err := g.Mark(bg, "acct/3"); !errors.Is(err, fence.ErrNoMark) {
		t.Errorf("mark of acct/3: %v, want fence.ErrNoMark", err)
	}
}

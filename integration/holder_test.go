//go:build unix

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A lock holder in a process of its own (this test binary, run again as
// the worker holderWorker), so that a test can kill it with SIGKILL or
// freeze it with SIGSTOP as kill -9 or a paused VM would: the crash
// takeover, revoke storm and lease quirk tests and benchmarks use it.
const (
	holderWorker  = "lock-holder"
	envHolderConf = "FENCEKIT_HOLDER_CONF"
)

// holderConf is what a holder process holds: Clients lease.Clients (each
// its own etcd session) on one etcd client, each holding Locks locks.
type holderConf struct {
	Endpoints []string
	Prefix    string
	TTL       time.Duration
	Clients   int
	Locks     int
	// Name is the lock's name when the process holds one lock; with more,
	// lock i (counted over all Clients) is Name-i.
	Name string
	// GuardURL, when set, is a fenced register (fencedRegister) that the
	// process writes to every 10 ms with its first lock's token, from
	// when it holds it until it exits, without looking at the lease's
	// Done: as a write already under way when the process froze would.
	GuardURL string
}

// lockName is the name of lock i of a holder process.
func (hc holderConf) lockName(i int) string {
	if hc.Clients*hc.Locks == 1 {
		return hc.Name
	}
	return hc.Name + "-" + strconv.Itoa(i)
}

// runLockHolder is the holder worker: it takes every lock its conf
// names, prints "held <token>" (its first lock's fencing token), then
// writes to the guard if asked and holds until the parent stops it (or
// kills it).
func runLockHolder(ctx context.Context) error {
	var hc holderConf
	if err := json.Unmarshal([]byte(os.Getenv(envHolderConf)), &hc); err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: hc.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	clients := make([]*lease.Client, hc.Clients)
	for i := range clients {
		if clients[i], err = lease.New(cli, lease.WithTTL(hc.TTL), lease.WithPrefix(hc.Prefix)); err != nil {
			return err
		}
		defer clients[i].Close()
	}
	first, err := acquireAll(ctx, hc, clients)
	if err != nil {
		return err
	}
	fmt.Printf("held %s\n", first.Fence())
	if hc.GuardURL != "" {
		go writeForever(ctx, hc.GuardURL, first.Fence())
	}
	<-ctx.Done()
	return nil
}

// acquireAll takes every lock of hc, 64 at a time, and returns the first.
func acquireAll(ctx context.Context, hc holderConf, clients []*lease.Client) (*lease.Lease, error) {
	n := hc.Clients * hc.Locks
	held := make([]*lease.Lease, n)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, 64)
	)
	for range min(64, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				l, err := clients[i/hc.Locks].Acquire(ctx, hc.lockName(i))
				// A session that ended while the process was still taking
				// its locks (renewals starved on a loaded machine): the
				// Client starts another; take the lock again.
				for errors.Is(err, lease.ErrRetryable) && ctx.Err() == nil {
					l, err = clients[i/hc.Locks].Acquire(ctx, hc.lockName(i))
				}
				if err != nil {
					errs <- fmt.Errorf("acquire %s: %w", hc.lockName(i), err)
					return
				}
				held[i] = l
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return held[0], nil
}

// writeForever sends a fenced write carrying tok to url every 10 ms until
// ctx ends, whatever the answers.
func writeForever(ctx context.Context, url string, tok fence.Token) {
	hc := &http.Client{Timeout: 5 * time.Second}
	for seq := 0; ctx.Err() == nil; seq++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(strconv.Itoa(seq)))
		if err != nil {
			return
		}
		req.Header.Set(guard.Header, tok.String())
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holderProc is a running holder process.
type holderProc struct {
	tb   testing.TB
	w    *faults.Worker
	held chan fence.Token
}

// startHolder starts a holder process for hc and waits until it holds
// every lock (at most wait); it is stopped on cleanup unless killed.
func startHolder(tb testing.TB, hc holderConf, wait time.Duration) (*holderProc, fence.Token) {
	tb.Helper()
	b, err := json.Marshal(hc)
	if err != nil {
		tb.Fatal(err)
	}
	h := &holderProc{tb: tb, held: make(chan fence.Token, 1)}
	out := &lineWriter{line: h.onLine}
	h.w, err = faults.StartWorker(holderWorker, []string{envHolderConf + "=" + string(b)}, out, os.Stderr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = h.w.Stop(ctx)
	})
	select {
	case tok := <-h.held:
		return h, tok
	case <-h.w.Done():
		tb.Fatalf("holder process exited before it held its %d locks", hc.Clients*hc.Locks)
	case <-time.After(wait):
		tb.Fatalf("holder process did not hold its %d locks within %v", hc.Clients*hc.Locks, wait)
	}
	return nil, fence.Token{}
}

func (h *holderProc) onLine(l string) {
	s, ok := strings.CutPrefix(l, "held ")
	if !ok {
		return
	}
	tok, err := fence.Parse(s)
	if err != nil {
		h.tb.Errorf("holder process: %q: %v", l, err)
		return
	}
	h.held <- tok
}

// kill sends SIGKILL to the holder and waits until it is gone; it returns
// when the signal was sent.
func (h *holderProc) kill() time.Time {
	h.signal(syscall.SIGKILL)
	at := time.Now()
	<-h.w.Done()
	return at
}

// signal sends sig to the holder process.
func (h *holderProc) signal(sig syscall.Signal) {
	if err := syscall.Kill(h.w.PID(), sig); err != nil {
		h.tb.Fatalf("signal %v to the holder: %v", sig, err)
	}
}

// lineWriter calls line with every complete line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// fencedRegister is an HTTP register behind guard's middleware (marks in a
// guard.MemoryStore), bound to one lock: every PUT carries a token of that
// lock. It records, beside the guard, what it saw: each accepted write's
// token, and for each token how many of its writes were refused as stale.
// A write the guard let through whose token is below one accepted before
// is a stale write accepted.
type fencedRegister struct {
	srv *httptest.Server

	mu       sync.Mutex
	last     int64           // highest token accepted
	accepted map[int64]int   // writes accepted, per token revision
	refused  map[int64]int   // writes refused as stale, per token
	stale    int             // accepted writes below an earlier one
	firstAt  map[int64]int64 // when each token's first write was accepted (unix ns)
}

func newFencedRegister(tb testing.TB, lock string) *fencedRegister {
	tb.Helper()
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		tb.Fatal(err)
	}
	r := &fencedRegister{accepted: map[int64]int{}, refused: map[int64]int{}, firstAt: map[int64]int64{}}
	mw := g.Middleware(func(*http.Request) (guard.Target, bool) {
		return guard.Target{Resource: "register", Lock: lock}, true
	})
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		tok, _ := fence.FromContext(req.Context())
		r.mu.Lock()
		if tok.Revision < r.last {
			r.stale++
		}
		r.last = max(r.last, tok.Revision)
		if r.accepted[tok.Revision] == 0 {
			r.firstAt[tok.Revision] = time.Now().UnixNano()
		}
		r.accepted[tok.Revision]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		inner.ServeHTTP(rec, req)
		if rec.status == http.StatusConflict {
			if tok, err := guard.TokenFromHeader(req.Header); err == nil {
				r.mu.Lock()
				r.refused[tok.Revision]++
				r.mu.Unlock()
			}
		}
	}))
	tb.Cleanup(r.srv.Close)
	return r
}

// write sends one fenced write with tok and returns the status.
func (r *fencedRegister) write(ctx context.Context, tok fence.Token) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.srv.URL, strings.NewReader("successor"))
	if err != nil {
		return 0, err
	}
	req.Header.Set(guard.Header, tok.String())
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// counts returns the writes accepted and refused with tok, and the stale
// writes accepted so far.
func (r *fencedRegister) counts(tok int64) (accepted, refused, stale int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted[tok], r.refused[tok], r.stale
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// startEtcd starts an etcd cluster of members processes with etcd's
// default raft timing (100 ms heartbeat, 1 s election timeout: its
// smallest lease TTL is 2 s), fsync on, closed on cleanup. It fails at
// once, naming the build command, when the server binary is not built.
func startEtcd(tb testing.TB, members int) *etcdproc.Cluster {
	tb.Helper()
	bin, err := etcdproc.Built("")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := etcdproc.StartCluster(ctx, etcdproc.Config{Members: members, Binary: bin,
		TickInterval: etcdTick, ElectionTimeout: etcdElection, Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// etcd's default raft timing.
const (
	etcdTick     = 100 * time.Millisecond
	etcdElection = time.Second
)

// etcdClient returns a client of every member of c, closed on cleanup.
func etcdClient(tb testing.TB, c *etcdproc.Cluster) *clientv3.Client {
	tb.Helper()
	cli, err := c.NewClient()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// waitQueued waits until the lock dir holds n records.
func waitQueued(ctx context.Context, cli *clientv3.Client, dir string, n int64) error {
	for {
		resp, err := cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("%s: fewer than %d records", dir, n), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// quantile returns the q-quantile of sorted xs by nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// lineScanner is bufio.Scanner over r with room for long lines.
func lineScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return sc
}

// metricsHTTP reads members' metrics; no connection outlives a request.
var metricsHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// httpGet returns the body of a GET of url.
func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := metricsHTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

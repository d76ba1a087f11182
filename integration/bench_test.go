package integration_test

// Benchmarks comparing fencekit with etcd's concurrency.Mutex and with the
// raw-transaction floor, in the same run on the same embedded etcd. Names
// are <Benchmark>/<impl>/<param> with impl in {fencekit, etcdmutex, floor};
// scripts/bench.sh turns the output into the README's table.
//
//	go test ./integration -run '^$' -bench . -benchtime=1s

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/embedetcd"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	_ "modernc.org/sqlite"
)

// benchEtcd starts a one-member embedded etcd (fsync on) for one top-level
// benchmark and returns it with a client.
func benchEtcd(b *testing.B) (*embedetcd.Cluster, *clientv3.Client) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := embedetcd.Start(ctx, embedetcd.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl, benchClient(b, cl.Endpoints()...)
}

func benchClient(b *testing.B, endpoints ...string) *clientv3.Client {
	b.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

func benchLocks(b *testing.B, cli *clientv3.Client, opts ...lease.Option) *lease.Client {
	b.Helper()
	c, err := lease.New(cli, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func benchSession(b *testing.B, cli *clientv3.Client, opts ...concurrency.SessionOption) *concurrency.Session {
	b.Helper()
	s, err := concurrency.NewSession(cli, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkCycle is an uncontended acquire + release.
func BenchmarkCycle(b *testing.B) {
	_, cli := benchEtcd(b)
	ctx := context.Background()
	b.Run("fencekit/uncontended", func(b *testing.B) {
		c := benchLocks(b, cli)
		for b.Loop() {
			l, err := c.Acquire(ctx, "cycle-fk")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("etcdmutex/uncontended", func(b *testing.B) {
		m := concurrency.NewMutex(benchSession(b, cli), "cycle-em")
		for b.Loop() {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor/uncontended", func(b *testing.B) {
		s := benchSession(b, cli)
		const key, val = "cycle-floor/k", "owner#1"
		for b.Loop() {
			if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, val, clientv3.WithLease(s.Lease()))).Commit(); err != nil {
				b.Fatal(err)
			}
			if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", val)).
				Then(clientv3.OpDelete(key)).Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandoff passes one lock among N contenders, each with its own
// etcd connection and Client (or Session), as separate processes would be;
// b.N is the number of acquisitions.
func BenchmarkHandoff(b *testing.B) {
	cl, _ := benchEtcd(b)
	ctx := context.Background()
	for _, n := range []int{2, 4, 8, 16} {
		b.Run(fmt.Sprintf("fencekit/n=%d", n), func(b *testing.B) {
			locks := make([]*lease.Client, n)
			for i := range locks {
				locks[i] = benchLocks(b, benchClient(b, cl.Endpoints()...))
			}
			name := fmt.Sprintf("handoff-fk-%d", n)
			handoff(b, n, func(i int) error {
				l, err := locks[i].Acquire(ctx, name)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			})
		})
		b.Run(fmt.Sprintf("etcdmutex/n=%d", n), func(b *testing.B) {
			ms := make([]*concurrency.Mutex, n)
			for i := range ms {
				ms[i] = concurrency.NewMutex(benchSession(b, benchClient(b, cl.Endpoints()...)), fmt.Sprintf("handoff-em-%d", n))
			}
			handoff(b, n, func(i int) error {
				if err := ms[i].Lock(ctx); err != nil {
					return err
				}
				return ms[i].Unlock(ctx)
			})
		})
	}
}

// handoff runs cycle from n goroutines until b.N cycles completed and
// reports ms per handoff.
func handoff(b *testing.B, n int, cycle func(i int) error) {
	var (
		left  atomic.Int64
		wg    sync.WaitGroup
		first error
		once  sync.Once
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := cycle(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N), "ms/handoff")
}

// BenchmarkReenter is one reentrant acquisition and its release on a held
// lease. etcd's Mutex has no counted reentrancy: a second Lock on the same
// session is a no-op (one Txn) whose matching Unlock would release the
// lock, so only the Lock is measured for it.
func BenchmarkReenter(b *testing.B) {
	_, cli := benchEtcd(b)
	ctx := context.Background()
	b.Run("fencekit/held", func(b *testing.B) {
		l, err := benchLocks(b, cli).Acquire(ctx, "reenter-fk")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := l.Reenter(ctx); err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("etcdmutex/held", func(b *testing.B) {
		s := benchSession(b, cli)
		if err := concurrency.NewMutex(s, "reenter-em").Lock(ctx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := concurrency.NewMutex(s, "reenter-em").Lock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor/held", func(b *testing.B) {
		const key = "reenter-floor/k"
		if _, err := cli.Put(ctx, key, "owner#1"); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			for _, step := range [][2]string{{"owner#1", "owner#2"}, {"owner#2", "owner#1"}} {
				if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", step[0])).
					Then(clientv3.OpPut(key, step[1])).Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkLossSignal measures how a holder learns it lost its lease.
// revoke: time from an external revoke of the holder's session to Done.
// partition: the holder's connection is paused; another client acquires as
// soon as it can; margin_ms is how long before that acquisition the
// holder's Done closed (negative: the holder still believed it held the
// lock while another did), early_pct the share of trials where Done came
// first. Each b.N iteration is one trial (at least 3 run).
func BenchmarkLossSignal(b *testing.B) {
	cl, cli := benchEtcd(b)
	ctx := context.Background()
	target := strings.TrimPrefix(cl.Members[0].ClientURL, "http://")

	b.Run("fencekit/revoke", func(b *testing.B) {
		c := benchLocks(b, cli, lease.WithTTL(5*time.Second))
		var total time.Duration
		trials := max(b.N, 3)
		for range trials {
			l, err := c.Acquire(ctx, "loss-revoke-fk")
			if err != nil {
				b.Fatal(err)
			}
			id := recordLease(b, cli, "fencekit/locks/loss-revoke-fk/")
			start := time.Now()
			if _, err := cli.Revoke(ctx, id); err != nil {
				b.Fatal(err)
			}
			<-l.Done()
			total += time.Since(start)
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(trials), "ms/signal")
	})
	b.Run("etcdmutex/revoke", func(b *testing.B) {
		var total time.Duration
		trials := max(b.N, 3)
		for range trials {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
			if err != nil {
				b.Fatal(err)
			}
			if err := concurrency.NewMutex(s, "loss-revoke-em").Lock(ctx); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
				b.Fatal(err)
			}
			<-s.Done()
			total += time.Since(start)
			s.Close()
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(trials), "ms/signal")
	})
	b.Run("fencekit/partition", func(b *testing.B) {
		lossTrials(b, max(b.N, 3), target, func(via, direct *clientv3.Client) (<-chan struct{}, func() error, func()) {
			holder, err := lease.New(via, lease.WithTTL(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			other, err := lease.New(direct, lease.WithTTL(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			l, err := holder.Acquire(ctx, "loss-part-fk")
			if err != nil {
				b.Fatal(err)
			}
			acquire := func() error {
				l2, err := other.Acquire(ctx, "loss-part-fk")
				if err == nil {
					err = l2.Release(ctx)
				}
				return err
			}
			return l.Done(), acquire, func() { holder.Close(); other.Close() }
		})
	})
	b.Run("etcdmutex/partition", func(b *testing.B) {
		lossTrials(b, max(b.N, 3), target, func(via, direct *clientv3.Client) (<-chan struct{}, func() error, func()) {
			hs, err := concurrency.NewSession(via, concurrency.WithTTL(1))
			if err != nil {
				b.Fatal(err)
			}
			if err := concurrency.NewMutex(hs, "loss-part-em").Lock(ctx); err != nil {
				b.Fatal(err)
			}
			others, err := concurrency.NewSession(direct, concurrency.WithTTL(1))
			if err != nil {
				b.Fatal(err)
			}
			acquire := func() error {
				m := concurrency.NewMutex(others, "loss-part-em")
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			}
			return hs.Done(), acquire, func() { hs.Orphan(); others.Close() }
		})
	})
}

// recordLease returns the etcd lease of the only record under prefix.
func recordLease(b *testing.B, cli *clientv3.Client, prefix string) clientv3.LeaseID {
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		b.Fatalf("record under %s: %v %d", prefix, err, len(resp.Kvs))
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// lossTrials runs partition trials: setup gets a client through a fresh
// proxy and a direct one, and returns the holder's Done, an acquire by
// another client, and a cleanup.
func lossTrials(b *testing.B, trials int, target string,
	setup func(via, direct *clientv3.Client) (<-chan struct{}, func() error, func())) {
	var (
		early  int
		margin = time.Duration(1 << 62)
	)
	for range trials {
		p, err := faultproxy.New(target)
		if err != nil {
			b.Fatal(err)
		}
		via := benchClient(b, p.URL())
		direct := benchClient(b, "http://"+target)
		done, acquire, cleanup := setup(via, direct)
		p.Pause()
		var doneAt time.Time
		seen := make(chan struct{})
		go func() { <-done; doneAt = time.Now(); close(seen) }()
		if err := acquire(); err != nil {
			b.Fatal(err)
		}
		acquiredAt := time.Now()
		select {
		case <-seen:
		case <-time.After(10 * time.Second):
			b.Fatal("holder's Done never closed")
		}
		m := acquiredAt.Sub(doneAt)
		if m > 0 {
			early++
		}
		margin = min(margin, m)
		p.Resume()
		cleanup()
		via.Close()
		direct.Close()
		p.Close()
	}
	b.ReportMetric(float64(margin.Microseconds())/1000, "margin_ms")
	b.ReportMetric(100*float64(early)/float64(trials), "early_pct")
}

// BenchmarkManyLocks holds n locks with one Client (or Session) on an etcd
// in a separate process, so the heap figures are the client's alone. It
// reports acquisitions per second (64 at a time), client heap per held
// lock, and keep-alive requests per second while holding them all: one
// session lease, so it must not grow with n.
func BenchmarkManyLocks(b *testing.B) {
	endpoint := etcdProcess(b)
	ctx := context.Background()
	type holder struct {
		acquire func(i int) error
		close   func()
	}
	impls := []struct {
		name string
		ns   []int
		make func(cli *clientv3.Client) holder
	}{
		{"fencekit", []int{10_000, 100_000}, func(cli *clientv3.Client) holder {
			c, err := lease.New(cli, lease.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var held []*lease.Lease
			return holder{func(i int) error {
				l, err := c.Acquire(ctx, fmt.Sprintf("many-%d", i))
				mu.Lock()
				held = append(held, l)
				mu.Unlock()
				return err
			}, func() { c.Close() }}
		}},
		{"etcdmutex", []int{10_000}, func(cli *clientv3.Client) holder {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var held []*concurrency.Mutex
			return holder{func(i int) error {
				m := concurrency.NewMutex(s, fmt.Sprintf("many-em/%d", i))
				mu.Lock()
				held = append(held, m)
				mu.Unlock()
				return m.Lock(ctx)
			}, func() { s.Close() }}
		}},
	}
	for _, impl := range impls {
		for _, n := range impl.ns {
			b.Run(fmt.Sprintf("%s/n=%d", impl.name, n), func(b *testing.B) {
				for range b.N {
					var keepalives atomic.Int64
					cli, err := clientv3.New(clientv3.Config{
						Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
						DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
							func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
								cs, err := streamer(ctx, desc, cc, method, opts...)
								if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
									return cs, err
								}
								return countingStream{cs, &keepalives}, nil
							})},
					})
					if err != nil {
						b.Fatal(err)
					}
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					h := impl.make(cli)
					start := time.Now()
					var (
						next atomic.Int64
						wg   sync.WaitGroup
					)
					for range 64 {
						wg.Go(func() {
							for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
								if err := h.acquire(int(i)); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					elapsed := time.Since(start)
					runtime.GC()
					runtime.ReadMemStats(&after)
					// Keep-alive requests sent over a 4 s hold.
					k0 := keepalives.Load()
					time.Sleep(4 * time.Second)
					perSec := float64(keepalives.Load()-k0) / 4
					b.ReportMetric(float64(n)/elapsed.Seconds(), "acquires/s")
					b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heapB/lock")
					b.ReportMetric(perSec, "keepalives/s")
					h.close()
					cli.Close()
				}
			})
		}
	}
}

// countingStream counts the requests sent on a LeaseKeepAlive stream.
type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

const etcdProcessEnv = "FENCEKIT_BENCH_ETCD_DIR"

// init serves an embedded etcd when the test binary is re-executed by
// etcdProcess, printing its endpoint and running until stdin closes.
func init() {
	dir := os.Getenv(etcdProcessEnv)
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cl, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(cl.Members[0].ClientURL)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	cl.Close()
	os.Exit(0)
}

// etcdProcess starts an embedded etcd in a child process (this test binary
// re-executed) and returns its endpoint; it stops on cleanup.
func etcdProcess(b *testing.B) string {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdProcessEnv+"="+filepath.Join(b.TempDir(), "etcd"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("etcd process: %v", err)
	}
	return strings.TrimSpace(line)
}

// BenchmarkGuard is the cost of fencing a write: the HTTP middleware
// against the bare handler, and sqlguard's guarded UPDATE (row-column and
// fence-table modes) against a plain UPDATE, on SQLite and, when
// FENCEKIT_PG_DSN is set, PostgreSQL.
func BenchmarkGuard(b *testing.B) {
	tok := fence.Token{Lock: "acct", Revision: 42}
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	serve := func(b *testing.B, h http.Handler) {
		req := httptest.NewRequest(http.MethodPost, "/accounts/1", nil)
		req.Header.Set(guard.Header, tok.String())
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusNoContent {
				b.Fatalf("status %d", rec.Code)
			}
		}
	}
	b.Run("floor/http", func(b *testing.B) { serve(b, bare) })
	b.Run("fencekit/http", func(b *testing.B) {
		g, err := guard.New(guard.NewMemoryStore())
		if err != nil {
			b.Fatal(err)
		}
		mw := g.Middleware(func(r *http.Request) (guard.Target, bool) {
			return guard.Target{Resource: r.URL.Path, Lock: "acct"}, true
		})
		serve(b, mw(bare))
	})
	// The verifier's cost when the token equals the mark: the holder's
	// every write after its first. floor/http-verified is the guard
	// without a verifier, fencekit/http-verified the same guard with a
	// lease.Verifier on a real etcd (which verifies the first request
	// only).
	guarded := func(b *testing.B, lock string, opts ...guard.Option) http.Handler {
		g, err := guard.New(guard.NewMemoryStore(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		mw := g.Middleware(func(r *http.Request) (guard.Target, bool) {
			return guard.Target{Resource: r.URL.Path, Lock: lock}, true
		})
		return mw(bare)
	}
	b.Run("floor/http-verified", func(b *testing.B) { serve(b, guarded(b, tok.Lock)) })
	b.Run("fencekit/http-verified", func(b *testing.B) {
		_, cli := benchEtcd(b)
		locks := benchLocks(b, cli)
		l, err := locks.Acquire(context.Background(), "acct-verified")
		if err != nil {
			b.Fatal(err)
		}
		h := guarded(b, "acct-verified", guard.WithVerifier(locks.Verifier()))
		req := httptest.NewRequest(http.MethodPost, "/accounts/1", nil)
		req.Header.Set(guard.Header, l.Fence().String())
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusNoContent {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})

	dbs := []struct {
		name, driver, dsn string
	}{{"sqlite", "sqlite", "file:" + filepath.Join(b.TempDir(), "bench.db") + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)"}}
	if dsn := os.Getenv("FENCEKIT_PG_DSN"); dsn != "" {
		dbs = append(dbs, struct{ name, driver, dsn string }{"postgres", "pgx", dsn})
	}
	for _, d := range dbs {
		benchSQL(b, d.name, d.driver, d.dsn, tok)
	}
}

func benchSQL(b *testing.B, name, driver, dsn string, tok fence.Token) {
	ctx := context.Background()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if driver == "sqlite" {
		db.SetMaxOpenConns(1)
	}
	g, err := sqlguard.Open(ctx, db, sqlguard.WithTable("bench_fence_tokens"))
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	ph := func(n int) string {
		if g.Dialect() == sqlguard.PostgreSQL {
			return fmt.Sprintf("$%d", n)
		}
		return "?"
	}
	for _, q := range []string{
		"DROP TABLE IF EXISTS bench_accounts",
		"CREATE TABLE bench_accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO bench_accounts (id, balance, fence) VALUES (1, 0, 0)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	defer db.ExecContext(ctx, "DROP TABLE IF EXISTS bench_accounts")
	defer db.ExecContext(ctx, "DROP TABLE IF EXISTS bench_fence_tokens")

	plain := "UPDATE bench_accounts SET balance = " + ph(1) + " WHERE id = " + ph(2)
	b.Run("floor/"+name+"-rowcol", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := db.ExecContext(ctx, plain, i, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fencekit/"+name+"-rowcol", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			u := sqlguard.RowUpdate{Table: "bench_accounts", Column: "fence",
				Set:   []sqlguard.Assign{{Column: "balance", Value: i}},
				Where: "id = " + ph(1), WhereArgs: []any{1}, Single: true}
			if _, err := g.Update(ctx, db, tok, u); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor/"+name+"-table", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, plain, i, 1); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fencekit/"+name+"-table", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			err := g.RunTx(ctx, db, nil, tok, []string{"bench-acct-1"}, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, plain, i, 1)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

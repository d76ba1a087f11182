package sqlguard_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/promtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// countingVerifier is a real Verifier that counts its calls.
type countingVerifier struct {
	v sqlguard.Verifier
	n atomic.Int64
}

func (c *countingVerifier) Verify(ctx context.Context, t fence.Token) error {
	c.n.Add(1)
	return c.v.Verify(ctx, t)
}

// forgeWorld holds, for one lock name, the current holder's lease and
// tokens no current holder has: far future, a released acquisition's, a
// waiter's, another lock's holder's revision, another cluster's holder's,
// zero and negative.
type forgeWorld struct {
	locks   *lease.Client
	holder  *lease.Lease
	forged  map[string]fence.Token
	cluster *etcdtest.Cluster
}

func newForgeWorld(t *testing.T, c, other *etcdtest.Cluster, name string) *forgeWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := etcdtest.Client(t, c)
	newClient := func(cli *clientv3.Client) *lease.Client {
		l, err := lease.New(cli, lease.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	w := &forgeWorld{locks: newClient(cli), cluster: c, forged: map[string]fence.Token{}}
	first, err := w.locks.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w.holder, err = w.locks.Acquire(ctx, name); err != nil {
		t.Fatal(err)
	}
	otherLock, err := w.locks.Acquire(ctx, name+"-other")
	if err != nil {
		t.Fatal(err)
	}
	waiters := newClient(etcdtest.Client(t, c))
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); waiters.Acquire(wctx, name) }()
	t.Cleanup(func() { wcancel(); wg.Wait() })
	var waiter int64
	for waiter == 0 {
		resp, err := cli.Get(ctx, lease.DefaultPrefix+name+"/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) >= 2 {
			waiter = resp.Kvs[1].CreateRevision
		} else {
			time.Sleep(2 * time.Millisecond)
		}
	}
	// The other cluster's revision is pushed past ours first.
	cli2 := etcdtest.Client(t, other)
	for {
		resp, err := cli2.Put(ctx, "filler", "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision > waiter+3 {
			break
		}
	}
	elsewhere, err := newClient(cli2).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tk := func(rev int64) fence.Token { return fence.Token{Lock: name, Revision: rev} }
	w.forged["far future"] = tk(1 << 40)
	w.forged["released"] = first.Fence()
	w.forged["waiter"] = tk(waiter)
	w.forged["other lock's holder"] = tk(otherLock.Fence().Revision)
	w.forged["other cluster"] = elsewhere.Fence()
	w.forged["zero"] = tk(0)
	w.forged["negative"] = tk(-7)
	return w
}

// TestVerifiedRefusesForgedTokens: with a verifier, Fence, RunTx, Claim,
// Update and Upsert refuse every forged token and change nothing, before
// and after the holder wrote, while the holder's writes are accepted with
// one etcd read for the whole acquisition.
func TestVerifiedRefusesForgedTokens(t *testing.T) {
	c, other := etcdtest.Start(t), etcdtest.Start(t)
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			e := newEnv(t, be)
			ctx := context.Background()
			w := newForgeWorld(t, c, other, "items-"+e.prefix)
			cv := &countingVerifier{v: w.locks.Verifier()}
			reg := prometheus.NewRegistry()
			g := e.newGuard(sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithRequestTable(e.prefix+"req"),
				sqlguard.WithVerifier(cv), sqlguard.WithMetrics(reg))
			items := e.table("items", "id KEY, v TEXT, fence BIGINT")
			e.exec("INSERT INTO " + items + " (id, v, fence) VALUES ('a', 'initial', NULL)")
			update := func(tok fence.Token, v string) error {
				_, err := g.Update(ctx, e.db, tok, sqlguard.RowUpdate{Table: items,
					Set: []sqlguard.Assign{{Column: "v", Value: v}}, Where: "id = " + e.ph(1), WhereArgs: []any{"a"}})
				return err
			}
			upsert := func(tok fence.Token, v string) error {
				return g.Upsert(ctx, e.db, tok, sqlguard.RowUpsert{Table: items,
					Key: []sqlguard.Assign{{Column: "id", Value: "b"}}, Set: []sqlguard.Assign{{Column: "v", Value: v}}})
			}
			runTx := func(tok fence.Token) error {
				return g.RunTx(ctx, e.db, nil, tok, []string{"r1", "r2"}, func(ctx context.Context, tx *testTx) error {
					_, err := tx.ExecContext(ctx, "UPDATE "+items+" SET v = 'tx' WHERE id = 'a'")
					return err
				})
			}
			fenceTx := func(tok fence.Token) error {
				tx := e.begin(ctx)
				defer tx.Rollback()
				if err := g.Fence(ctx, tx, tok, "r1"); err != nil {
					return err
				}
				return tx.Commit()
			}
			state := func() string {
				var parts []string
				for _, r := range []string{"r1", "r2"} {
					m, err := g.Mark(ctx, e.db, r)
					if errors.Is(err, fence.ErrNoMark) {
						parts = append(parts, r+"=none")
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					parts = append(parts, r+"="+m.Token.String())
				}
				rows, err := e.db.QueryContext(ctx, "SELECT id, v, COALESCE(fence, 0) FROM "+items+" ORDER BY id")
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				for rows.Next() {
					var id, v string
					var f int64
					if err := rows.Scan(&id, &v, &f); err != nil {
						t.Fatal(err)
					}
					parts = append(parts, id+"="+v+"@"+strconv.FormatInt(f, 10))
				}
				return strings.Join(parts, " ")
			}
			refuseAll := func(phase string) {
				t.Helper()
				before := state()
				for name, tok := range w.forged {
					for op, f := range map[string]func(fence.Token) error{
						"fence":  fenceTx,
						"runtx":  runTx,
						"claim":  func(tok fence.Token) error { return g.Claim(ctx, e.db, tok, "r1") },
						"update": func(tok fence.Token) error { return update(tok, "forged") },
						"upsert": func(tok fence.Token) error { return upsert(tok, "forged") },
					} {
						err := f(tok)
						if err == nil {
							t.Errorf("%s: %s with %s token %v: accepted", phase, op, name, tok)
						} else if tok.Revision > 0 && !errors.Is(err, fence.ErrUnverified) && !errors.Is(err, fence.ErrStale) {
							t.Errorf("%s: %s with %s token: %v, want ErrUnverified or ErrStale", phase, op, name, err)
						}
					}
					if after := state(); after != before {
						t.Fatalf("%s: %s token changed %q into %q", phase, name, before, after)
					}
				}
			}

			refuseAll("no mark yet")
			real := w.holder.Fence()
			if err := runTx(real); err != nil {
				t.Fatalf("holder's RunTx: %v", err)
			}
			for range 3 {
				if err := fenceTx(real); err != nil {
					t.Fatalf("holder's Fence: %v", err)
				}
			}
			if err := update(real, "real"); err != nil {
				t.Fatalf("holder's Update: %v", err)
			}
			if err := upsert(real, "real"); err != nil {
				t.Fatalf("holder's Upsert: %v", err)
			}
			if err := g.Claim(ctx, e.db, real, "r3"); err != nil {
				t.Fatalf("holder's Claim: %v", err)
			}
			// Forgeries before the holder's writes: 5 tokens with a
			// positive revision x 5 ops. Then one read for all the holder's
			// calls.
			if n := cv.n.Load(); n != 5*5+1 {
				t.Errorf("verifier called %d times, want %d: once per forged call and once for the holder", n, 5*5+1)
			}
			refuseAll("after the holder wrote")
			if err := runTx(real); err != nil {
				t.Errorf("holder's RunTx after the forgeries: %v", err)
			}
			if err := update(real, "real again"); err != nil {
				t.Errorf("holder's Update after the forgeries: %v", err)
			}
			counts := promtest.Values(t, reg, "fencekit_sqlguard_decisions_total")
			if counts["op=fence,outcome=unverified"] == 0 || counts["op=update,outcome=unverified"] == 0 || counts["op=claim,outcome=unverified"] == 0 {
				t.Errorf("unverified decisions not counted: %v", counts)
			}
		})
	}
}

// TestVerifiedConcurrentForgeries: the same forged token from 50
// goroutines at once changes nothing; the holder writes afterwards.
func TestVerifiedConcurrentForgeries(t *testing.T) {
	c, other := etcdtest.Start(t), etcdtest.Start(t)
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			e := newEnv(t, be)
			ctx := context.Background()
			w := newForgeWorld(t, c, other, "conc-"+e.prefix)
			g := e.newGuard(sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithVerifier(w.locks.Verifier()))
			var wg sync.WaitGroup
			errs := make([]error, 50)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = g.RunTx(ctx, e.db, nil, w.forged["far future"], []string{"r"}, nil)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, fence.ErrUnverified) {
					t.Errorf("forger %d: %v, want ErrUnverified", i, err)
				}
			}
			if _, err := g.Mark(ctx, e.db, "r"); !errors.Is(err, fence.ErrNoMark) {
				t.Errorf("mark after 50 forgeries: %v, want none", err)
			}
			if err := g.RunTx(ctx, e.db, nil, w.holder.Fence(), []string{"r"}, nil); err != nil {
				t.Errorf("holder after the forgeries: %v", err)
			}
		})
	}
}

// TestVerifierUnreachableSQL: when etcd cannot be reached a new token is
// not accepted (an error that is not ErrUnverified), and nothing changes.
func TestVerifierUnreachableSQL(t *testing.T) {
	c, other := etcdtest.Start(t), etcdtest.Start(t)
	e := newEnv(t, backends()[0]) // SQLite: the verifier fails before any SQL
	w := newForgeWorld(t, c, other, "down")
	proxy, err := faultproxy.New(strings.TrimPrefix(c.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	v, err := lease.NewVerifier(etcdtest.Client(t, c, proxy.URL()), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	g := e.newGuard(sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithVerifier(v))
	proxy.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = g.Claim(ctx, e.db, w.holder.Fence(), "r")
	if err == nil || errors.Is(err, fence.ErrUnverified) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Claim with etcd unreachable: %v, want a failure matching context.DeadlineExceeded", err)
	}
	if _, err := g.Mark(context.Background(), e.db, "r"); !errors.Is(err, fence.ErrNoMark) {
		t.Errorf("mark: %v, want none", err)
	}
	proxy.Resume()
}

// TestResetMarkSQL: a mark poisoned by a guard without a verifier refuses
// the real holder until ResetMark, which needs the exact old mark.
func TestResetMarkSQL(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var logs syncLog
		g := e.newGuard(sqlguard.WithTable(e.prefix+"fence"),
			sqlguard.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		real, poison := fence.Token{Lock: "orders", Revision: 7}, fence.Token{Lock: "orders", Revision: 1 << 40}
		if err := g.Claim(ctx, e.db, poison, "r"); err != nil {
			t.Fatal(err)
		}
		if err := g.Claim(ctx, e.db, real, "r"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("holder on a poisoned mark: %v, want stale", err)
		}
		for _, old := range []fence.Token{real, {Lock: "orders", Revision: 1<<40 - 1}, {Lock: "other", Revision: 1 << 40}} {
			err := g.ResetMark(ctx, e.db, "r", old, fence.Token{Lock: old.Lock, Revision: 7})
			if !errors.Is(err, fence.ErrMarkChanged) {
				t.Errorf("reset from %v: %v, want fence.ErrMarkChanged", old, err)
			}
			if m, err := g.Mark(ctx, e.db, "r"); err != nil || m.Token != poison {
				t.Errorf("reset from %v: mark %v, %v; want it unchanged at %v", old, m.Token, err, poison)
			}
		}
		for _, next := range []fence.Token{{Lock: "orders"}, {Lock: "other", Revision: 7}} {
			if err := g.ResetMark(ctx, e.db, "r", poison, next); !errors.Is(err, sqlguard.ErrInvalid) {
				t.Errorf("reset to %v: %v, want ErrInvalid", next, err)
			}
		}
		if err := g.ResetMark(ctx, e.db, "none", poison, real); !errors.Is(err, fence.ErrNoMark) {
			t.Errorf("reset of a resource without a mark: %v, want fence.ErrNoMark", err)
		}
		if m := e.mark("r"); m.Token != poison {
			t.Fatalf("mark after refused resets: %v", m.Token)
		}
		if err := g.ResetMark(ctx, e.db, "r", poison, real); err != nil {
			t.Fatalf("reset: %v", err)
		}
		if err := g.Claim(ctx, e.db, real, "r"); err != nil {
			t.Errorf("holder after the reset: %v", err)
		}
		if !strings.Contains(logs.String(), `"mark_old":1099511627776,"mark":7`) || !strings.Contains(logs.String(), `"level":"WARN"`) {
			t.Errorf("no Warn record with both marks:\n%s", logs.String())
		}
	})
}

// syncLog is a log sink safe for concurrent writes.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

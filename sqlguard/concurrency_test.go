package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/fencekit/fencekit/fence"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/sqlguard"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// blockedFor is how long a goroutine must stay blocked for the test to
// believe it waits on a lock.
const blockedFor = 250 * time.Millisecond

// holder begins a transaction that fences resource with tk and keeps it
// open.
func (e *env) holder(tk int64, resource string) *testTx {
	e.t.Helper()
	ctx := context.Background()
	tx := e.begin(ctx)
	if err := e.g.Fence(ctx, tx, tok(tk), resource); err != nil {
		e.t.Fatalf("holder %d: %v", tk, err)
	}
	return tx
}

// goFence runs a whole fenced transaction in a goroutine and reports its
// result on the channel.
func (e *env) goFence(ctx context.Context, tk int64, resource string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		tx, err := e.db.BeginTx(ctx, nil) // SQLite immediate: this is where it waits
		if err != nil {
			ch <- err
			return
		}
		if err := e.g.Fence(ctx, tx, tok(tk), resource); err != nil {
			_ = tx.Rollback()
			ch <- err
			return
		}
		ch <- tx.Commit()
	}()
	return ch
}

func mustBlock(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("did not wait for the holder's lock: %v", err)
	case <-time.After(blockedFor):
	}
}

func result(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("blocked transaction never finished")
		return nil
	}
}

// T16: 7 holds the mark, 5 waits and is stale once 7 commits; and 5 first,
// then 7 applies.
func TestConcurrentOlderWaitsThenStale(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		h := e.holder(7, "acct")
		ch := e.goFence(ctx, 5, "acct")
		mustBlock(t, ch)
		if err := h.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := result(t, ch); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("older after newer committed: got %v, want ErrStale", err)
		}

		h = e.holder(7, "other")
		ch = e.goFence(ctx, 9, "other")
		mustBlock(t, ch)
		if err := h.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := result(t, ch); err != nil {
			t.Fatalf("newer after older committed: %v", err)
		}
		if m := e.mark("other"); m.Token.Revision != 9 || m.Seq != 2 {
			t.Fatalf("mark: %+v", m)
		}
	})
}

// T17: a newer holder that rolls back lets the older one proceed.
func TestConcurrentRolledBackNewerLetsOlder(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if err := e.fenceTx(tok(3), "acct"); err != nil {
			t.Fatal(err)
		}
		h := e.holder(7, "acct")
		ch := e.goFence(context.Background(), 5, "acct")
		mustBlock(t, ch)
		if err := h.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := result(t, ch); err != nil {
			t.Fatalf("older after newer rolled back: %v", err)
		}
		if m := e.mark("acct"); m.Token.Revision != 5 || m.Seq != 2 {
			t.Fatalf("mark: %+v, want 5/2", m)
		}
	})
}

// T27: a context cancelled during the lock wait ends the waiting
// transaction, which rolls back; the holder is unaffected.
func TestCancelDuringLockWait(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if e.be.name == "sqlite" && !sqliteInterruptsBusyWait(t) {
			t.Skip("modernc.org/sqlite v1 does not end a busy wait when its context is cancelled in this build (v1.50.1 and older; v1.62.0 does, and needs Go 1.26): the workspace's and the newest-versions runs cover it")
		}
		h := e.holder(7, "acct")
		ctx, cancel := context.WithCancel(context.Background())
		ch := e.goFence(ctx, 9, "acct")
		mustBlock(t, ch)
		cancel()
		err := result(t, ch)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: got %v, want context.Canceled", err)
		}
		if err := h.Commit(); err != nil {
			t.Fatalf("holder commit: %v", err)
		}
		// The cancelled 9 left nothing behind: the mark is 7 and 8 passes.
		if m := e.mark("acct"); m.Token.Revision != 7 || m.Seq != 1 {
			t.Fatalf("mark: %+v, want 7/1", m)
		}
		if err := e.fenceTx(tok(8), "acct"); err != nil {
			t.Fatalf("after cancelled waiter: %v", err)
		}
		// A context cancelled before the guard runs nothing.
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.g.Claim(dead, e.db, tok(99), "acct"); !errors.Is(err, context.Canceled) {
			t.Fatalf("dead context: got %v", err)
		}
	})
}

// T18: many transactions race to create a brand-new mark: one order wins,
// no duplicate-key error leaks out.
func TestConcurrentFirstInsert(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		const n = 6
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = e.g.Claim(context.Background(), e.db, tok(int64(10+i)), "fresh")
			}()
		}
		close(start)
		wg.Wait()
		best := int64(0)
		for i, err := range errs {
			switch {
			case err == nil:
				best = max(best, int64(10+i))
			case !errors.Is(err, fence.ErrStale):
				t.Errorf("claim %d: %v", 10+i, err)
			}
		}
		if m := e.mark("fresh"); m.Token.Revision != best || best == 0 {
			t.Fatalf("mark %+v, highest accepted %d", m, best)
		}
	})
}

// T22: transactions fencing the same resources in opposite orders do not
// deadlock, because Fence sorts them.
func TestOppositeOrders(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs := []string{"x", "y", "z"}
				if i%2 == 1 {
					slices.Reverse(rs)
				}
				for range 10 {
					err := e.g.RunTx(ctx, e.db, nil, tok(5), rs, func(ctx context.Context, tx *testTx) error {
						time.Sleep(time.Millisecond)
						return nil
					})
					if err != nil {
						failed.Add(1)
						t.Errorf("order %v: %v", rs, err)
					}
				}
			}()
		}
		wg.Wait()
		if m := e.mark("y"); m.Seq != 40 || failed.Load() != 0 {
			t.Fatalf("mark y: %+v, failures %d", m, failed.Load())
		}
	})
}

// T20, T21: isolation levels that cannot compare with the latest mark
// fail with ErrRetryable, not with a wrong answer: PostgreSQL REPEATABLE
// READ (40001), MariaDB with innodb_snapshot_isolation (1020), a deferred
// SQLite transaction that read first (SQLITE_BUSY_SNAPSHOT).
func TestRetryableUnderSnapshot(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		db := e.db
		var opts *sql.TxOptions
		switch e.g.Dialect() {
		case sqlguard.PostgreSQL:
			opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
		case sqlguard.SQLite:
			db = &testDB{DB: e.be.deferred(t)}
		default:
			var v string
			if err := e.db.QueryRow("SELECT version()").Scan(&v); err != nil {
				t.Fatal(err)
			}
			cfg, err := mysql.ParseDSN(dsnOrSkip(t, envMySQL))
			if err != nil {
				t.Fatal(err)
			}
			if e.g.Dialect() == sqlguard.MariaDB {
				cfg.Params = map[string]string{"innodb_snapshot_isolation": "ON"}
			}
			my, err := sql.Open("mysql", cfg.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer my.Close()
			db = &testDB{DB: my}
		}
		if err := e.fenceTx(tok(3), "acct"); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := e.g.Mark(ctx, tx, "acct"); err != nil { // takes the snapshot
			t.Fatal(err)
		}
		if err := e.fenceTx(tok(7), "acct"); err != nil {
			t.Fatal(err)
		}
		err = e.g.Fence(ctx, tx, tok(9), "acct")
		if e.g.Dialect() == sqlguard.MySQL {
			// MySQL 8 reads the latest row in DML: no error, 9 accepted.
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, sqlguard.ErrRetryable) || errors.Is(err, fence.ErrStale) {
			t.Fatalf("newer token after a concurrent advance: got %v, want ErrRetryable", err)
		}
		t.Logf("retryable: %v", err)
		_ = tx.Rollback()
		// Retrying with the same token converges.
		if err := e.g.RunTx(ctx, db, opts, tok(9), []string{"acct"}, nil); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if m := e.mark("acct"); m.Token.Revision != 9 {
			t.Fatalf("mark %+v", m)
		}
	})
}

// RunTx reruns the whole transaction on a retryable error, and the rolled
// back attempt leaves no trace; it gives up after WithMaxAttempts.
func TestRunTxRetries(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		attempts := 0
		err := e.g.RunTx(ctx, e.db, nil, tok(5), []string{"acct"}, func(ctx context.Context, tx *testTx) error {
			attempts++
			if attempts == 1 {
				return fmt.Errorf("%w: %w", sqlguard.ErrRetryable, errors.New("injected conflict"))
			}
			return nil
		})
		if err != nil || attempts != 2 {
			t.Fatalf("RunTx: %v after %d attempts", err, attempts)
		}
		if m := e.mark("acct"); m.Seq != 1 {
			t.Fatalf("mark %+v: the failed attempt left a trace", m)
		}
		g := e.newGuard(sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithMaxAttempts(3))
		attempts = 0
		err = g.RunTx(ctx, e.db, nil, tok(5), []string{"acct"}, func(ctx context.Context, tx *testTx) error {
			attempts++
			return fmt.Errorf("%w: %w", sqlguard.ErrRetryable, errors.New("injected conflict"))
		})
		if !errors.Is(err, sqlguard.ErrRetryable) || attempts != 3 {
			t.Fatalf("give up: %v after %d attempts", err, attempts)
		}
		if _, err := sqlguard.New(e.g.Dialect(), sqlguard.WithMaxAttempts(0)); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Fatalf("WithMaxAttempts(0): %v", err)
		}
	})
}

// commit is one accepted transaction of the stress test.
type commit struct {
	resource string
	token    int64
	seq      int64
}

// violations counts, per resource in seq (commit) order, accepted tokens
// that are lower than one accepted before them.
func violations(log []commit) int {
	slices.SortFunc(log, func(a, b commit) int {
		if a.resource != b.resource {
			if a.resource < b.resource {
				return -1
			}
			return 1
		}
		return int(a.seq - b.seq)
	})
	n := 0
	var high int64
	for i, c := range log {
		if i == 0 || c.resource != log[i-1].resource {
			high = 0
		}
		if c.token < high {
			n++
		}
		high = max(high, c.token)
	}
	return n
}

// The checker itself can fail.
func TestViolationsDetects(t *testing.T) {
	log := []commit{{"a", 5, 1}, {"a", 7, 2}, {"b", 9, 1}, {"a", 6, 3}, {"a", 7, 4}}
	if got := violations(log); got != 1 {
		t.Fatalf("violations = %d, want 1", got)
	}
	if got := violations([]commit{{"a", 5, 2}, {"a", 5, 1}, {"b", 1, 1}}); got != 0 {
		t.Fatalf("violations = %d, want 0", got)
	}
}

// fenceFunc is one way to check a token inside a transaction; it returns
// the seq the transaction got, or an error.
type fenceFunc func(ctx context.Context, e *env, tx *testTx, tk int64, resource string) (int64, error)

func guarded(ctx context.Context, e *env, tx *testTx, tk int64, resource string) (int64, error) {
	if err := e.g.Fence(ctx, tx, tok(tk), resource); err != nil {
		return 0, err
	}
	m, err := e.g.Mark(ctx, tx, resource)
	return m.Seq, err
}

// naive is the anti-pattern: a plain SELECT, a comparison in Go, an
// unconditional UPDATE. It is here to prove the stress test can fail.
func naive(ctx context.Context, e *env, tx *testTx, tk int64, resource string) (int64, error) {
	table := e.prefix + "fence"
	var cur int64
	if err := tx.QueryRowContext(ctx, "SELECT token FROM "+table+" WHERE resource = "+e.ph(1), resource).Scan(&cur); err != nil {
		return 0, err
	}
	if cur > tk {
		return 0, fence.ErrStale
	}
	time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
	if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET token = "+e.ph(1)+", seq = seq + 1 WHERE resource = "+e.ph(2), tk, resource); err != nil {
		return 0, err
	}
	var seq int64
	err := tx.QueryRowContext(ctx, "SELECT seq FROM "+table+" WHERE resource = "+e.ph(1), resource).Scan(&seq)
	return seq, err
}

// stress runs workers that each commit fenced transactions with jittered,
// roughly increasing tokens; every accepted transaction also writes its
// token into a data row. It returns the commit log and checks that the
// data ends at the highest accepted token when wantData is set.
func stress(t *testing.T, e *env, f fenceFunc) []commit {
	const workers, perWorker = 8, 25
	resources := []string{"r0", "r1"}
	items := e.table("data", "id KEY, val BIGINT NOT NULL")
	for _, r := range resources {
		e.exec("INSERT INTO "+items+" (id, val) VALUES ("+e.ph(1)+", 0)", r)
		if err := e.g.Claim(context.Background(), e.db, tok(1), r); err != nil {
			t.Fatal(err)
		}
	}
	var (
		counter atomic.Int64
		mu      sync.Mutex
		log     []commit
		wg      sync.WaitGroup
		others  atomic.Int64
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				ctx := context.Background()
				tk := max(1, counter.Add(1)+int64(rand.IntN(7))-3)
				r := resources[(w+i)%len(resources)]
				var seq int64
				err := e.g.RunTx(ctx, e.db, nil, tok(tk), nil, func(ctx context.Context, tx *testTx) error {
					var err error
					if seq, err = f(ctx, e, tx, tk, r); err != nil {
						return err
					}
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // the work
					_, err = tx.ExecContext(ctx, "UPDATE "+items+" SET val = "+e.ph(1)+" WHERE id = "+e.ph(2), tk, r)
					return err
				})
				switch {
				case err == nil:
					mu.Lock()
					log = append(log, commit{r, tk, seq})
					mu.Unlock()
				case errors.Is(err, fence.ErrStale):
				default:
					others.Add(1)
					t.Errorf("worker %d: %v", w, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d commits of %d transactions", len(log), workers*perWorker)
	return log
}

// finalData reports resources whose data row does not hold the highest
// accepted token.
func finalData(t *testing.T, e *env, log []commit) []string {
	high := map[string]int64{}
	for _, c := range log {
		high[c.resource] = max(high[c.resource], c.token)
	}
	var bad []string
	for r, want := range high {
		var got int64
		if err := e.db.QueryRow("SELECT val FROM "+e.prefix+"data WHERE id = "+e.ph(1), r).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			bad = append(bad, fmt.Sprintf("%s=%d (highest accepted %d)", r, got, want))
		}
	}
	return bad
}

// T19: accepted tokens never decrease in commit order, and the data ends
// at the highest accepted token.
func TestStressProperty(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		log := stress(t, e, guarded)
		if n := violations(log); n != 0 {
			t.Errorf("%d accepted tokens lower than an earlier commit", n)
		}
		if bad := finalData(t, e, log); len(bad) > 0 {
			t.Errorf("data rows not at the highest accepted token: %v", bad)
		}
	})
}

// T23: the same property fails for SELECT-compare-UPDATE. SQLite is
// skipped: with BEGIN IMMEDIATE it admits one writer transaction at a time,
// so the naive check cannot interleave there (and a deferred transaction
// gets SQLITE_BUSY_SNAPSHOT instead).
func TestNaiveFailsProperty(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if e.g.Dialect() == sqlguard.SQLite {
			t.Skip("SQLite serialises write transactions; the naive check cannot interleave")
		}
		log := stress(t, e, naive)
		n := violations(log)
		t.Logf("naive: %d violations", n)
		if n == 0 {
			t.Fatal("the naive SELECT-then-UPDATE passed the property: the stress test cannot detect violations")
		}
	})
}

// T25: the documented hazard. On PostgreSQL, rolling back to a savepoint
// taken before Fence undoes the advance and releases the fence row's lock
// while the transaction goes on, so another holder is not held back. The
// package doc says to fence outside savepoints; this test pins the reason.
func TestSavepointRollbackReleasesFence(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if e.g.Dialect() != sqlguard.PostgreSQL {
			t.Skip("only PostgreSQL releases row locks on ROLLBACK TO SAVEPOINT")
		}
		ctx := context.Background()
		tx := e.begin(ctx)
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		if err := e.g.Fence(ctx, tx, tok(7), "acct"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		// 5 neither waits nor is refused: 7's fence is gone.
		if err := result(t, e.goFence(ctx, 5, "acct")); err != nil {
			t.Fatalf("older token after the savepoint rollback: %v", err)
		}
		// Fencing again before COMMIT restores the guarantee.
		if err := e.g.Fence(ctx, tx, tok(7), "acct"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if m := e.mark("acct"); m.Token.Revision != 7 {
			t.Fatalf("mark %+v", m)
		}
	})
}

// A real lock-wait timeout (PostgreSQL's 55P03, from SET LOCAL
// lock_timeout) inside RunTx is retried with the same token and succeeds
// once the blocker is gone; with one attempt it is returned as a
// *RetryableError wrapping the server's error.
func TestRunTxRetriesLockTimeout(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if e.g.Dialect() != sqlguard.PostgreSQL {
			t.Skip("SET LOCAL lock_timeout and SQLSTATE 55P03 are PostgreSQL's")
		}
		ctx := context.Background()
		acc := e.table("acc", "id KEY, balance BIGINT NOT NULL")
		e.exec("INSERT INTO " + acc + " (id, balance) VALUES ('alice', 100)")
		block := func() *testTx {
			tx := e.begin(ctx)
			if _, err := tx.ExecContext(ctx, "UPDATE "+acc+" SET balance = balance WHERE id = 'alice'"); err != nil {
				t.Fatal(err)
			}
			return tx
		}
		deposit := func(ctx context.Context, tx *testTx) error {
			if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "UPDATE "+acc+" SET balance = balance + 1 WHERE id = 'alice'")
			return err
		}
		blocker := block()
		defer blocker.Rollback()
		attempts := 0
		err := e.g.RunTx(ctx, e.db, nil, tok(5), []string{"acct"}, func(ctx context.Context, tx *testTx) error {
			attempts++
			if attempts == 2 {
				if err := blocker.Rollback(); err != nil {
					return err
				}
			}
			return deposit(ctx, tx)
		})
		if err != nil || attempts < 2 {
			t.Fatalf("RunTx: %v after %d attempts, want success after a retry", err, attempts)
		}
		g := e.newGuard(sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithMaxAttempts(1))
		blocker2 := block()
		defer blocker2.Rollback()
		err = g.RunTx(ctx, e.db, nil, tok(5), []string{"acct"}, deposit)
		var pe *pgconn.PgError
		if !errors.Is(err, sqlguard.ErrRetryable) || !errors.As(err, &pe) || pe.Code != "55P03" {
			t.Fatalf("one attempt: got %v, want ErrRetryable wrapping 55P03", err)
		}
	})
}

// Serializable transactions that read and fence the same resource
// conflict with 40001, and RunTx retries them: every one commits or is
// stale, and the mark counts the commits.
func TestRunTxSerializable(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if e.g.Dialect() != sqlguard.PostgreSQL {
			t.Skip("the serialization failure 40001 under SERIALIZABLE is PostgreSQL's")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const n = 6
		errs := make(chan error, n)
		for i := range n {
			go func() {
				errs <- e.g.RunTx(ctx, e.db, &sql.TxOptions{Isolation: sql.LevelSerializable}, tok(int64(10+i)), []string{"acct"},
					func(ctx context.Context, tx *testTx) error {
						_, err := e.g.Mark(ctx, tx, "acct")
						time.Sleep(5 * time.Millisecond)
						return err
					})
			}()
		}
		var ok, stale int
		for range n {
			switch err := <-errs; {
			case err == nil:
				ok++
			case errors.Is(err, fence.ErrStale):
				stale++
			default:
				t.Errorf("RunTx: %v", err)
			}
		}
		if ok == 0 {
			t.Fatalf("no transaction committed (%d stale)", stale)
		}
		if m := e.mark("acct"); m.Token.Revision > 10+n-1 || int(m.Seq) != ok {
			t.Fatalf("mark %+v after %d commits", m, ok)
		}
	})
}

// A concurrent Record of the same key waits for the first transaction:
// duplicate when it commits, recorded when it rolls back.
func TestRecordWaits(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, commit := range []bool{true, false} {
			key := fmt.Sprintf("req-commit=%v", commit)
			first := e.begin(ctx)
			if err := e.g.Record(ctx, first, key); err != nil {
				t.Fatal(err)
			}
			ch := make(chan error, 1)
			go func() {
				ch <- e.g.RunTx(ctx, e.db, nil, tok(5), []string{"acct"}, func(ctx context.Context, tx *testTx) error {
					return e.g.Record(ctx, tx, key)
				})
			}()
			mustBlock(t, ch)
			var err error
			if commit {
				err = first.Commit()
			} else {
				err = first.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			err = result(t, ch)
			if commit && !errors.Is(err, sqlguard.ErrDuplicate) {
				t.Fatalf("after the first committed: got %v, want ErrDuplicate", err)
			}
			if !commit && err != nil {
				t.Fatalf("after the first rolled back: %v", err)
			}
		}
	})
}

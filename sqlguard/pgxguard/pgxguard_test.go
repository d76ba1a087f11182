package pgxguard_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Absent, newer, equal, older, wrong lock and the int64 range, through a
// pgx.Tx.
func TestFenceSemantics(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if _, err := e.g.Mark(ctx, e.pool, "acct"); !errors.Is(err, sqlguard.ErrNotFound) {
			t.Fatalf("Mark before any fence: got %v, want ErrNotFound", err)
		}
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatalf("first fence: %v", err)
		}
		if err := e.fenceTx(tok(7), "acct"); err != nil {
			t.Fatalf("newer: %v", err)
		}
		for range 2 {
			if err := e.fenceTx(tok(7), "acct"); err != nil {
				t.Fatalf("equal: %v", err)
			}
		}
		if m := e.mark("acct"); m.Token != tok(7) || m.Seq != 4 {
			t.Fatalf("mark: got %+v, want token 7 seq 4", m)
		}
		err := e.fenceTx(tok(6), "acct")
		var se *sqlguard.StaleError
		if !errors.Is(err, sqlguard.ErrStale) || !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) ||
			se.Resource != "acct" || se.Token != tok(6) || se.Current != tok(7) {
			t.Fatalf("older: got %v (%+v), want *StaleError at 7", err, se)
		}
		err = e.fenceTx(fence.Token{Lock: "other", Revision: 100}, "acct")
		var we *sqlguard.WrongLockError
		if !errors.As(err, &we) || we.Want != "orders" || !errors.Is(err, fence.ErrWrongLock) {
			t.Fatalf("wrong lock: got %v, want *WrongLockError for orders", err)
		}
		if err := e.fenceTx(tok(math.MaxInt64), "acct"); err != nil {
			t.Fatalf("MaxInt64: %v", err)
		}
		if m := e.mark("acct"); m.Token.Revision != math.MaxInt64 || m.Seq != 5 {
			t.Fatalf("mark: got %+v, want MaxInt64 seq 5", m)
		}
	})
}

// Bad input is refused before any SQL, and a pool where a transaction is
// needed.
func TestRefusedBeforeSQL(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.g.Fence(ctx, e.pool, tok(5), "acct"); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Errorf("Fence on a pool: got %v, want ErrNeedTx", err)
		}
		if err := e.g.Record(ctx, e.pool, "req"); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Errorf("Record on a pool: got %v, want ErrNeedTx", err)
		}
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, c := range []struct {
			name string
			err  error
		}{
			{"zero token", e.g.Fence(ctx, tx, tok(0), "acct")},
			{"no resources", e.g.Fence(ctx, tx, tok(5))},
			{"NUL in resource", e.g.Fence(ctx, tx, tok(5), "a\x00b")},
			{"nil DBTX", e.g.Fence(ctx, nil, tok(5), "acct")},
			{"nil Beginner", e.g.Claim(ctx, nil, tok(5), "acct")},
			{"nil RunTx Beginner", e.g.RunTx(ctx, nil, pgx.TxOptions{}, tok(5), []string{"acct"}, nil)},
		} {
			if !errors.Is(c.err, sqlguard.ErrInvalid) {
				t.Errorf("%s: got %v, want ErrInvalid", c.name, c.err)
			}
		}
		// The transaction is still usable: nothing was sent.
		if err := e.g.Fence(ctx, tx, tok(5), "acct"); err != nil {
			t.Fatalf("Fence after refusals: %v", err)
		}
	})
}

func TestWrap(t *testing.T) {
	sg, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgxguard.Wrap(sg); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Errorf("Wrap(SQLite guard): got %v, want ErrInvalid", err)
	}
	if _, err := pgxguard.Wrap(nil); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Errorf("Wrap(nil): got %v, want ErrInvalid", err)
	}
	if _, err := pgxguard.New(sqlguard.WithMaxAttempts(0)); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Errorf("New(WithMaxAttempts(0)): got %v, want ErrInvalid", err)
	}
	pg, err := sqlguard.New(sqlguard.PostgreSQL)
	if err != nil {
		t.Fatal(err)
	}
	g, err := pgxguard.Wrap(pg)
	if err != nil || g.SQL() != pg {
		t.Fatalf("Wrap(PostgreSQL guard): %v", err)
	}
}

func TestClassify(t *testing.T) {
	g, err := pgxguard.New()
	if err != nil {
		t.Fatal(err)
	}
	for code, want := range map[string]bool{"40001": true, "40P01": true, "55P03": true, "23505": false, "0A000": false} {
		err := g.Classify(&pgconn.PgError{Code: code})
		if got := errors.Is(err, sqlguard.ErrRetryable); got != want {
			t.Errorf("Classify(%s): retryable %v, want %v", code, got, want)
		}
	}
	cached := &pgconn.PgError{Severity: "ERROR", Code: "0A000", Message: "cached plan must not change result type"}
	if !errors.Is(g.Classify(cached), sqlguard.ErrRetryable) {
		t.Error("a cached plan invalidated by a migration is not retryable")
	}
	if g.Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}

// RunTx commits fn's writes when the token passes, rolls them back when it
// is stale or fn fails, and records idempotency keys.
func TestRunTx(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		acc := e.table("acc", "id TEXT PRIMARY KEY, balance BIGINT NOT NULL")
		if _, err := e.pool.Exec(ctx, "INSERT INTO "+acc+" VALUES ('alice', 100)"); err != nil {
			t.Fatal(err)
		}
		deposit := func(tk fence.Token, amount int64, req string) error {
			return e.g.RunTx(ctx, e.pool, pgx.TxOptions{}, tk, []string{"account/alice"}, func(ctx context.Context, tx pgx.Tx) error {
				if err := e.g.Record(ctx, tx, req); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "UPDATE "+acc+" SET balance = balance + $1 WHERE id = 'alice'", amount)
				return err
			})
		}
		balance := func() int64 {
			var b int64
			if err := e.pool.QueryRow(ctx, "SELECT balance FROM "+acc+" WHERE id = 'alice'").Scan(&b); err != nil {
				t.Fatal(err)
			}
			return b
		}
		if err := deposit(tok(9), 10, "r1"); err != nil {
			t.Fatalf("newer: %v", err)
		}
		if err := deposit(tok(9), 10, "r1"); !errors.Is(err, sqlguard.ErrDuplicate) {
			t.Fatalf("same request again: got %v, want ErrDuplicate", err)
		}
		if err := deposit(tok(5), 1000, "r2"); !errors.Is(err, sqlguard.ErrStale) {
			t.Fatalf("older: got %v, want ErrStale", err)
		}
		boom := errors.New("boom")
		err := e.g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(9), []string{"account/alice"}, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE "+acc+" SET balance = 0"); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("fn error: got %v, want boom", err)
		}
		if b := balance(); b != 110 {
			t.Fatalf("balance %d, want 110", b)
		}
		if ok, err := e.g.Recorded(ctx, e.pool, "r2"); err != nil || ok {
			t.Fatalf("Recorded(r2) = %v, %v; want false (rolled back)", ok, err)
		}
		if ok, err := e.g.Recorded(ctx, e.pool, "r1"); err != nil || !ok {
			t.Fatalf("Recorded(r1) = %v, %v; want true", ok, err)
		}
		// Claim by a newer holder shuts the old one out.
		if err := e.g.Claim(ctx, e.pool, tok(12), "account/alice"); err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if err := deposit(tok(9), 1, "r3"); !errors.Is(err, sqlguard.ErrStale) {
			t.Fatalf("after Claim: got %v, want ErrStale", err)
		}
		if err := e.g.Claim(ctx, e.pool, tok(11), "account/alice"); !errors.Is(err, sqlguard.ErrStale) {
			t.Fatalf("older Claim: got %v, want ErrStale", err)
		}
	})
}

// A real lock-wait timeout (55P03) inside RunTx is retried with the same
// token and succeeds once the blocker is gone.
func TestRunTxRetries(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		acc := e.table("acc", "id TEXT PRIMARY KEY, balance BIGINT NOT NULL")
		if _, err := e.pool.Exec(ctx, "INSERT INTO "+acc+" VALUES ('alice', 100)"); err != nil {
			t.Fatal(err)
		}
		blocker, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer blocker.Rollback(ctx)
		if _, err := blocker.Exec(ctx, "UPDATE "+acc+" SET balance = balance WHERE id = 'alice'"); err != nil {
			t.Fatal(err)
		}
		attempts := 0
		err = e.g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(5), []string{"acct"}, func(ctx context.Context, tx pgx.Tx) error {
			attempts++
			if attempts == 2 {
				if err := blocker.Rollback(ctx); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE "+acc+" SET balance = balance + 1 WHERE id = 'alice'")
			return err
		})
		if err != nil || attempts < 2 {
			t.Fatalf("RunTx: %v after %d attempts, want success after a retry", err, attempts)
		}
		// With one attempt, the lock timeout is returned as retryable.
		g := e.guard(sqlguard.WithMaxAttempts(1))
		blocker2, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer blocker2.Rollback(ctx)
		if _, err := blocker2.Exec(ctx, "UPDATE "+acc+" SET balance = balance WHERE id = 'alice'"); err != nil {
			t.Fatal(err)
		}
		err = g.RunTx(ctx, e.pool, pgx.TxOptions{}, tok(5), []string{"acct"}, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '50ms'"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE "+acc+" SET balance = balance + 1 WHERE id = 'alice'")
			return err
		})
		var re *sqlguard.RetryableError
		var pe *pgconn.PgError
		if !errors.As(err, &re) || !errors.As(err, &pe) || pe.Code != "55P03" {
			t.Fatalf("one attempt: got %v, want *RetryableError wrapping 55P03", err)
		}
	})
}

// Serializable transactions that fence the same resource conflict with
// 40001, and RunTx retries them to success.
func TestRunTxSerializable(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const n = 6
		errs := make(chan error, n)
		for i := range n {
			go func() {
				errs <- e.g.RunTx(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, tok(int64(10+i)), []string{"acct"},
					func(ctx context.Context, tx pgx.Tx) error {
						_, err := e.g.Mark(ctx, tx, "acct")
						time.Sleep(5 * time.Millisecond)
						return err
					})
			}()
		}
		var ok, stale int
		for range n {
			err := <-errs
			switch {
			case err == nil:
				ok++
			case errors.Is(err, sqlguard.ErrStale):
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

// Row-column mode on a pool and in a transaction.
func TestUpdateUpsert(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		jobs := e.table("jobs", "id TEXT PRIMARY KEY, state TEXT, fence BIGINT NOT NULL DEFAULT 0")
		if err := e.g.CheckColumn(ctx, e.pool, jobs, "fence"); err != nil {
			t.Fatal(err)
		}
		up := func(rev int64, id, state string, single bool) (int64, error) {
			return e.g.Update(ctx, e.pool, tok(rev), sqlguard.RowUpdate{Table: jobs, Set: []sqlguard.Assign{{Column: "state", Value: state}},
				Where: "id = $1", WhereArgs: []any{id}, Single: single})
		}
		if err := e.g.Upsert(ctx, e.pool, tok(3), sqlguard.RowUpsert{Table: jobs, Key: []sqlguard.Assign{{Column: "id", Value: "j1"}},
			Set: []sqlguard.Assign{{Column: "state", Value: "queued"}}}); err != nil {
			t.Fatalf("Upsert new: %v", err)
		}
		for _, single := range []bool{false, true} {
			if n, err := up(7, "j1", "running", single); err != nil || n != 1 {
				t.Fatalf("Update newer (single %v): %d, %v", single, n, err)
			}
			var se *sqlguard.StaleError
			if _, err := up(6, "j1", "failed", single); !errors.As(err, &se) || se.Current.Revision != 7 {
				t.Fatalf("Update older (single %v): got %v, want stale at 7", single, err)
			}
			if _, err := up(8, "nope", "x", single); !errors.Is(err, sqlguard.ErrNotFound) {
				t.Fatalf("Update missing (single %v): got %v, want ErrNotFound", single, err)
			}
		}
		err := e.g.Upsert(ctx, e.pool, tok(5), sqlguard.RowUpsert{Table: jobs, Key: []sqlguard.Assign{{Column: "id", Value: "j1"}},
			Set: []sqlguard.Assign{{Column: "state", Value: "queued"}}})
		if !errors.Is(err, sqlguard.ErrStale) {
			t.Fatalf("stale Upsert: got %v", err)
		}
		var state string
		var f int64
		if err := e.pool.QueryRow(ctx, "SELECT state, fence FROM "+jobs+" WHERE id = 'j1'").Scan(&state, &f); err != nil {
			t.Fatal(err)
		}
		if state != "running" || f != 7 {
			t.Fatalf("row: %q fence %d, want running 7", state, f)
		}
	})
}

// ResetMark through pgx.
func TestResetMark(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.fenceTx(tok(1000), "acct"); err != nil {
			t.Fatal(err)
		}
		if err := e.g.ResetMark(ctx, e.pool, "acct", tok(999), tok(4)); !errors.Is(err, sqlguard.ErrMarkChanged) {
			t.Fatalf("wrong old mark: got %v", err)
		}
		if err := e.g.ResetMark(ctx, e.pool, "acct", tok(1000), tok(4)); err != nil {
			t.Fatalf("ResetMark: %v", err)
		}
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatalf("fence after reset: %v", err)
		}
	})
}

// Bind through pgx: a declared resource refuses another lock's first
// token.
func TestBind(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.g.Bind(ctx, e.pool, "acct", "orders"); err != nil {
			t.Fatalf("Bind: %v", err)
		}
		if err := e.fenceTx(fence.Token{Lock: "payments", Revision: 5}, "acct"); !errors.Is(err, sqlguard.ErrWrongLock) {
			t.Fatalf("first token of another lock: got %v, want ErrWrongLock", err)
		}
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatalf("bound lock: %v", err)
		}
		if err := e.g.Bind(ctx, e.pool, "acct", "payments"); !errors.Is(err, sqlguard.ErrWrongLock) {
			t.Fatalf("Bind to another lock: got %v", err)
		}
	})
}

// WithCluster through pgx: a new cluster's restarted revision is a
// *ClusterError; ResetMark recovers.
func TestCluster(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		oldC, newC := e.guard(sqlguard.WithCluster(0xa1)), e.guard(sqlguard.WithCluster(0xb2))
		if err := oldC.Migrate(ctx, e.pool); err != nil {
			t.Fatal(err)
		}
		if err := oldC.Claim(ctx, e.pool, tok(30), "acct"); err != nil {
			t.Fatal(err)
		}
		err := newC.Claim(ctx, e.pool, tok(2), "acct")
		var ce *sqlguard.ClusterError
		if !errors.As(err, &ce) || !errors.Is(err, sqlguard.ErrStale) || ce.MarkCluster != "a1" {
			t.Fatalf("new cluster: got %v, want *ClusterError", err)
		}
		if err := newC.ResetMark(ctx, e.pool, "acct", tok(30), tok(2)); err != nil {
			t.Fatal(err)
		}
		if err := newC.Claim(ctx, e.pool, tok(2), "acct"); err != nil {
			t.Fatalf("after reset: %v", err)
		}
		if m, err := newC.Mark(ctx, e.pool, "acct"); err != nil || m.Cluster != "b2" {
			t.Fatalf("Mark: %+v, %v", m, err)
		}
	})
}

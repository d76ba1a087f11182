package pgxguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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

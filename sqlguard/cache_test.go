package sqlguard_test

import (
	"context"
	"errors"
	"github.com/fencekit/fencekit/fence"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/sqlguard"
)

// TestStatementCacheAcrossMigrate: a column type changed under cached
// prepared statements makes the next run of each fail once with SQLSTATE
// 0A000 ("cached plan must not change result type"). sqlguard classifies
// that as retryable, so RunTx runs the transaction again and gets the new
// schema's results. The transaction runs the caller's own SELECT and a
// fenced Update: through pgx/v5/stdlib both are cached; on the pgx path
// only the caller's is (sqlguard's statements run unprepared); behind
// PgBouncer the connections cache nothing, and the results must be the
// same without a retry. Every PostgreSQL backend runs on one connection,
// so that its cache is the one hit.
func TestStatementCacheAcrossMigrate(t *testing.T) {
	for _, be := range backends() {
		if be.name != "postgres" && be.name != "postgres-pgbouncer" && !be.pgx {
			continue
		}
		t.Run(be.name, func(t *testing.T) { testStatementCacheAcrossMigrate(t, newEnvConns(t, be, 1)) })
	}
}

func testStatementCacheAcrossMigrate(t *testing.T, e *env) {
	ctx := context.Background()
	jobs := e.table("jobs", "id KEY, state TEXT, fence INTEGER NOT NULL DEFAULT 0")
	if _, err := e.db.Exec("INSERT INTO " + jobs + " (id, state) VALUES ('j1', 'queued')"); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	stale := func() error {
		attempts = 0
		return e.g.RunTx(ctx, e.db, nil, tok(6), nil, func(ctx context.Context, tx *testTx) error {
			attempts++
			// The caller's own statement, cached where the connection
			// caches: by pgx on the pgx path, by pgx/v5/stdlib on
			// database/sql.
			var f int64
			if err := tx.QueryRowContext(ctx, "SELECT fence FROM "+jobs+" WHERE id = $1", "j1").Scan(&f); err != nil {
				return err
			}
			_, err := e.g.Update(ctx, tx, tok(6), sqlguard.RowUpdate{Table: jobs, Set: []sqlguard.Assign{{Column: "state", Value: "x"}},
				Where: "id = $1", WhereArgs: []any{"j1"}})
			return err
		})
	}
	if err := e.g.RunTx(ctx, e.db, nil, tok(7), []string{"acct"}, func(ctx context.Context, tx *testTx) error {
		_, err := e.g.Update(ctx, tx, tok(7), sqlguard.RowUpdate{Table: jobs, Set: []sqlguard.Assign{{Column: "state", Value: "running"}},
			Where: "id = $1", WhereArgs: []any{"j1"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := stale(); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("before the migration: got %v, want ErrStale", err)
	}
	if _, err := e.db.Exec("ALTER TABLE " + jobs + " ALTER COLUMN fence TYPE BIGINT"); err != nil {
		t.Fatal(err)
	}
	var se *fence.RefusedError
	if err := stale(); !errors.As(err, &se) || se.Mark.Revision != 7 || se.Row == "" {
		t.Fatalf("after the migration: got %v, want ErrStale at 7", err)
	}
	// Each cached statement whose result type changed fails once, and
	// RunTx retries: through pgx/v5/stdlib the caller's SELECT and
	// sqlguard's statements (3 attempts or more); on the pgx path only the
	// caller's SELECT (2); behind PgBouncer none (1).
	switch {
	case strings.HasSuffix(e.be.name, "-pgbouncer"):
		if attempts != 1 {
			t.Fatalf("after the migration, behind PgBouncer: %d attempts, want 1", attempts)
		}
	case e.be.pgx:
		if attempts != 2 {
			t.Fatalf("after the migration, on pgx: %d attempts, want 2 (sqlguard's statements are not cached)", attempts)
		}
	case attempts < 2:
		t.Fatalf("after the migration: %d attempts; the statement cache was not hit", attempts)
	}
}

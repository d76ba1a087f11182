package sqlguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/sqlguard"
)

// TestStatementCacheAcrossMigrate: through pgx/v5/stdlib, whose
// connections cache prepared statements, a column type changed under
// cached statements makes the next run fail once with SQLSTATE 0A000
// ("cached plan must not change result type"). sqlguard classifies that
// as retryable, so RunTx runs the transaction again and gets the new
// schema's results. On the pgx path sqlguard's statements are not cached
// at all, and behind PgBouncer nothing is: there the results must be the
// same, without a retry. Every PostgreSQL backend runs on one connection,
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
	stale := func() error {
		return e.g.RunTx(ctx, e.db, nil, tok(6), nil, func(ctx context.Context, tx *testTx) error {
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
	if err := stale(); !errors.Is(err, sqlguard.ErrStale) {
		t.Fatalf("before the migration: got %v, want ErrStale", err)
	}
	if _, err := e.db.Exec("ALTER TABLE " + jobs + " ALTER COLUMN fence TYPE BIGINT"); err != nil {
		t.Fatal(err)
	}
	var se *sqlguard.StaleError
	if err := stale(); !errors.As(err, &se) || se.Current.Revision != 7 || se.Row == "" {
		t.Fatalf("after the migration: got %v, want ErrStale at 7", err)
	}
}

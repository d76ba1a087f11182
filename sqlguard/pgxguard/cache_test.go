package pgxguard_test

import (
	"context"
	"errors"
	"github.com/fencekit/fencekit/fence"
	"testing"

	"github.com/fencekit/fencekit/sqlguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestStatementCacheAcrossMigrate: on a *pgx.Conn in pgx's default mode
// (QueryExecModeCacheStatement), run every kind of statement, then migrate
// the schema under it (drop and re-create the fence tables, change the
// fence column's type) and run them again on the same connection. The
// results must be those of the new schema, with no error: sqlguard's
// statements are not cached. The caller's own cached statement shows that
// the hazard is real.
func TestStatementCacheAcrossMigrate(t *testing.T) {
	e := newEnv(t, targets()[0])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsnOrSkip(t, envPG))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		t.Fatalf("connection mode %v, want pgx's default", conn.Config().DefaultQueryExecMode)
	}
	jobs := e.table("jobs", "id TEXT PRIMARY KEY, state TEXT, fence INTEGER NOT NULL DEFAULT 0")
	if _, err := conn.Exec(ctx, "INSERT INTO "+jobs+" (id, state) VALUES ('j1', 'queued')"); err != nil {
		t.Fatal(err)
	}
	userRead := "SELECT fence FROM " + jobs + " WHERE id = $1"

	round := func(rev int64, wantSeq int64) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := e.g.Fence(ctx, tx, tok(rev), "acct"); err != nil {
			t.Fatalf("Fence(%d): %v", rev, err)
		}
		if err := e.g.Record(ctx, tx, "req-1"); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if _, err := e.g.Update(ctx, tx, tok(rev), sqlguard.RowUpdate{Table: jobs, Set: []sqlguard.Assign{{Column: "state", Value: "running"}},
			Where: "id = $1", WhereArgs: []any{"j1"}}); err != nil {
			t.Fatalf("Update: %v", err)
		}
		// The row is newer than rev-1: a read-back classifies it as stale.
		if _, err := e.g.Update(ctx, tx, tok(rev-1), sqlguard.RowUpdate{Table: jobs, Set: []sqlguard.Assign{{Column: "state", Value: "x"}},
			Where: "id = $1", WhereArgs: []any{"j1"}, Single: true}); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("stale Update: got %v", err)
		}
		m, err := e.g.Mark(ctx, tx, "acct")
		if err != nil || m.Token != tok(rev) || m.Seq != wantSeq {
			t.Fatalf("Mark: %+v, %v; want %d seq %d", m, err, rev, wantSeq)
		}
		if err := e.g.CheckSchema(ctx, tx); err != nil {
			t.Fatalf("CheckSchema: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	round(50, 1)
	var f int64
	if err := conn.QueryRow(ctx, userRead, "j1").Scan(&f); err != nil || f != 50 {
		t.Fatalf("user read: %d, %v", f, err)
	}

	// The migration, on another connection.
	e.migrateUnder(jobs)

	// The caller's cached statement now fails once (0A000, "cached plan
	// must not change result type"): the hazard exists on this connection.
	var pe *pgconn.PgError
	if err := conn.QueryRow(ctx, userRead, "j1").Scan(&f); !errors.As(err, &pe) || pe.Code != "0A000" {
		t.Fatalf("user's cached read after the migration: got %v, want 0A000", err)
	}
	// sqlguard's are unaffected: an empty fence table (Mark not found, a
	// fresh seq), a new request table, the new column type.
	if _, err := e.g.Mark(ctx, conn, "acct"); !errors.Is(err, fence.ErrNoMark) {
		t.Fatalf("Mark after migrate: got %v, want fence.ErrNoMark", err)
	}
	if ok, err := e.g.Recorded(ctx, conn, "req-1"); err != nil || ok {
		t.Fatalf("Recorded after migrate: %v, %v", ok, err)
	}
	round(60, 1)
	if err := e.g.CheckColumn(ctx, conn, jobs, "fence"); err != nil {
		t.Fatalf("CheckColumn after the type change: %v", err)
	}
}

// TestWithStatementCacheAcrossMigrate: a Guard WithStatementCache caches
// its statements in the connection's default mode; after a migration that
// changes a result type, a call fails at most once, with ErrRetryable, and
// succeeds when retried, and RunTx retries by itself. The Guard it came
// from still runs unprepared statements.
func TestWithStatementCacheAcrossMigrate(t *testing.T) {
	e := newEnv(t, targets()[0])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsnOrSkip(t, envPG))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	g := e.g.WithStatementCache()
	if g == e.g {
		t.Fatal("WithStatementCache changed the Guard it was called on")
	}
	jobs := e.table("jobs", "id TEXT PRIMARY KEY, state TEXT, fence INTEGER NOT NULL DEFAULT 0")
	if _, err := conn.Exec(ctx, "INSERT INTO "+jobs+" (id, state) VALUES ('j1', 'queued')"); err != nil {
		t.Fatal(err)
	}
	update := func(rev int64) error {
		_, err := g.Update(ctx, conn, tok(rev), sqlguard.RowUpdate{Table: jobs, Set: []sqlguard.Assign{{Column: "state", Value: "running"}},
			Where: "id = $1", WhereArgs: []any{"j1"}, Single: true})
		return err
	}
	if err := g.RunTx(ctx, conn, pgx.TxOptions{}, tok(50), []string{"acct"}, nil); err != nil {
		t.Fatalf("RunTx: %v", err)
	}
	if err := update(50); err != nil {
		t.Fatalf("Update: %v", err)
	}
	// The Guard's statements are prepared on conn now.
	var prepared int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements", pgx.QueryExecModeSimpleProtocol).Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared == 0 {
		t.Fatal("no statement prepared on the connection")
	}
	e.migrateUnder(jobs)
	if err := g.RunTx(ctx, conn, pgx.TxOptions{}, tok(60), []string{"acct"}, nil); err != nil {
		t.Fatalf("RunTx after the migration: %v", err)
	}
	err = update(60)
	if err != nil && !errors.Is(err, sqlguard.ErrRetryable) {
		t.Fatalf("Update after the migration: %v, want nil or ErrRetryable", err)
	}
	if err != nil {
		if err := update(60); err != nil {
			t.Fatalf("Update retried after the migration: %v", err)
		}
	}
	m, err := g.Mark(ctx, conn, "acct")
	if err != nil || m.Token != tok(60) {
		t.Fatalf("Mark after the migration: %+v, %v", m, err)
	}
}

package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
)

// BenchmarkUpdateStale is the cost of the refused path: a row-column
// Update whose token is older than the row's fence, through database/sql
// on FENCEKIT_PG_DSN and on SQLite. "single" is RowUpdate.Single (one
// UPDATE, then the read that tells stale from missing); "tx" the
// multi-row form, which runs in a transaction of its own on a *sql.DB.
// Run it with -benchmem: the allocations are the figure to watch.
func BenchmarkUpdateStale(b *testing.B) {
	if dsn := os.Getenv(envPG); dsn != "" {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		benchUpdateStale(b, "postgres", sqlguard.PostgreSQL, db, "$1")
	}
	db, err := sql.Open("sqlite", "file:"+b.TempDir()+"/bench.db?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	benchUpdateStale(b, "sqlite", sqlguard.SQLite, db, "?")
}

func benchUpdateStale(b *testing.B, name string, d sqlguard.Dialect, db *sql.DB, ph string) {
	ctx := context.Background()
	g, err := sqlguard.New(d)
	if err != nil {
		b.Fatal(err)
	}
	table := "sg_bench_" + uniq()
	for _, q := range []string{
		"CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO " + table + " (id, balance, fence) VALUES (1, 0, 100)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	defer func() { _, _ = db.ExecContext(ctx, "DROP TABLE "+table) }()
	stale := fence.Token{Lock: "acct", Revision: 42}
	for _, single := range []bool{true, false} {
		mode := "tx"
		if single {
			mode = "single"
		}
		u := sqlguard.RowUpdate{Table: table, Set: []sqlguard.Assign{{Column: "balance", Value: 7}},
			Where: "id = " + ph, WhereArgs: []any{1}, Single: single}
		b.Run(name+"/"+mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Update(ctx, db, stale, u); !errors.Is(err, fence.ErrStale) {
					b.Fatalf("Update with a stale token: %v, want ErrStale", err)
				}
			}
		})
	}
}

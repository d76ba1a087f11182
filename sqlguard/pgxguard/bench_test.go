package pgxguard_test

import (
	"context"
	"os"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkGuard is the cost of fencing a write through pgx, against the
// same write unfenced on the same pool (pgx's default statement cache):
// the one-statement row-column update (RowUpdate.Single) against a plain
// UPDATE, and a fence-table transaction (RunTx) against a plain UPDATE in
// a transaction. It runs on FENCEKIT_PG_DSN, and also through PgBouncer
// on FENCEKIT_PGBOUNCER_DSN. Run the floor and fencekit lines interleaved
// (-count N) and compare.
func BenchmarkGuard(b *testing.B) {
	for _, tg := range targets() {
		dsn := os.Getenv(tg.env)
		if dsn == "" {
			continue
		}
		benchPgx(b, tg, dsn)
	}
}

func benchPgx(b *testing.B, tg target, dsn string) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	if tg.bouncer {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	prefix := "pgxg_bench_" + uniq() + "_"
	g, err := pgxguard.New(sqlguard.WithTable(prefix+"fence"), sqlguard.WithRequestTable(prefix+"req"))
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	acc := prefix + "accounts"
	for _, q := range []string{
		"CREATE TABLE " + acc + " (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO " + acc + " (id, balance, fence) VALUES (1, 0, 0)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, t := range []string{acc, prefix + "fence", prefix + "req"} {
			_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+t)
		}
	}()
	tok := fence.Token{Lock: "acct", Revision: 42}
	plain := "UPDATE " + acc + " SET balance = $1 WHERE id = $2"
	name := "pgx"
	if tg.bouncer {
		name = "pgx-pgbouncer"
	}
	b.Run("floor/"+name+"-rowcol", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := pool.Exec(ctx, plain, i, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same plain UPDATE in the mode sqlguard's statements use: what a
	// statement costs without the statement cache.
	b.Run("floor/"+name+"-rowcol-exec", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := pool.Exec(ctx, plain, pgx.QueryExecModeExec, i, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fencekit/"+name+"-rowcol", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			u := sqlguard.RowUpdate{Table: acc, Column: "fence", Set: []sqlguard.Assign{{Column: "balance", Value: i}},
				Where: "id = $1", WhereArgs: []any{1}, Single: true}
			if _, err := g.Update(ctx, pool, tok, u); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor/"+name+"-table", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plain, i, 1)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fencekit/"+name+"-table", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			err := g.RunTx(ctx, pool, pgx.TxOptions{}, tok, []string{"bench-acct-1"}, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plain, i, 1)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

//go:build unix

package integration_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"
)

// BenchmarkGuard is the cost of fencing a write, interleaved against the
// unfenced write (floor): guard's HTTP middleware against the bare handler
// (http), and sqlguard's guarded UPDATE against a plain UPDATE, in
// row-column mode (-rowcol: one statement) and in fence-table mode
// (-table: a transaction, against the plain UPDATE in a transaction), on
// SQLite and, when FENCEKIT_PG_DSN is set, PostgreSQL. On PostgreSQL the
// same rows also interleave the pgx-native path: sqlguard/pgxguard on a
// *pgxpool.Pool (fencekit-pgx) against the same plain UPDATE through pgx
// with its default statement cache (floor-pgx), so the four arms of a row
// alternate in one process.
func BenchmarkGuard(b *testing.B) {
	tok := fence.Token{Lock: "acct", Revision: 42}
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	serve := func(h http.Handler) func() error {
		req := httptest.NewRequest(http.MethodPost, "/accounts/1", nil)
		req.Header.Set(guard.Header, tok.String())
		return func() error {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusNoContent {
				return fmt.Errorf("status %d", rec.Code)
			}
			return nil
		}
	}
	b.Run("http", func(b *testing.B) {
		g, err := guard.New(guard.NewMemoryStore())
		if err != nil {
			b.Fatal(err)
		}
		mw := g.Middleware(func(r *http.Request) (guard.Target, bool) {
			return guard.Target{Resource: r.URL.Path, Lock: "acct"}, true
		})
		interleave(b, plan{rounds: 20, ops: 5000, warmup: 5000}, []arm{
			{"fencekit", loop(serve(mw(bare)))},
			{"floor", loop(serve(bare))},
		}, [][2]string{{"fencekit", "floor"}})
	})
	// The verifier's cost when the token equals the mark (a holder's every
	// write after its first): the same guard with a lease.Verifier on a
	// real etcd (fencekit) and without one (floor).
	b.Run("http-verified", func(b *testing.B) {
		_, cli := benchEtcd(b)
		locks := benchLocks(b, cli)
		l, err := locks.Acquire(context.Background(), "acct-verified")
		if err != nil {
			b.Fatal(err)
		}
		guarded := func(opts ...guard.Option) http.Handler {
			g, err := guard.New(guard.NewMemoryStore(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			return g.Middleware(func(r *http.Request) (guard.Target, bool) {
				return guard.Target{Resource: r.URL.Path, Lock: "acct-verified"}, true
			})(bare)
		}
		req := func(h http.Handler) func() error {
			r := httptest.NewRequest(http.MethodPost, "/accounts/1", nil)
			r.Header.Set(guard.Header, l.Fence().String())
			return func() error {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusNoContent {
					return fmt.Errorf("status %d", rec.Code)
				}
				return nil
			}
		}
		interleave(b, plan{rounds: 20, ops: 5000, warmup: 5000}, []arm{
			{"fencekit", loop(req(guarded(guard.WithVerifier(locks.Verifier()))))},
			{"floor", loop(req(guarded()))},
		}, [][2]string{{"fencekit", "floor"}})
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
	i := 0
	p := plan{rounds: 20, ops: 100, warmup: 100}
	rowcol := []arm{
		{"fencekit", loop(func() error {
			i++
			u := sqlguard.RowUpdate{Table: "bench_accounts", Column: "fence",
				Set:   []sqlguard.Assign{{Column: "balance", Value: i}},
				Where: "id = " + ph(1), WhereArgs: []any{1}, Single: true}
			_, err := g.Update(ctx, db, tok, u)
			return err
		})},
		{"floor", loop(func() error {
			i++
			_, err := db.ExecContext(ctx, plain, i, 1)
			return err
		})},
	}
	table := []arm{
		{"fencekit", loop(func() error {
			i++
			return g.RunTx(ctx, db, nil, tok, []string{"bench-acct-1"}, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, plain, i, 1)
				return err
			})
		})},
		{"floor", loop(func() error {
			i++
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, plain, i, 1); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		})},
	}
	pairs := [][2]string{{"fencekit", "floor"}}
	if g.Dialect() == sqlguard.PostgreSQL {
		rc, tb := pgxArms(b, dsn, g, tok, plain)
		rowcol, table = append(rowcol, rc...), append(table, tb...)
		pairs = append(pairs, [2]string{"fencekit-pgx", "floor-pgx"}, [2]string{"fencekit-pgxcache", "floor-pgx"})
	}
	b.Run(name+"-rowcol", func(b *testing.B) { interleave(b, p, rowcol, pairs) })
	b.Run(name+"-table", func(b *testing.B) { interleave(b, p, table, pairs) })
}

// pgxArms returns the pgx-native arms of the PostgreSQL rows: g's tables
// through pgxguard on a *pgxpool.Pool (fencekit-pgx), and the plain UPDATE
// on the same pool (floor-pgx), in pgx's default mode, which caches the
// plain UPDATE as a prepared statement. sqlguard's own statements run
// unprepared (QueryExecModeExec) by default, and cached like the plain
// UPDATE with pgxguard's WithStatementCache (fencekit-pgxcache). The pool
// closes when b ends.
func pgxArms(b *testing.B, dsn string, g *sqlguard.Guard, tok fence.Token, plain string) (rowcol, table []arm) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	pg, err := pgxguard.Wrap(g)
	if err != nil {
		b.Fatal(err)
	}
	cached := pg.WithStatementCache()
	i := 0
	update := func(pg *pgxguard.Guard) func() error {
		return func() error {
			i++
			_, err := pg.Update(ctx, pool, tok, sqlguard.RowUpdate{Table: "bench_accounts", Column: "fence",
				Set:   []sqlguard.Assign{{Column: "balance", Value: i}},
				Where: "id = $1", WhereArgs: []any{1}, Single: true})
			return err
		}
	}
	runTx := func(pg *pgxguard.Guard) func() error {
		return func() error {
			i++
			return pg.RunTx(ctx, pool, pgx.TxOptions{}, tok, []string{"bench-acct-1"}, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plain, i, 1)
				return err
			})
		}
	}
	rowcol = []arm{
		{"fencekit-pgx", loop(update(pg))},
		{"fencekit-pgxcache", loop(update(cached))},
		{"floor-pgx", loop(func() error {
			i++
			_, err := pool.Exec(ctx, plain, i, 1)
			return err
		})},
	}
	table = []arm{
		{"fencekit-pgx", loop(runTx(pg))},
		{"fencekit-pgxcache", loop(runTx(cached))},
		{"floor-pgx", loop(func() error {
			i++
			return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plain, i, 1)
				return err
			})
		})},
	}
	return rowcol, table
}

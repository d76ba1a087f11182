package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvPgBouncerDSN is a DSN of PgBouncer in pool_mode = transaction in
// front of the server of EnvPostgresDSN, for example
// postgres://postgres@127.0.0.1:6432/test?sslmode=disable (.ci/run starts
// one there).
const EnvPgBouncerDSN = "FENCEKIT_PGBOUNCER_DSN"

// PgxPool opens a *pgxpool.Pool on the DSN in the environment variable
// env (see DSN), pings it, and closes it when t ends. It skips t when the
// server is unreachable, or fails t when EnvRequireDB is "1". bouncer
// makes the pool's own statements run with pgx.QueryExecModeExec, as
// behind PgBouncer in transaction mode (which keeps no prepared statements
// across transactions before 1.21); otherwise they use pgx's default, the
// statement cache. maxConns > 0 limits the pool's connections.
func PgxPool(t testing.TB, env string, bouncer bool, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DSN(t, env))
	if err != nil {
		t.Fatalf("parse %s: %v", env, err)
	}
	if bouncer {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		serviceOf(t, env).Unreachable(t, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

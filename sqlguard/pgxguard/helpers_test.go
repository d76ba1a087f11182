package pgxguard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// Environment variables naming the test databases (see testkit's
// services).
const (
	envPG        = testkit.EnvPostgresDSN
	envPgBouncer = testkit.EnvPgBouncerDSN // PgBouncer in pool_mode = transaction in front of the same server
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// target is one way to reach PostgreSQL.
type target struct {
	name string
	env  string
	// bouncer: PgBouncer in transaction mode; the test's own statements
	// must not use named prepared statements there (PgBouncer 1.18).
	bouncer bool
}

func targets() []target {
	return []target{
		{name: "direct", env: envPG},
		{name: "pgbouncer", env: envPgBouncer, bouncer: true},
	}
}

// dsnOrSkip returns the DSN in env, or skips t saying which variable to
// set (fails it with FENCEKIT_REQUIRE_DB=1).
func dsnOrSkip(t *testing.T, env string) string {
	t.Helper()
	return testkit.DSN(t, env)
}

// env is one test's pool and uniquely named tables, dropped on cleanup.
type env struct {
	t      *testing.T
	tg     target
	pool   *pgxpool.Pool
	g      *pgxguard.Guard
	prefix string
	tables []string
}

func uniq() string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// openPool opens a pool on tg (testkit.PgxPool): behind PgBouncer the
// caller's statements run with QueryExecModeExec, as the package doc tells
// users to do; directly they use pgx's default, the statement cache.
func openPool(t *testing.T, tg target) *pgxpool.Pool {
	t.Helper()
	return testkit.PgxPool(t, tg.env, tg.bouncer, 16)
}

// forEach runs f once per target as a subtest, with migrated tables.
func forEach(t *testing.T, f func(t *testing.T, e *env)) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			f(t, newEnv(t, tg))
		})
	}
}

func newEnv(t *testing.T, tg target, opts ...sqlguard.Option) *env {
	t.Helper()
	e := &env{t: t, tg: tg, pool: openPool(t, tg), prefix: "pgxg_" + uniq() + "_"}
	e.tables = append(e.tables, e.prefix+"fence", e.prefix+"req")
	t.Cleanup(e.drop)
	e.g = e.guard(opts...)
	if err := e.g.Migrate(context.Background(), e.pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return e
}

// guard returns a Guard on e's tables with opts.
func (e *env) guard(opts ...sqlguard.Option) *pgxguard.Guard {
	e.t.Helper()
	opts = append([]sqlguard.Option{sqlguard.WithTable(e.prefix + "fence"), sqlguard.WithRequestTable(e.prefix + "req")}, opts...)
	g, err := pgxguard.New(opts...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return g
}

func (e *env) drop() {
	for _, tb := range e.tables {
		if _, err := e.pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb); err != nil {
			e.t.Errorf("drop %s: %v", tb, err)
		}
	}
}

// table creates a table with the given columns and returns its name.
func (e *env) table(suffix, columns string) string {
	e.t.Helper()
	name := e.prefix + suffix
	if _, err := e.pool.Exec(context.Background(), "CREATE TABLE "+name+" ("+columns+")"); err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	e.tables = append(e.tables, name)
	return name
}

// migrateUnder changes the schema under every cached statement, from
// another connection: it drops the Guard's tables, widens the fence
// column of jobs to BIGINT, and runs Migrate again.
func (e *env) migrateUnder(jobs string) {
	e.t.Helper()
	ctx := context.Background()
	for _, s := range []string{
		"DROP TABLE " + e.prefix + "fence", "DROP TABLE " + e.prefix + "req",
		"ALTER TABLE " + jobs + " ALTER COLUMN fence TYPE BIGINT",
	} {
		if _, err := e.pool.Exec(ctx, s); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.g.Migrate(ctx, e.pool); err != nil {
		e.t.Fatalf("Migrate: %v", err)
	}
}

func tok(rev int64) fence.Token { return fence.Token{Lock: "orders", Revision: rev} }

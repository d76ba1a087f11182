package sqlguard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

// Environment variables naming the test databases (see testkit's
// services).
const (
	envPG        = testkit.EnvPostgresDSN
	envMySQL     = testkit.EnvMySQLDSN
	envPgBouncer = testkit.EnvPgBouncerDSN
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.EtcdLeaks...)
}

// backend is one database configuration every test runs against, and the
// path the Guard takes to it (paths_test.go).
type backend struct {
	name string
	// pgx: the Guard under test is a *pgxguard.Guard on a *pgxpool.Pool.
	pgx bool
	// open returns a fresh database, closed on cleanup, or skips/fails;
	// conns > 0 limits its connections (each pool's, on the pgx path).
	open func(t *testing.T, conns int) *testDB
	// deferred opens SQLite without _txlock=immediate (nil elsewhere).
	deferred func(t *testing.T) *sql.DB
}

func backends() []backend {
	viaSQL := func(open func(t *testing.T) *sql.DB) func(*testing.T, int) *testDB {
		return func(t *testing.T, conns int) *testDB {
			db := open(t)
			if conns > 0 {
				db.SetMaxOpenConns(conns)
			}
			return &testDB{DB: db}
		}
	}
	viaPgx := func(env string, bouncer bool, open func(t *testing.T) *sql.DB) func(*testing.T, int) *testDB {
		return func(t *testing.T, conns int) *testDB {
			db := viaSQL(open)(t, conns)
			db.pool = testkit.PgxPool(t, env, bouncer, int32(conns))
			return db
		}
	}
	return []backend{
		{name: "sqlite", open: viaSQL(func(t *testing.T) *sql.DB { return openSQLite(t, true) }),
			deferred: func(t *testing.T) *sql.DB { return openSQLite(t, false) }},
		{name: "postgres", open: viaSQL(openPG)},
		{name: "postgres-pgbouncer", open: viaSQL(openPgBouncer)},
		{name: "pgx", pgx: true, open: viaPgx(envPG, false, openPG)},
		{name: "pgx-pgbouncer", pgx: true, open: viaPgx(envPgBouncer, true, openPgBouncer)},
		{name: "mysql-foundrows=false", open: viaSQL(func(t *testing.T) *sql.DB { return openMySQL(t, false) })},
		{name: "mysql-foundrows=true", open: viaSQL(func(t *testing.T) *sql.DB { return openMySQL(t, true) })},
	}
}

// sqliteDSN names the test's database file; the two opens of one test
// (immediate and deferred) share it. Tests do not run in parallel.
func sqliteDSN(t *testing.T, immediate bool) string {
	path := filepath.Join(sqliteDir(t), "test.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	if immediate {
		dsn += "&_txlock=immediate"
	}
	return dsn
}

var sqliteDirs = map[string]string{}

func sqliteDir(t *testing.T) string {
	if d, ok := sqliteDirs[t.Name()]; ok {
		return d
	}
	d := t.TempDir()
	sqliteDirs[t.Name()] = d
	t.Cleanup(func() { delete(sqliteDirs, t.Name()) })
	return d
}

func openSQLite(t *testing.T, immediate bool) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(t, immediate))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// dsnOrSkip returns the DSN in env, or skips t saying which variable to
// set (fails it with FENCEKIT_REQUIRE_DB=1).
func dsnOrSkip(t *testing.T, env string) string {
	t.Helper()
	return testkit.DSN(t, env)
}

func ping(t *testing.T, db *sql.DB, env string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		for _, s := range []testkit.Service{testkit.PostgreSQL, testkit.MySQL, testkit.PgBouncer} {
			if s.Env == env {
				s.Unreachable(t, err)
			}
		}
		t.Fatalf("%s unreachable: %v", env, err)
	}
	t.Cleanup(func() { db.Close() })
}

func openPG(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsnOrSkip(t, envPG))
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	ping(t, db, envPG)
	return db
}

// openPgBouncer opens PostgreSQL through PgBouncer in transaction mode.
// PgBouncer 1.18 keeps no prepared statements across transactions, so the
// connections use pgx's exec mode, as sqlguard's doc tells users to.
func openPgBouncer(t *testing.T) *sql.DB {
	t.Helper()
	dsn := dsnOrSkip(t, envPgBouncer)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", dsn+sep+"default_query_exec_mode=exec")
	if err != nil {
		t.Fatalf("open pgbouncer: %v", err)
	}
	ping(t, db, envPgBouncer)
	return db
}

func openMySQL(t *testing.T, foundRows bool) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsnOrSkip(t, envMySQL))
	if err != nil {
		t.Fatalf("parse %s: %v", envMySQL, err)
	}
	cfg.ClientFoundRows = foundRows
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open mysql: %v", err)
	}
	ping(t, db, envMySQL)
	return db
}

// env is one test's database, with uniquely named tables dropped on
// cleanup.
type env struct {
	t      *testing.T
	be     backend
	db     *testDB
	g      *testGuard
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

// sqliteInterruptsBusyWait reports whether this build's SQLite driver
// ends a wait for a lock when the waiter's context is cancelled (v1.62.0
// does; v1.50.1 and older, which the library's go.mod floor allows, do
// not). It asks the driver itself: a test binary built in workspace mode
// records no module versions to read. One connection holds the write
// lock; another begins a write with a context cancelled after 50 ms and
// a busy timeout of 10 s: the driver interrupts the wait if that begin
// returns within 5 s.
func sqliteInterruptsBusyWait(t *testing.T) bool {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "probe.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("open sqlite probe: %v", err)
	}
	defer db.Close()
	holder, err := db.Begin()
	if err != nil {
		t.Fatalf("sqlite probe: take the write lock: %v", err)
	}
	defer func() { _ = holder.Rollback() }()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			_ = tx.Rollback()
		}
		done <- err
	}()
	select {
	case <-done:
		return true
	case <-time.After(5 * time.Second):
		_ = holder.Rollback() // lets the waiter through before db.Close
		<-done
		return false
	}
}

// forEach runs f once per backend as a subtest, with migrated fence tables.
func forEach(t *testing.T, f func(t *testing.T, e *env)) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			f(t, newEnv(t, be))
		})
	}
}

func newEnv(t *testing.T, be backend) *env {
	t.Helper()
	return newEnvConns(t, be, 0)
}

// newEnvConns is newEnv on a database limited to conns connections
// (unlimited for 0).
func newEnvConns(t *testing.T, be backend, conns int) *env {
	t.Helper()
	db := be.open(t, conns)
	e := &env{t: t, be: be, db: db, prefix: "sgt_" + uniq() + "_"}
	ctx := context.Background()
	g, err := sqlguard.Open(ctx, db.DB,
		sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithRequestTable(e.prefix+"req"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	e.g = onPath(t, be, g)
	e.tables = append(e.tables, e.prefix+"fence", e.prefix+"req")
	t.Cleanup(e.drop)
	if err := e.g.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return e
}

// newGuard returns a Guard for e's dialect with opts, on e's path.
func (e *env) newGuard(opts ...sqlguard.Option) *testGuard {
	e.t.Helper()
	g, err := sqlguard.New(e.g.Dialect(), opts...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return onPath(e.t, e.be, g)
}

func (e *env) drop() {
	for _, tb := range e.tables {
		if _, err := e.db.Exec("DROP TABLE IF EXISTS " + tb); err != nil {
			e.t.Errorf("drop %s: %v", tb, err)
		}
	}
}

// table creates a table from a dialect-neutral column list and returns its
// name. Types: "KEY" (string primary key), "BIGINT", "TEXT".
func (e *env) table(suffix, columns string) string {
	e.t.Helper()
	name := e.prefix + suffix
	cols := columns
	switch e.g.Dialect() {
	case sqlguard.SQLite:
		cols = strings.NewReplacer("KEY", "TEXT NOT NULL PRIMARY KEY", "BIGINT", "INTEGER").Replace(cols)
	case sqlguard.PostgreSQL:
		cols = strings.NewReplacer("KEY", "TEXT PRIMARY KEY").Replace(cols)
	default:
		cols = strings.NewReplacer("KEY", "VARCHAR(64) NOT NULL PRIMARY KEY", "TEXT", "VARCHAR(255)").Replace(cols)
	}
	if _, err := e.db.Exec("CREATE TABLE " + name + " (" + cols + ")"); err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	e.tables = append(e.tables, name)
	return name
}

// ph returns the dialect's i'th placeholder.
func (e *env) ph(i int) string {
	if e.g.Dialect() == sqlguard.PostgreSQL {
		return "$" + string(rune('0'+i))
	}
	return "?"
}

// begin starts a transaction or fails the test.
func (e *env) begin(ctx context.Context) *testTx {
	e.t.Helper()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		e.t.Fatalf("begin: %v", err)
	}
	return tx
}

// mark reads a resource's mark or fails the test.
func (e *env) mark(resource string) sqlguard.Mark {
	e.t.Helper()
	m, err := e.g.Mark(context.Background(), e.db, resource)
	if err != nil {
		e.t.Fatalf("Mark(%q): %v", resource, err)
	}
	return m
}

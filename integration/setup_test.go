//go:build unix

package integration

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"

	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
)

// registerWorkload serves two registers from one httptest.Server: one
// behind guard's middleware (every method fenced, marks in a
// guard.MemoryStore, new tokens verified against etcd), one without.
func registerWorkload() workload {
	return workload{setup: func(_ context.Context, env *phaseEnv) ([]line, func()) {
		t := env.t
		// The guarded register verifies new tokens against the phase's
		// lock records, as a server receiving tokens from outside should.
		v, err := lease.NewVerifier(env.etcd, lease.DefaultPrefix)
		if err != nil {
			t.Fatal(err)
		}
		g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(v))
		if err != nil {
			t.Fatal(err)
		}
		guardedLock, unguardedLock := "register-guarded", "register-unguarded"
		mw := g.Middleware(func(*http.Request) (guard.Target, bool) {
			return guard.Target{Resource: "register", Lock: guardedLock}, true
		}, guard.WithUnfencedMethods())
		guarded, unguarded := &register{}, &register{}
		mux := http.NewServeMux()
		mux.Handle("/guarded/register", mw(guarded))
		mux.Handle("/unguarded/register", unguarded)
		srv := httptest.NewServer(mux)
		inspect := func(r *register) func(context.Context) ([]check.Write, []int64, error) {
			return func(context.Context) ([]check.Write, []int64, error) {
				h, f := r.snapshot()
				return h, f, nil
			}
		}
		return []line{
			{spec: lineSpec{Workload: "register", Guarded: true, Lock: guardedLock, URL: srv.URL + "/guarded/register"}, inspect: inspect(guarded)},
			{spec: lineSpec{Workload: "register", Guarded: false, Lock: unguardedLock, URL: srv.URL + "/unguarded/register"}, inspect: inspect(unguarded)},
		}, srv.Close
	}}
}

// sqlWorkload keeps two sets, one row each, in a table of the database at
// dsn (a SQLite file of the phase when name is "sqlite"); the guarded row is
// written through sqlguard. Tables are named uniquely per phase and dropped
// afterwards.
func sqlWorkload(name, driver, dsn string) workload {
	return workload{setup: func(ctx context.Context, env *phaseEnv) ([]line, func()) {
		t := env.t
		if name == "sqlite" {
			dsn = "file:" + filepath.Join(env.dir, "safety.db") +
				"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			t.Fatalf("%s unreachable: %v", name, err)
		}
		tables := sqlTables{
			Set: env.run + "_set", Log: env.run + "_log",
			Fence: env.run + "_fence", Requests: env.run + "_req",
		}
		g, err := sqlguard.Open(ctx, db, sqlguard.WithTable(tables.Fence), sqlguard.WithRequestTable(tables.Requests))
		if err != nil {
			db.Close()
			t.Fatalf("sqlguard on %s: %v", name, err)
		}
		d := g.Dialect()
		cleanup := func() {
			if name != "sqlite" {
				for _, tb := range []string{tables.Set, tables.Log, tables.Fence, tables.Requests} {
					if _, err := db.Exec("DROP TABLE IF EXISTS " + tb); err != nil {
						t.Errorf("drop %s: %v", tb, err)
					}
				}
			}
			db.Close()
		}
		text, bigint := "TEXT", "BIGINT"
		switch d {
		case sqlguard.MySQL, sqlguard.MariaDB:
			text = "MEDIUMTEXT"
		case sqlguard.SQLite:
			bigint = "INTEGER"
		}
		ddl := []string{
			fmt.Sprintf("CREATE TABLE %s (resource VARCHAR(191) NOT NULL PRIMARY KEY, elems %s NOT NULL, ver %s NOT NULL)", tables.Set, text, bigint),
			fmt.Sprintf("CREATE TABLE %s (resource VARCHAR(191) NOT NULL, ver %s NOT NULL, token %s NOT NULL, elem %s NOT NULL, PRIMARY KEY (resource, ver))", tables.Log, bigint, bigint, bigint),
		}
		for _, s := range ddl {
			if _, err := db.ExecContext(ctx, s); err != nil {
				cleanup()
				t.Fatalf("%s: %v", s, err)
			}
		}
		if err := g.Migrate(ctx, db); err != nil {
			cleanup()
			t.Fatalf("migrate %s: %v", name, err)
		}
		// Name the workload after the server that answered (MariaDB
		// behind a MySQL DSN says so).
		wname := "sql-" + d.String()
		var lines []line
		for _, guarded := range []bool{true, false} {
			spec := lineSpec{Workload: wname, Guarded: guarded, Driver: driver, DSN: dsn, Dialect: d, Tables: tables}
			spec.Lock = spec.Workload + "-" + spec.mode()
			spec.Resource = env.run + "-" + spec.mode()
			if _, err := db.ExecContext(ctx, q(d, "INSERT INTO "+tables.Set+" (resource, elems, ver) VALUES (?, '', 0)"), spec.Resource); err != nil {
				cleanup()
				t.Fatalf("insert row: %v", err)
			}
			lines = append(lines, line{spec: spec, inspect: func(ctx context.Context) ([]check.Write, []int64, error) {
				return inspectSQL(ctx, db, spec)
			}})
		}
		return lines, cleanup
	}}
}

// inspectSQL reads a resource's history, in commit order, and its set.
func inspectSQL(ctx context.Context, db *sql.DB, spec lineSpec) ([]check.Write, []int64, error) {
	d := spec.Dialect
	rows, err := db.QueryContext(ctx, q(d, "SELECT token, elem FROM "+spec.Tables.Log+" WHERE resource = ? ORDER BY ver"), spec.Resource)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var history []check.Write
	for rows.Next() {
		var a check.Write
		if err := rows.Scan(&a.Token, &a.Elem); err != nil {
			return nil, nil, err
		}
		history = append(history, a)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	var s string
	if err := db.QueryRowContext(ctx, q(d, "SELECT elems FROM "+spec.Tables.Set+" WHERE resource = ?"), spec.Resource).Scan(&s); err != nil {
		return nil, nil, err
	}
	final, err := parseElems(s)
	return history, final, err
}

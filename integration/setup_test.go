//go:build unix

package integration

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"

	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
)

// registerWorkload serves the registers of two lines from one
// httptest.Server, one per shard: those of the guarded line behind
// guard's middleware (every method fenced, marks in a guard.MemoryStore,
// new tokens verified against etcd), those of the control without.
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
		guarded := lineSpec{Workload: "register", Guarded: true, Lock: "register-guarded", Shards: env.shards(true)}
		unguarded := lineSpec{Workload: "register", Guarded: false, Lock: "register-unguarded", Shards: env.shards(false)}
		// Shard n of the guarded line is the resource "register-n",
		// fenced by the tokens of its own lock.
		mw := g.Middleware(func(r *http.Request) (guard.Target, bool) {
			n, err := strconv.Atoi(r.PathValue("n"))
			if err != nil {
				return guard.Target{}, false
			}
			return guard.Target{Resource: "register-" + strconv.Itoa(n), Lock: guarded.lockName(n)}, true
		}, guard.WithUnfencedMethods())
		mux := http.NewServeMux()
		registers := func(spec lineSpec, mw func(http.Handler) http.Handler) []*register {
			rs := make([]*register, spec.Shards)
			for i := range rs {
				rs[i] = &register{}
			}
			path := "/" + spec.mode() + "/register"
			mux.Handle(path+"/{n}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, err := strconv.Atoi(r.PathValue("n"))
				if err != nil || n < 0 || n >= len(rs) {
					http.NotFound(w, r)
					return
				}
				rs[n].ServeHTTP(w, r)
			})))
			return rs
		}
		gr := registers(guarded, mw)
		ur := registers(unguarded, func(h http.Handler) http.Handler { return h })
		srv := httptest.NewServer(mux)
		guarded.URL = srv.URL + "/guarded/register"
		unguarded.URL = srv.URL + "/unguarded/register"
		inspect := func(rs []*register) func(context.Context, int) ([]check.Write, []int64, error) {
			return func(_ context.Context, shard int) ([]check.Write, []int64, error) {
				h, f := rs[shard].snapshot()
				return h, f, nil
			}
		}
		return []line{{spec: guarded, inspect: inspect(gr)}, {spec: unguarded, inspect: inspect(ur)}}, srv.Close
	}}
}

// sqlWorkload keeps the sets of two lines, one row per shard, in a table
// of the database at dsn (a SQLite file of the phase when name is "sqlite"); the guarded row is
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
			spec := lineSpec{Workload: wname, Guarded: guarded, Driver: driver, DSN: dsn, Dialect: d, Tables: tables, Shards: env.shards(guarded)}
			spec.Lock = spec.Workload + "-" + spec.mode()
			spec.Resource = env.run + "-" + spec.mode()
			for shard := range spec.Shards {
				if _, err := db.ExecContext(ctx, q(d, "INSERT INTO "+tables.Set+" (resource, elems, ver) VALUES (?, '', 0)"), spec.resource(shard)); err != nil {
					cleanup()
					t.Fatalf("insert row: %v", err)
				}
			}
			lines = append(lines, line{spec: spec, inspect: func(ctx context.Context, shard int) ([]check.Write, []int64, error) {
				return inspectSQL(ctx, db, spec, shard)
			}})
		}
		return lines, cleanup
	}}
}

// inspectSQL reads a shard's history, in commit order, and its set.
func inspectSQL(ctx context.Context, db *sql.DB, spec lineSpec, shard int) ([]check.Write, []int64, error) {
	d, res := spec.Dialect, spec.resource(shard)
	rows, err := db.QueryContext(ctx, q(d, "SELECT token, elem FROM "+spec.Tables.Log+" WHERE resource = ? ORDER BY ver"), res)
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
	if err := db.QueryRowContext(ctx, q(d, "SELECT elems FROM "+spec.Tables.Set+" WHERE resource = ?"), res).Scan(&s); err != nil {
		return nil, nil, err
	}
	final, err := parseElems(s)
	return history, final, err
}

package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
)

func tok(rev int64) fence.Token { return fence.Token{Lock: "orders", Revision: rev} }

// fenceTx runs Fence in its own transaction and commits when it passes.
func (e *env) fenceTx(tk fence.Token, resources ...string) error {
	e.t.Helper()
	ctx := context.Background()
	tx := e.begin(ctx)
	if err := e.g.Fence(ctx, tx, tk, resources...); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			e.t.Fatalf("rollback: %v", rerr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatalf("commit: %v", err)
	}
	return nil
}

// T1-T5, T11: absent, newer, equal, older, and the exact int64 range.
func TestFenceSemantics(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if _, err := e.g.Mark(context.Background(), e.db, "acct"); !errors.Is(err, fence.ErrNoMark) {
			t.Fatalf("Mark before any fence: got %v, want fence.ErrNoMark", err)
		}
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatalf("first fence (T1): %v", err)
		}
		if m := e.mark("acct"); m.Token != tok(5) || m.Seq != 1 {
			t.Fatalf("mark after first fence: got %+v, want token 5 seq 1", m)
		}
		if err := e.fenceTx(tok(7), "acct"); err != nil {
			t.Fatalf("newer (T2): %v", err)
		}
		// T3: the same holder again, twice: the MySQL "0 rows changed" trap.
		for range 2 {
			if err := e.fenceTx(tok(7), "acct"); err != nil {
				t.Fatalf("equal (T3): %v", err)
			}
		}
		if m := e.mark("acct"); m.Token != tok(7) || m.Seq != 4 {
			t.Fatalf("mark: got %+v, want token 7 seq 4", m)
		}
		// T4/T5: older, after the newer one committed.
		err := e.fenceTx(tok(6), "acct")
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("older (T4): got %v, want ErrStale", err)
		}
		var se *fence.RefusedError
		if !errors.As(err, &se) || se.Resource != "acct" || se.Token != tok(6) || se.Mark != tok(7) || se.Row != "" {
			t.Fatalf("StaleError: got %+v", se)
		}
		if msg := err.Error(); !strings.Contains(msg, "restarted its revisions") || !strings.Contains(msg, "ResetMark") {
			t.Fatalf("stale error does not name the new-cluster case and its recovery: %s", msg)
		}
		if se.Outcome != fence.Stale || se.Lock != "orders" {
			t.Fatalf("stale refusal outcome %s lock %q, want stale, orders", se.Outcome, se.Lock)
		}
		if m := e.mark("acct"); m.Token != tok(7) || m.Seq != 4 {
			t.Fatalf("mark after stale: got %+v, want unchanged 7/4", m)
		}
		// T11: the largest token is stored exactly, and then everything
		// else is stale.
		if err := e.fenceTx(tok(math.MaxInt64), "acct"); err != nil {
			t.Fatalf("MaxInt64 (T11): %v", err)
		}
		if m := e.mark("acct"); m.Token.Revision != math.MaxInt64 {
			t.Fatalf("MaxInt64 stored as %d", m.Token.Revision)
		}
		if err := e.fenceTx(tok(math.MaxInt64-1), "acct"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("MaxInt64-1 after MaxInt64: got %v, want ErrStale", err)
		}
	})
}

// T14, T7: a token of another lock, numerically larger, is refused with
// its own error; resource names and lock names compare exactly.
func TestFenceWrongLock(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatal(err)
		}
		for _, other := range []string{"billing", "Orders", "orders ", "ORDERS"} {
			err := e.fenceTx(fence.Token{Lock: other, Revision: 1000}, "acct")
			var we *fence.RefusedError
			if !errors.As(err, &we) || we.Lock != "orders" || we.Resource != "acct" {
				t.Fatalf("lock %q: got %v, want *WrongLockError", other, err)
			}
			if !errors.Is(err, fence.ErrWrongLock) || errors.Is(err, fence.ErrStale) {
				t.Fatalf("lock %q: %v matches the wrong sentinels", other, err)
			}
		}
		// "ACCT" is another resource, not the same one in another case.
		if err := e.fenceTx(fence.Token{Lock: "billing", Revision: 3}, "ACCT", "acct "); err != nil {
			t.Fatalf("distinct resource names: %v", err)
		}
		if m := e.mark("acct"); m.Token != tok(5) || m.Seq != 1 {
			t.Fatalf("mark: got %+v", m)
		}
	})
}

// T8/T22: several resources are fenced all or nothing.
func TestFenceMultiResource(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		if err := e.fenceTx(tok(5), "c", "a", "b", "a"); err != nil {
			t.Fatal(err)
		}
		if err := e.fenceTx(tok(9), "b"); err != nil {
			t.Fatal(err)
		}
		err := e.fenceTx(tok(7), "a", "b", "c")
		var se *fence.RefusedError
		if !errors.As(err, &se) || se.Resource != "b" || se.Mark.Revision != 9 {
			t.Fatalf("got %v, want stale on b", err)
		}
		// a was advanced by the refused transaction, then rolled back.
		if m := e.mark("a"); m.Token.Revision != 5 || m.Seq != 1 {
			t.Fatalf("mark a: got %+v, want 5/1", m)
		}
	})
}

// T24: a rollback after an accepted fence leaves the mark unchanged, and
// an older token still passes afterwards.
func TestFenceRollbackLeavesMark(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatal(err)
		}
		tx := e.begin(ctx)
		if err := e.g.Fence(ctx, tx, tok(9), "acct"); err != nil {
			t.Fatal(err)
		}
		if m, err := e.g.Mark(ctx, tx, "acct"); err != nil || m.Token.Revision != 9 {
			t.Fatalf("mark inside tx: got %+v, %v; want 9", m, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if m := e.mark("acct"); m.Token.Revision != 5 || m.Seq != 1 {
			t.Fatalf("mark after rollback: got %+v, want 5/1", m)
		}
		if err := e.fenceTx(tok(6), "acct"); err != nil {
			t.Fatalf("older than the rolled-back token: %v", err)
		}
	})
}

// T10, T12: invalid tokens and names are refused before any SQL.
func TestValidationBeforeSQL(t *testing.T) {
	g, err := sqlguard.New(sqlguard.PostgreSQL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := noSQL{t}
	bad := []struct {
		name string
		tk   fence.Token
		res  []string
	}{
		{"zero revision", tok(0), []string{"a"}},
		{"negative revision", tok(-1), []string{"a"}},
		{"min int64", tok(math.MinInt64), []string{"a"}},
		{"empty lock", fence.Token{Revision: 1}, []string{"a"}},
		{"lock not utf-8", fence.Token{Lock: "\xff", Revision: 1}, []string{"a"}},
		{"lock with NUL", fence.Token{Lock: "a\x00b", Revision: 1}, []string{"a"}},
		{"no resources", tok(1), nil},
		{"empty resource", tok(1), []string{"a", ""}},
		{"long resource", tok(1), []string{string(make([]byte, 256))}},
		{"resource with NUL", tok(1), []string{"a\x00"}},
	}
	for _, c := range bad {
		err := g.Fence(ctx, q, c.tk, c.res...)
		if !errors.Is(err, sqlguard.ErrInvalid) {
			t.Errorf("Fence %s: got %v, want ErrInvalid", c.name, err)
		}
		if c.tk.Revision <= 0 && !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Fence %s: %v does not match fence.ErrInvalid", c.name, err)
		}
		if len(c.res) > 0 {
			if err := g.Claim(ctx, nil, c.tk, c.res...); !errors.Is(err, sqlguard.ErrInvalid) {
				t.Errorf("Claim %s: got %v, want ErrInvalid", c.name, err)
			}
		}
	}
	for _, rev := range []int64{0, -1} {
		if _, err := g.Update(ctx, q, tok(rev), sqlguard.RowUpdate{Table: "t", Set: []sqlguard.Assign{{Column: "v", Value: 1}}, Where: "id = $1"}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Update rev %d: got %v", rev, err)
		}
		if err := g.Upsert(ctx, q, tok(rev), sqlguard.RowUpsert{Table: "t", Key: []sqlguard.Assign{{Column: "id", Value: 1}}}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Upsert rev %d: got %v", rev, err)
		}
		if err := g.RunTx(ctx, nil, nil, tok(rev), nil, nil); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("RunTx rev %d: got %v", rev, err)
		}
	}
	for _, id := range []string{"", "\xfe", string(make([]byte, 256))} {
		if err := g.Record(ctx, q, id); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Errorf("Record(%q): got %v, want ErrInvalid", id, err)
		}
	}
}

// T26: the fence must share the caller's transaction.
func TestFenceRefusesDB(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.g.Fence(ctx, e.db, tok(1), "a"); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Fatalf("Fence(*sql.DB): got %v, want ErrNeedTx", err)
		}
		if err := e.g.Record(ctx, e.db, "req"); !errors.Is(err, sqlguard.ErrNeedTx) {
			t.Fatalf("Record(*sql.DB): got %v, want ErrNeedTx", err)
		}
		// A *sql.Conn in a transaction is fine.
		conn, err := e.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.g.Fence(ctx, tx, tok(1), "a"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

// Claim advances the mark in its own committed transaction.
func TestClaim(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.g.Claim(ctx, e.db, tok(7), "a", "b"); err != nil {
			t.Fatal(err)
		}
		if m := e.mark("b"); m.Token.Revision != 7 {
			t.Fatalf("mark b: %+v", m)
		}
		if err := e.g.Claim(ctx, e.db, tok(6), "a"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("older claim: got %v, want ErrStale", err)
		}
	})
}

// Detect tells the dialects apart (T34).
func TestDetect(t *testing.T) {
	want := map[string][]sqlguard.Dialect{
		"sqlite":                {sqlguard.SQLite},
		"postgres":              {sqlguard.PostgreSQL},
		"postgres-pgbouncer":    {sqlguard.PostgreSQL},
		"pgx":                   {sqlguard.PostgreSQL},
		"pgx-pgbouncer":         {sqlguard.PostgreSQL},
		"mysql-foundrows=false": {sqlguard.MariaDB, sqlguard.MySQL},
		"mysql-foundrows=true":  {sqlguard.MariaDB, sqlguard.MySQL},
	}
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			db := be.open(t, 0)
			d, err := sqlguard.Detect(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			ok := false
			for _, w := range want[be.name] {
				ok = ok || d == w
			}
			if !ok {
				t.Fatalf("Detect: got %v, want one of %v", d, want[be.name])
			}
			var v string
			if d == sqlguard.MariaDB || d == sqlguard.MySQL {
				if err := db.QueryRow("SELECT version()").Scan(&v); err != nil {
					t.Fatal(err)
				}
				t.Logf("version %s detected as %v", v, d)
			}
		})
	}
	if _, err := sqlguard.New(0); !errors.Is(err, sqlguard.ErrInvalid) {
		t.Fatalf("New(0): got %v", err)
	}
}

// noSQL is a DBTX that fails the test when any statement reaches it.
type noSQL struct{ t *testing.T }

func (n noSQL) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	n.t.Error("statement ran before validation")
	return nil, errors.New("no SQL expected")
}

func (n noSQL) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	n.t.Error("query ran before validation")
	return nil, errors.New("no SQL expected")
}

func (n noSQL) QueryRowContext(context.Context, string, ...any) *sql.Row {
	n.t.Error("query ran before validation")
	return nil
}

// TestBind: a declared resource refuses a first token of another lock,
// binding is idempotent and never changes, and bad input changes nothing.
func TestBind(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.g.Bind(ctx, e.db, "acct", "orders"); err != nil {
			t.Fatalf("Bind: %v", err)
		}
		if m := e.mark("acct"); m.Token != (fence.Token{Lock: "orders"}) || m.Seq != 0 {
			t.Fatalf("mark after Bind: %+v, want orders/0 seq 0", m)
		}
		// The first token, of another lock, is refused: without Bind it
		// would have bound the resource to its lock.
		err := e.fenceTx(fence.Token{Lock: "payments", Revision: 5}, "acct")
		var we *fence.RefusedError
		if !errors.As(err, &we) || we.Lock != "orders" || !errors.Is(err, fence.ErrWrongLock) {
			t.Fatalf("first token of another lock: got %v, want *WrongLockError for orders", err)
		}
		if err := e.g.Claim(ctx, e.db, fence.Token{Lock: "payments", Revision: 6}, "acct"); !errors.Is(err, fence.ErrWrongLock) {
			t.Fatalf("Claim with another lock: got %v, want ErrWrongLock", err)
		}
		if err := e.fenceTx(tok(5), "acct"); err != nil {
			t.Fatalf("first token of the bound lock: %v", err)
		}
		if m := e.mark("acct"); m.Token != tok(5) || m.Seq != 1 {
			t.Fatalf("mark: %+v, want orders/5 seq 1", m)
		}
		// Idempotent, in a transaction too, and it never moves a mark.
		if err := e.g.Bind(ctx, e.db, "acct", "orders"); err != nil {
			t.Fatalf("Bind again: %v", err)
		}
		tx := e.begin(ctx)
		if err := e.g.Bind(ctx, tx, "acct", "orders"); err != nil {
			t.Fatalf("Bind in a transaction: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		err = e.g.Bind(ctx, e.db, "acct", "payments")
		if !errors.As(err, &we) || we.Lock != "orders" || we.Token.Lock != "payments" {
			t.Fatalf("Bind to another lock: got %v, want *WrongLockError", err)
		}
		// A resource fenced without Bind is bound by its first token.
		if err := e.fenceTx(fence.Token{Lock: "payments", Revision: 3}, "undeclared"); err != nil {
			t.Fatal(err)
		}
		if err := e.g.Bind(ctx, e.db, "undeclared", "orders"); !errors.Is(err, fence.ErrWrongLock) {
			t.Fatalf("Bind after a first token: got %v, want ErrWrongLock", err)
		}
		for name, err := range map[string]error{
			"empty resource": e.g.Bind(ctx, e.db, "", "orders"),
			"empty lock":     e.g.Bind(ctx, e.db, "x", ""),
			"NUL lock":       e.g.Bind(ctx, e.db, "x", "a\x00"),
			"long lock":      e.g.Bind(ctx, e.db, "x", strings.Repeat("l", fence.MaxNameLen+1)),
			"nil DBTX":       e.g.Bind(ctx, nil, "x", "orders"),
		} {
			if !errors.Is(err, sqlguard.ErrInvalid) {
				t.Errorf("%s: got %v, want ErrInvalid", name, err)
			}
		}
		if _, err := e.g.Mark(ctx, e.db, "x"); !errors.Is(err, fence.ErrNoMark) {
			t.Fatalf("refused Binds created a row: %v", err)
		}
		if m := e.mark("acct"); m.Token != tok(5) || m.Seq != 1 {
			t.Fatalf("mark at the end: %+v, want orders/5 seq 1", m)
		}
	})
}

// TestMigrateTableOnly: with WithTable alone, Migrate creates only the
// fence table; WithRequestTable, or no table option, adds the request
// table.
func TestMigrateTableOnly(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		fences, reqs := e.prefix+"only", e.prefix+"only_req"
		e.tables = append(e.tables, fences, reqs)
		g := e.newGuard(sqlguard.WithTable(fences))
		if n := len(g.Schema()); n != 1 {
			t.Fatalf("Schema with WithTable only: %d statements, want 1", n)
		}
		if err := g.Migrate(ctx, e.db); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		if err := g.CheckSchema(ctx, e.db); err != nil {
			t.Fatalf("CheckSchema: %v", err)
		}
		both := e.newGuard(sqlguard.WithTable(fences), sqlguard.WithRequestTable(reqs))
		if err := both.CheckSchema(ctx, e.db); !errors.Is(err, sqlguard.ErrUnsafeSchema) {
			t.Fatalf("request table exists after a fence-table-only Migrate: CheckSchema = %v", err)
		}
		if err := both.Migrate(ctx, e.db); err != nil {
			t.Fatalf("Migrate with WithRequestTable: %v", err)
		}
		if err := both.CheckSchema(ctx, e.db); err != nil {
			t.Fatalf("CheckSchema with both: %v", err)
		}
		def := e.newGuard()
		if n := len(def.Schema()); n != 2 {
			t.Fatalf("default Schema: %d statements, want 2", n)
		}
	})
}

// TestCluster: a mark written under one etcd cluster refuses the restarted
// revisions of a new cluster with a *ClusterError that names the recovery;
// ResetMark moves the mark to the new cluster. Migrate adds the column to
// a fence table made without WithCluster, and Guards without WithCluster
// keep working on it.
func TestCluster(t *testing.T) {
	forEach(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if err := e.fenceTx(tok(40), "acct"); err != nil { // before any cluster
			t.Fatal(err)
		}
		withCluster := func(id uint64) *testGuard {
			return e.newGuard(sqlguard.WithTable(e.prefix+"fence"), sqlguard.WithRequestTable(e.prefix+"req"),
				sqlguard.WithCluster(id))
		}
		oldC, newC := withCluster(0xcdf818194e3a8c32), withCluster(0x1234)
		if err := oldC.CheckSchema(ctx, e.db); !errors.Is(err, sqlguard.ErrUnsafeSchema) {
			t.Fatalf("CheckSchema before Migrate adds cluster_id: %v", err)
		}
		for range 2 { // idempotent
			if err := oldC.Migrate(ctx, e.db); err != nil {
				t.Fatalf("Migrate adding cluster_id: %v", err)
			}
		}
		fenceWith := func(g *testGuard, tk int64) error {
			tx := e.begin(ctx)
			defer tx.Rollback()
			if err := g.Fence(ctx, tx, tok(tk), "acct"); err != nil {
				return err
			}
			return tx.Commit()
		}
		if err := fenceWith(oldC, 50); err != nil {
			t.Fatal(err)
		}
		if m, err := oldC.Mark(ctx, e.db, "acct"); err != nil || m.Cluster != "cdf818194e3a8c32" || m.Token != tok(50) {
			t.Fatalf("Mark: %+v, %v", m, err)
		}
		// Same cluster, old token: plain stale.
		var se *fence.RefusedError
		if err := fenceWith(oldC, 45); !errors.As(err, &se) || errors.Is(err, sqlguard.ErrOtherCluster) {
			t.Fatalf("old token of the same cluster: got %v, want a plain stale refusal", err)
		}
		// The new cluster's first holders get revision 2 again.
		err := fenceWith(newC, 2)
		var ce *fence.RefusedError
		if !errors.As(err, &ce) || !errors.Is(err, fence.ErrStale) || !errors.Is(err, sqlguard.ErrOtherCluster) ||
			ce.Outcome != fence.MarkAhead || !errors.Is(err, fence.ErrMarkAhead) ||
			!strings.Contains(err.Error(), "cdf818194e3a8c32") || !strings.Contains(err.Error(), "1234") || ce.Mark != tok(50) {
			t.Fatalf("new cluster's token: got %v, want a mark_ahead refusal naming both clusters", err)
		}
		if !strings.Contains(err.Error(), "ResetMark") || !strings.Contains(err.Error(), "restarts revisions") {
			t.Fatalf("ClusterError text: %v", err)
		}
		// A Guard without WithCluster reads the same table and refuses
		// with a plain *StaleError.
		if err := e.fenceTx(tok(3), "acct"); !errors.As(err, &se) {
			t.Fatalf("Guard without cluster: got %v, want *StaleError", err)
		}
		// Recovery: reset to the new cluster's holder's token.
		if err := newC.ResetMark(ctx, e.db, "acct", tok(50), tok(2)); err != nil {
			t.Fatalf("ResetMark: %v", err)
		}
		if m, err := newC.Mark(ctx, e.db, "acct"); err != nil || m.Cluster != "1234" || m.Token != tok(2) {
			t.Fatalf("Mark after reset: %+v, %v", m, err)
		}
		if err := fenceWith(newC, 3); err != nil {
			t.Fatalf("new cluster after reset: %v", err)
		}
		if _, err := sqlguard.New(e.g.Dialect(), sqlguard.WithCluster(0)); !errors.Is(err, sqlguard.ErrInvalid) {
			t.Fatalf("WithCluster(0): %v", err)
		}
		if ddl := withCluster(1).Schema()[0]; !strings.Contains(ddl, "cluster_id") {
			t.Fatalf("Schema with WithCluster: %s", ddl)
		}
	})
}

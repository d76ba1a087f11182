package sqlguard_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/pgxguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The tests of this package run every case on each backend through one of
// two paths: database/sql (*sqlguard.Guard on *sql.DB and *sql.Tx) or pgx
// (*pgxguard.Guard on *pgxpool.Pool and pgx.Tx, backends "pgx" and
// "pgx-pgbouncer"). A case is written once against testDB, testTx and
// testGuard, which hand the guard the handles of the backend's path; the
// test's own setup and read-back SQL may go through database/sql on every
// path (through pgx/v5/stdlib on the pgx backends).

// testDB is a test's database: sql for the test's own statements and for
// the database/sql path, pool for the pgx path (nil on database/sql).
type testDB struct {
	*sql.DB
	pool *pgxpool.Pool
}

// BeginTx begins a transaction on the backend's path.
func (d *testDB) BeginTx(ctx context.Context, opts *sql.TxOptions) (*testTx, error) {
	if d.pool != nil {
		return beginTx(ctx, opts, nil, d.pool)
	}
	return beginTx(ctx, opts, d.DB, nil)
}

// beginTx begins a transaction on p, or on s when p is nil.
func beginTx(ctx context.Context, opts *sql.TxOptions, s sqlguard.Beginner, p pgxguard.Beginner) (*testTx, error) {
	if p != nil {
		tx, err := p.BeginTx(ctx, pgxTxOptions(opts))
		if err != nil {
			return nil, err
		}
		return &testTx{pgx: tx}, nil
	}
	tx, err := s.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &testTx{sql: tx}, nil
}

// Conn reserves one connection on the backend's path.
func (d *testDB) Conn(ctx context.Context) (*testConn, error) {
	if d.pool != nil {
		c, err := d.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return &testConn{pgx: c}, nil
	}
	c, err := d.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &testConn{sql: c}, nil
}

// testConn is a *sql.Conn or a *pgxpool.Conn.
type testConn struct {
	sql *sql.Conn
	pgx *pgxpool.Conn
}

func (c *testConn) BeginTx(ctx context.Context, opts *sql.TxOptions) (*testTx, error) {
	if c.pgx != nil {
		return beginTx(ctx, opts, nil, c.pgx)
	}
	return beginTx(ctx, opts, c.sql, nil)
}

func (c *testConn) Close() error {
	if c.pgx != nil {
		c.pgx.Release()
		return nil
	}
	return c.sql.Close()
}

// testTx is a *sql.Tx or a pgx.Tx, with *sql.Tx's method names.
type testTx struct {
	sql *sql.Tx
	pgx pgx.Tx
}

func (t *testTx) Commit() error {
	if t.pgx != nil {
		return t.pgx.Commit(context.Background())
	}
	return t.sql.Commit()
}

func (t *testTx) Rollback() error {
	if t.pgx != nil {
		return t.pgx.Rollback(context.Background())
	}
	return t.sql.Rollback()
}

// ExecContext runs a statement and returns the rows it affected.
func (t *testTx) ExecContext(ctx context.Context, query string, args ...any) (int64, error) {
	if t.pgx != nil {
		tag, err := t.pgx.Exec(ctx, query, args...)
		return tag.RowsAffected(), err
	}
	res, err := t.sql.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// scanner is a *sql.Row or a pgx.Row.
type scanner interface{ Scan(dest ...any) error }

func (t *testTx) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	if t.pgx != nil {
		return t.pgx.QueryRow(ctx, query, args...)
	}
	return t.sql.QueryRowContext(ctx, query, args...)
}

func pgxTxOptions(opts *sql.TxOptions) pgx.TxOptions {
	var o pgx.TxOptions
	if opts == nil {
		return o
	}
	switch opts.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadCommitted:
		o.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		o.IsoLevel = pgx.Serializable
	default:
		panic(fmt.Sprintf("no pgx isolation level for %v", opts.Isolation))
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return o
}

// testGuard is the Guard under test on a backend's path: it has
// *sqlguard.Guard's methods, takes *testDB, *testTx, *testConn or nil
// where the Guard takes a DBTX or Beginner, and hands each method the
// handle of its path. On the pgx path every call goes through
// *pgxguard.Guard.
type testGuard struct {
	sg *sqlguard.Guard
	pg *pgxguard.Guard // nil on the database/sql path
}

// onPath returns g on the path of be.
func onPath(t *testing.T, be backend, g *sqlguard.Guard) *testGuard {
	t.Helper()
	if !be.pgx {
		return &testGuard{sg: g}
	}
	pg, err := pgxguard.Wrap(g)
	if err != nil {
		t.Fatalf("pgxguard.Wrap: %v", err)
	}
	return &testGuard{sg: g, pg: pg}
}

// handles returns q's database/sql and pgx handles: nil for nil, the
// pool or the transaction of a *testDB or *testTx (only the one of the
// backend's path is set).
func handles(q any) (sqlguard.DBTX, pgxguard.DBTX) {
	switch q := q.(type) {
	case nil:
		return nil, nil
	case *testDB:
		return q.DB, q.pool
	case *testTx:
		return q.sql, q.pgx
	}
	panic(fmt.Sprintf("no handle for %T", q))
}

func sq(q any) sqlguard.DBTX { s, _ := handles(q); return s }
func pq(q any) pgxguard.DBTX { _, p := handles(q); return p }

// sb and pb return the Beginner of a *testDB or nil, on each path.
func sb(q any) sqlguard.Beginner {
	if q == nil {
		return nil
	}
	return q.(*testDB).DB
}

func pb(q any) pgxguard.Beginner {
	if q == nil {
		return nil
	}
	return q.(*testDB).pool
}

func (g *testGuard) Dialect() sqlguard.Dialect { return g.sg.Dialect() }
func (g *testGuard) Schema() []string          { return g.sg.Schema() }

func (g *testGuard) Fence(ctx context.Context, q any, tok fence.Token, resources ...string) error {
	if g.pg != nil {
		return g.pg.Fence(ctx, pq(q), tok, resources...)
	}
	return g.sg.Fence(ctx, sq(q), tok, resources...)
}

func (g *testGuard) FenceAll(ctx context.Context, q any, fences map[string]fence.Token) error {
	if g.pg != nil {
		return g.pg.FenceAll(ctx, pq(q), fences)
	}
	return g.sg.FenceAll(ctx, sq(q), fences)
}

func (g *testGuard) RunTxAll(ctx context.Context, db any, opts *sql.TxOptions, fences map[string]fence.Token,
	fn func(ctx context.Context, tx *testTx) error) error {
	if g.pg != nil {
		var f func(context.Context, pgx.Tx) error
		if fn != nil {
			f = func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, &testTx{pgx: tx}) }
		}
		return g.pg.RunTxAll(ctx, pb(db), pgxTxOptions(opts), fences, f)
	}
	var f func(context.Context, *sql.Tx) error
	if fn != nil {
		f = func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, &testTx{sql: tx}) }
	}
	return g.sg.RunTxAll(ctx, sb(db), opts, fences, f)
}

func (g *testGuard) Claim(ctx context.Context, db any, tok fence.Token, resources ...string) error {
	if g.pg != nil {
		return g.pg.Claim(ctx, pb(db), tok, resources...)
	}
	return g.sg.Claim(ctx, sb(db), tok, resources...)
}

func (g *testGuard) RunTx(ctx context.Context, db any, opts *sql.TxOptions, tok fence.Token, resources []string,
	fn func(ctx context.Context, tx *testTx) error) error {
	if g.pg != nil {
		var f func(context.Context, pgx.Tx) error
		if fn != nil {
			f = func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, &testTx{pgx: tx}) }
		}
		return g.pg.RunTx(ctx, pb(db), pgxTxOptions(opts), tok, resources, f)
	}
	var f func(context.Context, *sql.Tx) error
	if fn != nil {
		f = func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, &testTx{sql: tx}) }
	}
	return g.sg.RunTx(ctx, sb(db), opts, tok, resources, f)
}

func (g *testGuard) Update(ctx context.Context, q any, tok fence.Token, u sqlguard.RowUpdate) (int64, error) {
	if g.pg != nil {
		return g.pg.Update(ctx, pq(q), tok, u)
	}
	return g.sg.Update(ctx, sq(q), tok, u)
}

func (g *testGuard) Upsert(ctx context.Context, q any, tok fence.Token, u sqlguard.RowUpsert) error {
	if g.pg != nil {
		return g.pg.Upsert(ctx, pq(q), tok, u)
	}
	return g.sg.Upsert(ctx, sq(q), tok, u)
}

func (g *testGuard) Record(ctx context.Context, q any, requestID string) error {
	if g.pg != nil {
		return g.pg.Record(ctx, pq(q), requestID)
	}
	return g.sg.Record(ctx, sq(q), requestID)
}

func (g *testGuard) Recorded(ctx context.Context, q any, requestID string) (bool, error) {
	if g.pg != nil {
		return g.pg.Recorded(ctx, pq(q), requestID)
	}
	return g.sg.Recorded(ctx, sq(q), requestID)
}

func (g *testGuard) Mark(ctx context.Context, q any, resource string) (sqlguard.Mark, error) {
	if g.pg != nil {
		return g.pg.Mark(ctx, pq(q), resource)
	}
	return g.sg.Mark(ctx, sq(q), resource)
}

func (g *testGuard) Migrate(ctx context.Context, q any) error {
	if g.pg != nil {
		return g.pg.Migrate(ctx, pq(q))
	}
	return g.sg.Migrate(ctx, sq(q))
}

func (g *testGuard) CheckSchema(ctx context.Context, q any) error {
	if g.pg != nil {
		return g.pg.CheckSchema(ctx, pq(q))
	}
	return g.sg.CheckSchema(ctx, sq(q))
}

func (g *testGuard) CheckColumn(ctx context.Context, q any, table, column string) error {
	if g.pg != nil {
		return g.pg.CheckColumn(ctx, pq(q), table, column)
	}
	return g.sg.CheckColumn(ctx, sq(q), table, column)
}

func (g *testGuard) ResetMark(ctx context.Context, q any, resource string, old, next fence.Token) error {
	if g.pg != nil {
		return g.pg.ResetMark(ctx, pq(q), resource, old, next)
	}
	return g.sg.ResetMark(ctx, sq(q), resource, old, next)
}

func (g *testGuard) Bind(ctx context.Context, q any, resource, lock string) error {
	if g.pg != nil {
		return g.pg.Bind(ctx, pq(q), resource, lock)
	}
	return g.sg.Bind(ctx, sq(q), resource, lock)
}

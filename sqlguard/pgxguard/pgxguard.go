package pgxguard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBTX is the part of pgx that the Guard runs statements through. pgx.Tx,
// *pgxpool.Pool, *pgxpool.Conn and *pgx.Conn satisfy it.
//
// Methods that must share a transaction with the caller's writes (Fence,
// Record) refuse a *pgxpool.Pool with an error matching sqlguard.ErrNeedTx,
// because each statement on a pool may run on another connection and
// commits on its own. On a *pgx.Conn or *pgxpool.Conn they assume the
// caller began a transaction on that connection.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Beginner starts transactions. *pgxpool.Pool, *pgxpool.Conn and *pgx.Conn
// satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Guard writes fenced statements to PostgreSQL through pgx. It is a
// *sqlguard.Guard for the PostgreSQL dialect seen through pgx's types: the
// same statements, errors, metrics, logs and verifier. It is safe for
// concurrent use.
type Guard struct {
	sg     *sqlguard.Guard
	e      backend.Engine[sqlguard.RowUpdate, sqlguard.RowUpsert, sqlguard.Mark]
	cached bool // statements follow the connection's DefaultQueryExecMode (see WithStatementCache)
}

// New returns a Guard configured by opts, the options of package sqlguard
// (sqlguard.WithTable, WithMetrics, WithLogger, WithVerifier,
// WithTracerProvider, ...). It returns the errors of sqlguard.New.
func New(opts ...sqlguard.Option) (*Guard, error) {
	sg, err := sqlguard.New(sqlguard.PostgreSQL, opts...)
	if err != nil {
		return nil, err
	}
	return Wrap(sg)
}

// Wrap returns a Guard that shares g's configuration, metrics, logger,
// tracer and verified tokens, for a program that writes through both
// database/sql and pgx. g must be for sqlguard.PostgreSQL
// (sqlguard.ErrInvalid otherwise).
func Wrap(g *sqlguard.Guard) (*Guard, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: pgxguard: nil Guard", sqlguard.ErrInvalid)
	}
	if g.Dialect() != sqlguard.PostgreSQL {
		return nil, fmt.Errorf("%w: pgxguard: dialect %v, want postgresql", sqlguard.ErrInvalid, g.Dialect())
	}
	return &Guard{sg: g, e: g.Engine()}, nil
}

// WithStatementCache returns a Guard like g whose own statements run in
// the connection's DefaultQueryExecMode, which is pgx's statement cache
// (QueryExecModeCacheStatement) unless configured otherwise: each
// statement is parsed and planned once per connection rather than on
// every call, which makes a fenced row-column UPDATE cost about what a
// plain cached UPDATE does (see docs/performance.md).
//
// The price: after a schema change that alters a result type (Migrate
// after the tables were dropped, a fence column's type changed), the next
// run of each affected cached statement fails once with an error matching
// sqlguard.ErrRetryable (SQLSTATE 0A000, "cached plan must not change
// result type"), which RunTx retries and other calls return; and behind
// PgBouncer before 1.21 in transaction mode, set the pool's
// DefaultQueryExecMode to QueryExecModeExec, as for your own statements.
// g itself is unchanged.
func (g *Guard) WithStatementCache() *Guard {
	c := *g
	c.cached = true
	return &c
}

// SQL returns the *sqlguard.Guard behind g, for database/sql handles.
func (g *Guard) SQL() *sqlguard.Guard { return g.sg }

// Fence advances the marks of resources to tok inside the caller's
// transaction q, or refuses, exactly as sqlguard.Guard.Fence does. q is
// usually the pgx.Tx of RunTx or of pgx.BeginTxFunc.
func (g *Guard) Fence(ctx context.Context, q DBTX, tok fence.Token, resources ...string) error {
	return g.e.Fence(ctx, g.querier(q), tok, resources...)
}

// Claim advances the marks of resources to tok in a transaction of its own
// on db and commits it, as sqlguard.Guard.Claim does.
func (g *Guard) Claim(ctx context.Context, db Beginner, tok fence.Token, resources ...string) error {
	return g.e.Claim(ctx, g.begin(db, pgx.TxOptions{}), tok, resources...)
}

// RunTx runs fn in a transaction begun on db with opts and fenced first,
// like pgx.BeginTxFunc with a Fence(tok, resources...) before fn: it
// commits when fn returns nil and rolls back otherwise. resources may be
// empty (row-column mode only) and fn may be nil. Retryable conflicts
// (40001, 40P01, 55P03) roll back and run the whole transaction again with
// the same token, up to sqlguard.WithMaxAttempts times, so fn must be safe
// to run more than once. Errors are those of sqlguard.Guard.RunTx.
func (g *Guard) RunTx(ctx context.Context, db Beginner, opts pgx.TxOptions, tok fence.Token, resources []string,
	fn func(ctx context.Context, tx pgx.Tx) error) error {
	var f func(context.Context, backend.Tx) error
	if fn != nil {
		f = func(ctx context.Context, tx backend.Tx) error { return fn(ctx, tx.(pgxTx).tx) }
	}
	return g.e.RunTx(ctx, g.begin(db, opts), tok, resources, f)
}

// FenceAll fences each resource of fences with its own token inside the
// caller's transaction q, as sqlguard.Guard.FenceAll does: for a
// transaction that writes under several locks at once (a lease.Set).
func (g *Guard) FenceAll(ctx context.Context, q DBTX, fences map[string]fence.Token) error {
	return g.e.FenceAll(ctx, g.querier(q), fences)
}

// RunTxAll is RunTx with a FenceAll(fences) before fn, as
// sqlguard.Guard.RunTxAll: a refusal of any resource rolls the whole
// transaction back.
func (g *Guard) RunTxAll(ctx context.Context, db Beginner, opts pgx.TxOptions, fences map[string]fence.Token,
	fn func(ctx context.Context, tx pgx.Tx) error) error {
	var f func(context.Context, backend.Tx) error
	if fn != nil {
		f = func(ctx context.Context, tx backend.Tx) error { return fn(ctx, tx.(pgxTx).tx) }
	}
	return g.e.RunTxAll(ctx, g.begin(db, opts), fences, f)
}

// Update runs u with tok in row-column mode, as sqlguard.Guard.Update
// does. Where uses PostgreSQL placeholders ($1, ...). On a *pgxpool.Pool a
// multi-row update runs in a transaction of its own.
func (g *Guard) Update(ctx context.Context, q DBTX, tok fence.Token, u sqlguard.RowUpdate) (int64, error) {
	return g.e.Update(ctx, g.querier(q), tok, u)
}

// Upsert inserts or updates the row u.Key names, fenced by tok, as
// sqlguard.Guard.Upsert does.
func (g *Guard) Upsert(ctx context.Context, q DBTX, tok fence.Token, u sqlguard.RowUpsert) error {
	return g.e.Upsert(ctx, g.querier(q), tok, u)
}

// Record records the idempotency key requestID in the caller's
// transaction q, or returns *sqlguard.DuplicateError, as
// sqlguard.Guard.Record does.
func (g *Guard) Record(ctx context.Context, q DBTX, requestID string) error {
	return g.e.Record(ctx, g.querier(q), requestID)
}

// Recorded reports whether requestID was recorded, with a plain read.
func (g *Guard) Recorded(ctx context.Context, q DBTX, requestID string) (bool, error) {
	return g.e.Recorded(ctx, g.querier(q), requestID)
}

// Mark returns resource's mark, or an error matching fence.ErrNoMark,
// as sqlguard.Guard.Mark does: for display and tests only.
func (g *Guard) Mark(ctx context.Context, q DBTX, resource string) (sqlguard.Mark, error) {
	return g.e.Mark(ctx, g.querier(q), resource)
}

// Migrate creates the tables and checks them, as sqlguard.Guard.Migrate
// does.
func (g *Guard) Migrate(ctx context.Context, q DBTX) error { return g.e.Migrate(ctx, g.querier(q)) }

// CheckSchema verifies the tables, as sqlguard.Guard.CheckSchema does.
func (g *Guard) CheckSchema(ctx context.Context, q DBTX) error {
	return g.e.CheckSchema(ctx, g.querier(q))
}

// CheckColumn verifies a row-column fence column, as
// sqlguard.Guard.CheckColumn does.
func (g *Guard) CheckColumn(ctx context.Context, q DBTX, table, column string) error {
	return g.e.CheckColumn(ctx, g.querier(q), table, column)
}

// ResetMark sets a poisoned mark back from old to next, as
// sqlguard.Guard.ResetMark does: an operator's action.
func (g *Guard) ResetMark(ctx context.Context, q DBTX, resource string, old, next fence.Token) error {
	return g.e.ResetMark(ctx, g.querier(q), resource, old, next)
}

// Bind declares that resource is protected by lock, so that a first
// token of another lock is refused with fence.ErrWrongLock, as
// sqlguard.Guard.Bind does.
func (g *Guard) Bind(ctx context.Context, q DBTX, resource, lock string) error {
	return g.e.Bind(ctx, g.querier(q), resource, lock)
}

// Classify returns err wrapped to match sqlguard.ErrRetryable when it is a
// *pgconn.PgError with SQLSTATE 40001, 40P01 or 55P03 (or 0A000 "cached
// plan must not change result type": a statement of yours that pgx cached
// before a migration), and err otherwise, as sqlguard.Guard.Classify does.
func (g *Guard) Classify(err error) error { return g.sg.Classify(err) }

// execMode is how sqlguard's own statements run unless WithStatementCache
// was asked for: one round trip with an unnamed statement, so that no
// named prepared statement is cached. Cached statements are what a schema
// change can invalidate, and what PgBouncer before 1.21 in transaction
// mode loses between transactions.
var execMode = []any{pgx.QueryExecModeExec}

// pgxQ runs sqlguard's statements on a DBTX; mode holds the query exec
// mode argument, if any, put before the statement's own.
type pgxQ struct {
	q    DBTX
	mode []any
}

// modeArgs is what g puts before every statement's arguments.
func (g *Guard) modeArgs() []any {
	if g.cached {
		return nil
	}
	return execMode
}

func (g *Guard) querier(q DBTX) backend.Querier {
	if q == nil {
		return nil
	}
	if tx, ok := q.(pgx.Tx); ok {
		return pgxTx{pgxQ{tx, g.modeArgs()}, tx}
	}
	return pgxQ{q, g.modeArgs()}
}

func (p pgxQ) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, query, slices.Concat(p.mode, args)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p pgxQ) Query(ctx context.Context, query string, args ...any) (backend.Rows, error) {
	rows, err := p.q.Query(ctx, query, slices.Concat(p.mode, args)...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (p pgxQ) Pool() bool {
	_, ok := p.q.(*pgxpool.Pool)
	return ok
}

func (p pgxQ) Begin(ctx context.Context) (backend.Tx, error) {
	b, ok := p.q.(Beginner)
	if !ok {
		return nil, fmt.Errorf("%w: begin on %T", sqlguard.ErrInvalid, p.q)
	}
	return beginWith(b, pgx.TxOptions{}, p.mode)(ctx)
}

func (p pgxQ) Kind() string { return fmt.Sprintf("%T", p.q) }

// pgxTx is a pgx.Tx as a backend.Tx.
type pgxTx struct {
	pgxQ
	tx pgx.Tx
}

func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
func (t pgxTx) Done(err error) bool {
	return errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, pgx.ErrTxCommitRollback)
}

// begin begins transactions on db with opts; nil for a nil db.
func (g *Guard) begin(db Beginner, opts pgx.TxOptions) backend.Begin {
	return beginWith(db, opts, g.modeArgs())
}

// beginWith begins transactions on db with opts whose statements run with
// mode; nil for a nil db.
func beginWith(db Beginner, opts pgx.TxOptions, mode []any) backend.Begin {
	if db == nil {
		return nil
	}
	return func(ctx context.Context) (backend.Tx, error) {
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		return pgxTx{pgxQ{tx, mode}, tx}, nil
	}
}

// Package backend is the seam between sqlguard's statements and the
// drivers that run them: database/sql in package sqlguard, pgx in package
// pgxguard. Both paths run the same statements through these interfaces,
// so the SQL exists once.
package backend

import (
	"context"

	"github.com/fencekit/fencekit/fence"
)

// Querier runs statements.
type Querier interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// Pool reports whether each statement may run on another connection
	// and commit on its own (*sql.DB, *pgxpool.Pool).
	Pool() bool
	// Begin starts a transaction; it is only called when Pool is true.
	Begin(ctx context.Context) (Tx, error)
	// Kind names the Querier's type for errors, e.g. "*sql.DB".
	Kind() string
}

// Tx is a transaction begun by a Beginner.
type Tx interface {
	Querier
	// Commit commits the transaction.
	Commit(ctx context.Context) error
	// Rollback rolls it back; the error is ignored by callers.
	Rollback(ctx context.Context) error
	// Done reports whether err says the transaction had already ended
	// (sql.ErrTxDone, pgx.ErrTxClosed).
	Done(err error) bool
}

// Rows is a result set.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Begin starts a transaction for RunTx and Claim.
type Begin func(ctx context.Context) (Tx, error)

// Engine is sqlguard's *Guard seen through Querier. u and the returned
// mark are sqlguard's own types (RowUpdate, RowUpsert, Mark), passed as any
// to keep this package free of an import cycle.
type Engine interface {
	Fence(ctx context.Context, q Querier, tok fence.Token, resources ...string) error
	Claim(ctx context.Context, begin Begin, tok fence.Token, resources ...string) error
	RunTx(ctx context.Context, begin Begin, tok fence.Token, resources []string, fn func(context.Context, Tx) error) error
	Update(ctx context.Context, q Querier, tok fence.Token, u any) (int64, error)
	Upsert(ctx context.Context, q Querier, tok fence.Token, u any) error
	Record(ctx context.Context, q Querier, requestID string) error
	Recorded(ctx context.Context, q Querier, requestID string) (bool, error)
	Mark(ctx context.Context, q Querier, resource string) (any, error)
	Migrate(ctx context.Context, q Querier) error
	CheckSchema(ctx context.Context, q Querier) error
	CheckColumn(ctx context.Context, q Querier, table, column string) error
	ResetMark(ctx context.Context, q Querier, resource string, old, next fence.Token) error
	Bind(ctx context.Context, q Querier, resource, lock string) error
}

// EngineOf returns the Engine of a *sqlguard.Guard. Package sqlguard sets
// it when it is initialised.
var EngineOf func(g any) Engine

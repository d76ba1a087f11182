// Package backend is the seam between sqlguard's operations and the
// drivers that run them: database/sql in package sqlguard, pgx in package
// pgxguard. Each driver implements Querier, Tx and Rows; each operation
// (Fence, Update, ...) is written once, in package sqlguard, as a method
// on these interfaces, and Engine is how package pgxguard reaches them
// (sqlguard.Guard.Engine): with sqlguard's own types, no init and no
// package-level hook.
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

// Engine is a *sqlguard.Guard's operations on a Querier: the one
// implementation of each of them, which package sqlguard runs on
// database/sql and package pgxguard on pgx (sqlguard.Guard.Engine). Its
// type parameters are sqlguard's RowUpdate, RowUpsert and Mark: this
// package cannot name them without an import cycle.
type Engine[Update, Upsert, Mark any] interface {
	Fence(ctx context.Context, q Querier, tok fence.Token, resources ...string) error
	Claim(ctx context.Context, begin Begin, tok fence.Token, resources ...string) error
	RunTx(ctx context.Context, begin Begin, tok fence.Token, resources []string, fn func(context.Context, Tx) error) error
	FenceAll(ctx context.Context, q Querier, fences map[string]fence.Token) error
	RunTxAll(ctx context.Context, begin Begin, fences map[string]fence.Token, fn func(context.Context, Tx) error) error
	Update(ctx context.Context, q Querier, tok fence.Token, u Update) (int64, error)
	Upsert(ctx context.Context, q Querier, tok fence.Token, u Upsert) error
	Record(ctx context.Context, q Querier, requestID string) error
	Recorded(ctx context.Context, q Querier, requestID string) (bool, error)
	Mark(ctx context.Context, q Querier, resource string) (Mark, error)
	Migrate(ctx context.Context, q Querier) error
	CheckSchema(ctx context.Context, q Querier) error
	CheckColumn(ctx context.Context, q Querier, table, column string) error
	ResetMark(ctx context.Context, q Querier, resource string, old, next fence.Token) error
	Bind(ctx context.Context, q Querier, resource, lock string) error
}

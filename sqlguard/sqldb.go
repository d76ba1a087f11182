package sqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// sqlQ runs sqlguard's statements on a DBTX.
type sqlQ struct{ q DBTX }

// querier adapts q, or returns nil for a nil q.
func querier(q DBTX) backend.Querier {
	if q == nil {
		return nil
	}
	if tx, ok := q.(*sql.Tx); ok {
		return sqlTx{sqlQ{tx}, tx}
	}
	return sqlQ{q}
}

func (s sqlQ) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQ) Query(ctx context.Context, query string, args ...any) (backend.Rows, error) {
	rows, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (s sqlQ) Pool() bool {
	_, ok := s.q.(*sql.DB)
	return ok
}

func (s sqlQ) Begin(ctx context.Context) (backend.Tx, error) {
	db, ok := s.q.(*sql.DB)
	if !ok {
		return nil, fmt.Errorf("%w: begin on %T", ErrInvalid, s.q)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{sqlQ{tx}, tx}, nil
}

func (s sqlQ) Kind() string { return fmt.Sprintf("%T", s.q) }

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() } // Err reports what matters

// sqlTx is a *sql.Tx as a backend.Tx.
type sqlTx struct {
	sqlQ
	tx *sql.Tx
}

func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }
func (t sqlTx) Done(err error) bool            { return errors.Is(err, sql.ErrTxDone) }

// beginSQL begins transactions on db with opts.
func beginSQL(db Beginner, opts *sql.TxOptions) backend.Begin {
	return func(ctx context.Context) (backend.Tx, error) {
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		return sqlTx{sqlQ{tx}, tx}, nil
	}
}

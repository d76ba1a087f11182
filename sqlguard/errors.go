package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

var (
	// ErrNoRow reports that a row-column Update or Upsert found no row to
	// fence: Where selected none. (A resource without a mark is
	// fence.ErrNoMark; a refused token is a *fence.RefusedError.)
	ErrNoRow = errors.New("sqlguard: no such row")
	// ErrDuplicate reports an idempotency key that was already recorded:
	// the same request was applied before. Errors matching it are
	// *DuplicateError.
	ErrDuplicate = errors.New("sqlguard: duplicate request")
	// ErrRetryable reports a transient conflict (serialization failure,
	// deadlock, lock wait timeout, SQLite busy) after which the whole
	// transaction must be rolled back and may be run again with the same
	// token. Errors matching it also wrap the driver's error, for
	// errors.As.
	ErrRetryable = errors.New("sqlguard: retryable conflict")
	// ErrInvalid reports an argument refused before any SQL ran: a token
	// with a revision <= 0 (it also matches fence.ErrInvalid), an empty or
	// oversized name, or a malformed identifier.
	ErrInvalid = errors.New("sqlguard: invalid argument")
	// ErrNeedTx reports a pool (*sql.DB, or *pgxpool.Pool on the pgx path)
	// passed where the statement must run in the caller's transaction.
	ErrNeedTx = errors.New("sqlguard: needs a transaction, not a pool (*sql.DB, *pgxpool.Pool)")
	// ErrUnsafeSchema reports a table whose columns would let a stale token
	// through or are missing. Errors matching it are *SchemaError.
	ErrUnsafeSchema = errors.New("sqlguard: unsafe schema")
	// ErrUnknownDialect reports a database Detect does not recognise.
	ErrUnknownDialect = errors.New("sqlguard: unknown SQL dialect")
	// ErrCommitUnknown reports a COMMIT that failed without the database
	// saying why (connection lost, context cancelled): the transaction may
	// or may not have committed. Running it again with the same token is
	// safe for the fence; use an idempotency key to make the writes safe too.
	ErrCommitUnknown = errors.New("sqlguard: commit outcome unknown")
	// ErrOtherCluster reports a token refused by a mark that a Guard of
	// another etcd cluster wrote (see WithCluster): a *fence.RefusedError
	// with Outcome fence.MarkAhead, matching fence.ErrMarkAhead and
	// fence.ErrStale too.
	ErrOtherCluster = errors.New("sqlguard: mark from another etcd cluster")
)

// refused returns the *fence.RefusedError of outcome o for tok, refused by
// resource (and row, in row-column mode) whose mark is mark.
func refused(o fence.Outcome, resource, row string, tok, mark fence.Token) *fence.RefusedError {
	r := &fence.RefusedError{Outcome: o, Resource: resource, Row: row, Lock: mark.Lock, Token: tok, Mark: mark}
	if o == fence.Stale {
		r.Err = errResetAdvice
	}
	return r
}

// errResetAdvice ends the text of a stale refusal with the way out of the
// one case where a stale token is not a superseded holder.
var errResetAdvice = errors.New("if the current holder is refused too, the etcd cluster was replaced or restored " +
	"and restarted its revisions: an operator resets the mark (sqlguard.Guard.ResetMark) or the row's fence column")

// clusterError is the Err of a refusal by a mark of another etcd cluster
// (outcome fence.MarkAhead). It matches ErrOtherCluster.
type clusterError struct {
	markCluster, cluster string // hexadecimal cluster IDs
}

func (e *clusterError) Error() string {
	return fmt.Sprintf("the mark was issued by etcd cluster %s, not this Guard's cluster %s: a new or restored etcd cluster "+
		"restarts revisions; an operator resets the mark with sqlguard.Guard.ResetMark", e.markCluster, e.cluster)
}

func (e *clusterError) Is(target error) bool { return target == ErrOtherCluster }

// DuplicateError is the error for an idempotency key recorded before.
type DuplicateError struct {
	// RequestID is the key.
	RequestID string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("sqlguard: duplicate request %q", e.RequestID)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// SchemaError describes a table or column that is missing or unsafe.
type SchemaError struct {
	// Table is the table's name as configured.
	Table string
	// Column is the offending column, empty when the table is missing.
	Column string
	// Type is the column's declared type, if it exists.
	Type string
	// Reason says what is wrong.
	Reason string
}

func (e *SchemaError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("sqlguard: unsafe schema: table %s: %s", e.Table, e.Reason)
	}
	return fmt.Sprintf("sqlguard: unsafe schema: %s.%s (%s): %s", e.Table, e.Column, e.Type, e.Reason)
}

// Is reports whether target is ErrUnsafeSchema.
func (e *SchemaError) Is(target error) bool { return target == ErrUnsafeSchema }

// Classify returns err wrapped in an error matching ErrRetryable (errors.As
// still reaches the driver's error) when the database reported a
// transient conflict in g's dialect, and err unchanged
// otherwise (nil for nil). Use it on errors from your own statements inside
// a fenced transaction; RunTx applies it to whatever its function returns.
//
// Retryable: PostgreSQL SQLSTATE 40001 (serialization failure), 40P01
// (deadlock), 55P03 (lock not available, e.g. lock_timeout), and 0A000
// "cached plan must not change result type" (a statement pgx prepared
// before a migration changed a column's type; pgx drops it, and a re-run
// prepares it again; recognised in PostgreSQL's English message text); MySQL and
// MariaDB 1213 (deadlock), 1205 (lock wait timeout), 1020 (record changed
// since last read, MariaDB snapshot isolation); SQLite SQLITE_BUSY and
// SQLITE_LOCKED with any extended code (including BUSY_SNAPSHOT), from
// modernc.org/sqlite. Errors of other SQLite drivers are not recognised.
func (g *Guard) Classify(err error) error {
	if err == nil || errors.Is(err, ErrRetryable) {
		return err
	}
	if g.retryable(err) {
		return asRetryable(err)
	}
	return err
}

// asRetryable wraps err to match ErrRetryable.
func asRetryable(err error) error { return fmt.Errorf("%w: %w", ErrRetryable, err) }

func (g *Guard) retryable(err error) bool {
	switch g.d {
	case PostgreSQL:
		var pe interface{ SQLState() string }
		if errors.As(err, &pe) {
			switch pe.SQLState() {
			case "40001", "40P01", "55P03":
				return true
			case "0A000":
				// A statement pgx cached before a migration changed its
				// result type; pgx has dropped it, and a re-run prepares it
				// again. 0A000 alone is any unsupported feature.
				return strings.Contains(err.Error(), "cached plan must not change result type")
			}
		}
	case MySQL, MariaDB:
		if n, ok := mysqlNumber(err); ok {
			switch n {
			case 1213, 1205, 1020:
				return true
			}
		}
	case SQLite:
		var se interface{ Code() int }
		if errors.As(err, &se) {
			switch se.Code() & 0xff {
			case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
				return true
			}
		}
	}
	return false
}

// serverError reports whether err carries an error code from the database
// server, as opposed to a network, driver or context failure.
func serverError(err error) bool {
	var pe interface{ SQLState() string }
	var se interface{ Code() int }
	if _, ok := mysqlNumber(err); ok {
		return true
	}
	return errors.As(err, &pe) || errors.As(err, &se)
}

// ctxErr keeps ctx.Err() matchable next to the driver's error.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return errors.Join(cerr, err)
	}
	return err
}

// wrapErr is how every statement error leaves the package: cancellation
// stays matchable, transient conflicts match ErrRetryable.
func (g *Guard) wrapErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sqlguard: %s: %w", op, ctxErr(ctx, err))
	}
	return fmt.Errorf("sqlguard: %s: %w", op, g.Classify(err))
}

package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

var (
	// ErrStale reports a token older than the mark the database already
	// accepted. It is fence.ErrStale itself, so either name matches. Errors
	// matching it are *StaleError.
	ErrStale = fence.ErrStale
	// ErrWrongLock reports a token for another lock than the one the
	// resource's mark is bound to. It is fence.ErrWrongLock itself. Errors
	// matching it are *WrongLockError.
	ErrWrongLock = fence.ErrWrongLock
	// ErrNotFound reports that a row-column update matched no row, or that
	// a resource has no mark yet.
	ErrNotFound = errors.New("sqlguard: not found")
	// ErrDuplicate reports an idempotency key that was already recorded:
	// the same request was applied before. Errors matching it are
	// *DuplicateError.
	ErrDuplicate = errors.New("sqlguard: duplicate request")
	// ErrRetryable reports a transient conflict (serialization failure,
	// deadlock, lock wait timeout, SQLite busy) after which the whole
	// transaction must be rolled back and may be run again with the same
	// token. Errors matching it are *RetryableError.
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
	// ErrUnverified reports a token the Guard's Verifier (WithVerifier)
	// did not confirm as its lock's current holder's. It is
	// fence.ErrUnverified itself. Errors matching it are *UnverifiedError.
	ErrUnverified = fence.ErrUnverified
	// ErrOtherCluster reports a token refused as stale by a mark that a
	// Guard of another etcd cluster wrote (see WithCluster). Errors
	// matching it are *ClusterError, which match ErrStale too.
	ErrOtherCluster = errors.New("sqlguard: mark from another etcd cluster")
	// ErrMarkChanged reports a ResetMark whose expected old mark is not
	// the resource's mark. Errors matching it are *MarkChangedError.
	ErrMarkChanged = errors.New("sqlguard: mark changed")
)

// StaleError is the error for a token older than a resource's mark.
type StaleError struct {
	// Resource is the fenced resource: the resource name in fence-table
	// mode, the table name in row-column mode.
	Resource string
	// Row names the refused row in row-column mode: the key columns and
	// values of an Upsert ("id=j1"), or the Where and WhereArgs of an
	// Update ("where (id = ?) [j1]"), at most 200 bytes. It is empty in
	// fence-table mode. Logs never carry it.
	Row string
	// Token is the token that was refused.
	Token fence.Token
	// Current is the mark the database holds, read in the same transaction
	// with a locking read. In row-column mode it is the highest fence among
	// the rows the update targeted, with the token's lock name.
	Current fence.Token
}

// The Error text ends with the way out of the one case where a stale token
// is not a superseded holder: a new or restored etcd cluster.
func (e *StaleError) Error() string {
	what, reset := fmt.Sprintf("%q", e.Resource), "resets the mark, see sqlguard.Guard.ResetMark"
	if e.Row != "" {
		what, reset = fmt.Sprintf("table %q row %s", e.Resource, e.Row), "resets the row's fence column"
	}
	return fmt.Sprintf("sqlguard: stale token for %s: lock %q revision %d is older than accepted revision %d "+
		"(if the current holder is refused too, the etcd cluster was replaced or restored and restarted its revisions: "+
		"an operator %s)", what, e.Token.Lock, e.Token.Revision, e.Current.Revision, reset)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Unwrap returns the equivalent *fence.StaleError.
func (e *StaleError) Unwrap() error { return &fence.StaleError{Token: e.Token, Mark: e.Current} }

// ClusterError is the error for a token older than a mark that was
// written under another etcd cluster (see WithCluster): most likely the
// etcd cluster was replaced or restored and restarted its revisions, and
// every holder of the new cluster is refused until an operator resets the
// mark with Guard.ResetMark. It matches ErrOtherCluster, ErrStale and
// fence.ErrStale.
type ClusterError struct {
	// Resource is the fenced resource.
	Resource string
	// Token is the token that was refused.
	Token fence.Token
	// Current is the resource's mark.
	Current fence.Token
	// MarkCluster is the cluster ID, in hexadecimal, recorded with the
	// mark; Cluster is this Guard's.
	MarkCluster, Cluster string
}

func (e *ClusterError) Error() string {
	return fmt.Sprintf("sqlguard: stale token for %q: lock %q revision %d is older than accepted revision %d, "+
		"which etcd cluster %s issued, not this Guard's cluster %s: a new or restored etcd cluster restarts revisions; "+
		"an operator resets the mark with sqlguard.Guard.ResetMark",
		e.Resource, e.Token.Lock, e.Token.Revision, e.Current.Revision, e.MarkCluster, e.Cluster)
}

// Is reports whether target is ErrOtherCluster or ErrStale.
func (e *ClusterError) Is(target error) bool { return target == ErrOtherCluster || target == ErrStale }

// Unwrap returns the equivalent *fence.StaleError.
func (e *ClusterError) Unwrap() error { return &fence.StaleError{Token: e.Token, Mark: e.Current} }

// WrongLockError is the error for a token whose lock is not the lock the
// resource's mark is bound to.
type WrongLockError struct {
	// Resource is the fenced resource.
	Resource string
	// Token is the token that was refused.
	Token fence.Token
	// Want is the lock the resource is bound to.
	Want string
}

func (e *WrongLockError) Error() string {
	return fmt.Sprintf("sqlguard: resource %q is bound to lock %q, token is for lock %q",
		e.Resource, e.Want, e.Token.Lock)
}

// Is reports whether target is ErrWrongLock.
func (e *WrongLockError) Is(target error) bool { return target == ErrWrongLock }

// Unwrap returns the equivalent *fence.WrongLockError.
func (e *WrongLockError) Unwrap() error { return &fence.WrongLockError{Token: e.Token, Want: e.Want} }

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

// RetryableError wraps a driver error that means "roll back and run the
// transaction again".
type RetryableError struct {
	// Err is the driver's error (*pgconn.PgError, *mysql.MySQLError,
	// *sqlite.Error, ...).
	Err error
}

func (e *RetryableError) Error() string { return "sqlguard: retryable: " + e.Err.Error() }

// Is reports whether target is ErrRetryable.
func (e *RetryableError) Is(target error) bool { return target == ErrRetryable }

// Unwrap returns Err.
func (e *RetryableError) Unwrap() error { return e.Err }

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

// Classify returns err wrapped in a *RetryableError when the database
// reported a transient conflict in g's dialect, and err unchanged
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
		return &RetryableError{Err: err}
	}
	return err
}

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
// stays matchable, transient conflicts become *RetryableError.
func (g *Guard) wrapErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sqlguard: %s: %w", op, ctxErr(ctx, err))
	}
	return fmt.Errorf("sqlguard: %s: %w", op, g.Classify(err))
}

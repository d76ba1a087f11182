package sqlguard

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// Record records the idempotency key requestID in the caller's transaction
// q, or returns *DuplicateError (ErrDuplicate) when it is already recorded:
// the same business request was applied before and must not be applied
// again. Call it in the same transaction as the request's writes; if the
// transaction rolls back, the key is forgotten with them.
//
// The fencing token and the idempotency key are separate checks: a stale
// token is fence.ErrStale whether or not the request is new, and a duplicate
// request is ErrDuplicate even under the newest token. When a concurrent
// transaction recorded the same key and has not finished, Record waits for
// it. Keys are kept until you delete them (the table has created_at for
// that); requestID must be 1 to MaxRequestIDLen bytes of UTF-8 without NUL.
func (g *Guard) Record(ctx context.Context, q DBTX, requestID string) error {
	return engine{g}.Record(ctx, querier(q), requestID)
}

// Record is Guard.Record on a backend.Querier: traced, counted and logged.
func (g engine) Record(ctx context.Context, q backend.Querier, requestID string) error {
	return g.traced(ctx, "record", "", g.rname, fence.Token{}, func(ctx context.Context, sp *span) error {
		if sp != nil {
			sp.s.SetAttributes(attrRequest.String(logattr.Hash(requestID)))
			sp.hide = []string{requestID}
		}
		if err := validText("request id", requestID, MaxRequestIDLen); err != nil {
			return err
		}
		if err := needTx(q, "record"); err != nil {
			return err
		}
		n := int64(1)
		var err error
		if g.d.mysqlLike() {
			// A failed INSERT does not abort a MySQL transaction. INSERT
			// IGNORE would also hide other errors, and ON DUPLICATE KEY
			// UPDATE counts depend on clientFoundRows.
			_, err = q.Exec(ctx, "INSERT INTO "+g.requests+" (request_id) VALUES (?)", requestID)
			if isMySQLNumber(err, 1062) { // ER_DUP_ENTRY
				n, err = 0, nil
			}
		} else {
			// A failed INSERT would abort a PostgreSQL transaction; DO
			// NOTHING reports the duplicate as zero rows instead.
			n, err = q.Exec(ctx, "INSERT INTO "+g.requests+" (request_id) VALUES ("+g.ph(1)+
				") ON CONFLICT (request_id) DO NOTHING", requestID)
		}
		if err != nil {
			return g.wrapErr(ctx, "record request", err)
		}
		if n == 0 {
			return &DuplicateError{RequestID: requestID}
		}
		return nil
	})
}

// Recorded reports whether requestID was recorded, with a plain read. It is
// for display and tests; only Record decides atomically.
func (g *Guard) Recorded(ctx context.Context, q DBTX, requestID string) (bool, error) {
	return engine{g}.Recorded(ctx, querier(q), requestID)
}

// Recorded is Guard.Recorded on a backend.Querier.
func (g engine) Recorded(ctx context.Context, q backend.Querier, requestID string) (bool, error) {
	if err := validText("request id", requestID, MaxRequestIDLen); err != nil {
		return false, err
	}
	if q == nil {
		return false, fmt.Errorf("%w: recorded: nil DBTX", ErrInvalid)
	}
	var n int64
	_, err := queryRow(ctx, q, "SELECT COUNT(*) FROM "+g.requests+" WHERE request_id = "+g.ph(1), []any{requestID}, &n)
	if err != nil {
		return false, g.wrapErr(ctx, "read request", err)
	}
	return n > 0, nil
}

package sqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// Mark is a resource's row in the fence table.
type Mark struct {
	// Resource is the resource's name.
	Resource string
	// Token is the highest token accepted for the resource; its Lock is the
	// lock the resource is bound to.
	Token fence.Token
	// Seq counts accepted fence statements. It grows by one with every
	// accepted Fence, so it orders the transactions that passed the fence
	// in commit order.
	Seq int64
	// Cluster is the etcd cluster ID, in hexadecimal, of the Guard (see
	// WithCluster) that last advanced or reset the mark; empty when that
	// Guard had none, or when this Guard reads marks without WithCluster.
	Cluster string
}

// Fence advances the marks of resources to tok inside the caller's
// transaction q, or refuses. It must run in the same transaction as the
// writes it protects, before them (best: as the transaction's first
// statement, and never inside a savepoint that may be rolled back).
//
// For each resource, in sorted order with duplicates removed (so that
// transactions fencing overlapping sets cannot deadlock), one guarded
// statement accepts tok when the resource has no mark yet, when tok is for
// the mark's lock and tok.Revision >= the mark's revision (equal is the same
// holder writing again). It then holds the mark's row lock until the
// transaction ends, so no other fenced transaction on the resource can
// commit in between.
//
// The first binding rule: a resource with no row is bound, for good, to
// the lock of the first token that fences it (Fence, RunTx or Claim),
// whatever that lock is; every later token of another lock is refused with
// fence.ErrWrongLock. When a wrong first token is possible (several locks, or
// resources named by callers), declare each resource's lock in advance
// with Bind.
//
// Errors, after which the caller must roll back q:
//   - a *fence.RefusedError naming the resource, tok and the mark, of
//     Outcome fence.Stale (fence.ErrStale) when a mark is newer than tok,
//     fence.WrongLock (fence.ErrWrongLock) when a mark is bound to another
//     lock, or fence.MarkAhead (fence.ErrMarkAhead, ErrOtherCluster) for
//     a mark of another etcd cluster (see WithCluster);
//   - ErrRetryable, wrapping the driver's error, on a transient conflict: roll back and
//     run the whole transaction again with the same token (see RunTx);
//   - ErrInvalid (and fence.ErrInvalid for the token) before any SQL, for an
//     invalid token, no resources, or a bad resource name;
//   - ErrNeedTx when q is a *sql.DB (a *pgxpool.Pool on the pgx path);
//   - the context's error (matchable with errors.Is) when ctx ends, for
//     example during a lock wait; database/sql then rolls back a
//     transaction begun with that context.
func (g *Guard) Fence(ctx context.Context, q DBTX, tok fence.Token, resources ...string) error {
	return engine{g}.Fence(ctx, querier(q), tok, resources...)
}

// Fence is Guard.Fence on a backend.Querier: fence, traced, counted and
// logged.
func (g engine) Fence(ctx context.Context, q backend.Querier, tok fence.Token, resources ...string) error {
	return g.traced(ctx, "fence", modeTable, g.tname, tok, func(ctx context.Context, sp *span) error {
		sp.setInt(attrResources, len(resources))
		return g.fence(ctx, q, tok, resources...)
	})
}

// fence is Fence without span, metrics and logs, as Claim runs it.
func (g *Guard) fence(ctx context.Context, q backend.Querier, tok fence.Token, resources ...string) error {
	rs, err := canonical(tok, resources)
	if err != nil {
		return err
	}
	if err := needTx(q, "fence"); err != nil {
		return err
	}
	if err := g.verify(ctx, "fence", tok); err != nil {
		return err
	}
	for _, r := range rs {
		if err := g.fenceOne(ctx, q, tok, r); err != nil {
			return err
		}
	}
	return nil
}

// FenceAll is Fence for a transaction that writes under several locks at
// once (a lease.Set): fences maps each resource to the token that fences
// it, the token of the lock the resource is bound to (for example
// set.Fence(lock)). In the caller's transaction q, each resource, in
// sorted order, is fenced with its own token by the statement Fence runs,
// and holds its row lock until q ends. The first refusal is returned, and
// the caller must roll back q: then no mark of any of the resources moves
// and no write of the transaction commits. A transaction that commits
// passed every fence.
//
// Errors are Fence's, each naming the resource refused and its token;
// ErrInvalid comes before any SQL for an empty map, an invalid token or a
// bad resource name. With a verifier (WithVerifier) every distinct token
// is verified before the first statement.
func (g *Guard) FenceAll(ctx context.Context, q DBTX, fences map[string]fence.Token) error {
	return engine{g}.FenceAll(ctx, querier(q), fences)
}

// FenceAll is Guard.FenceAll on a backend.Querier: traced, counted and
// logged as op "fence".
func (g engine) FenceAll(ctx context.Context, q backend.Querier, fences map[string]fence.Token) error {
	ctx, sp := g.startSpan(ctx, "fence", modeTable, g.tname, fence.Token{})
	sp.hideLocks(fences)
	sp.setInt(attrResources, len(fences))
	err := g.decided(ctx, "fence", g.fenceAll(ctx, q, fences))
	sp.end(err)
	return err
}

func (g *Guard) fenceAll(ctx context.Context, q backend.Querier, fences map[string]fence.Token) error {
	rs, err := canonicalAll(fences)
	if err != nil {
		return err
	}
	if err := needTx(q, "fence"); err != nil {
		return err
	}
	if err := g.verifyAll(ctx, fences, rs); err != nil {
		return err
	}
	for _, r := range rs {
		if err := g.fenceOne(ctx, q, fences[r], r); err != nil {
			return err
		}
	}
	return nil
}

// verifyAll verifies the token of each of rs, in that order.
func (g *Guard) verifyAll(ctx context.Context, fences map[string]fence.Token, rs []string) error {
	for _, r := range rs {
		if err := g.verify(ctx, "fence", fences[r]); err != nil {
			return err
		}
	}
	return nil
}

// canonicalAll validates the inputs of FenceAll and returns the resources
// sorted.
func canonicalAll(fences map[string]fence.Token) ([]string, error) {
	if len(fences) == 0 {
		return nil, fmt.Errorf("%w: no resources to fence", ErrInvalid)
	}
	rs := slices.Sorted(maps.Keys(fences))
	for _, r := range rs {
		if err := validText("resource name", r, MaxResourceLen); err != nil {
			return nil, err
		}
		if err := validToken(fences[r]); err != nil {
			return nil, fmt.Errorf("resource %q: %w", r, err)
		}
	}
	return rs, nil
}

// canonical validates the inputs and returns the resources sorted and
// without duplicates.
func canonical(tok fence.Token, resources []string) ([]string, error) {
	if err := validToken(tok); err != nil {
		return nil, err
	}
	if len(resources) == 0 {
		return nil, fmt.Errorf("%w: no resources to fence", ErrInvalid)
	}
	for _, r := range resources {
		if err := validText("resource name", r, MaxResourceLen); err != nil {
			return nil, err
		}
	}
	rs := slices.Clone(resources)
	slices.Sort(rs)
	return slices.Compact(rs), nil
}

func (g *Guard) fenceOne(ctx context.Context, q backend.Querier, tok fence.Token, resource string) error {
	var n int64
	var err error
	switch g.d {
	case PostgreSQL, SQLite:
		// One statement: insert the mark, or advance it only when the
		// stored token is not newer and the lock matches. The conflicting
		// row is locked even when the WHERE is false.
		cols, vals, set, args := "", "", "", []any{resource, tok.Lock, tok.Revision}
		if g.cluster != "" {
			cols, vals, set, args = ", cluster_id", ", "+g.ph(4), ", cluster_id = excluded.cluster_id", append(args, g.cluster)
		}
		n, err = q.Exec(ctx, "INSERT INTO "+g.table+` AS f (resource, lock_key, token, seq`+cols+`) VALUES (`+
			g.ph(1)+", "+g.ph(2)+", "+g.ph(3)+`, 1`+vals+`) ON CONFLICT (resource) DO UPDATE SET token = excluded.token, seq = f.seq + 1`+set+
			` WHERE f.token <= excluded.token AND f.lock_key = excluded.lock_key`, args...)
	case MySQL, MariaDB:
		// ON DUPLICATE KEY UPDATE has no WHERE, so make sure the row
		// exists (token 0 is below every valid token), then run the guarded
		// UPDATE. seq always changes, so the affected count is 1 for an
		// accepted token whatever clientFoundRows says.
		_, err = q.Exec(ctx, "INSERT INTO "+g.table+
			" (resource, lock_key, token, seq) VALUES (?, ?, 0, 0) ON DUPLICATE KEY UPDATE resource = resource",
			resource, tok.Lock)
		if err != nil {
			return g.wrapErr(ctx, "fence "+fmt.Sprintf("%q", resource), err)
		}
		set, args := "", []any{tok.Revision}
		if g.cluster != "" {
			set, args = ", cluster_id = ?", append(args, g.cluster)
		}
		n, err = q.Exec(ctx, "UPDATE "+g.table+
			" SET seq = seq + 1, token = ?"+set+" WHERE resource = ? AND lock_key = ? AND token <= ?",
			append(args, resource, tok.Lock, tok.Revision)...)
	}
	if err != nil {
		return g.wrapErr(ctx, fmt.Sprintf("fence %q", resource), err)
	}
	if n == 1 {
		return nil
	}
	// Refused: say why. The guarded statement left the row locked, and a
	// locking read returns the latest committed row, not a snapshot.
	m, err := g.readMark(ctx, q, resource, true)
	if err != nil {
		return err
	}
	switch {
	case m.Token.Lock != tok.Lock:
		return refused(fence.WrongLock, resource, "", tok, m.Token)
	case m.Token.Revision > tok.Revision && g.cluster != "" && m.Cluster != "" && m.Cluster != g.cluster:
		r := refused(fence.MarkAhead, resource, "", tok, m.Token)
		r.Err = &clusterError{markCluster: m.Cluster, cluster: g.cluster}
		return r
	case m.Token.Revision > tok.Revision:
		return refused(fence.Stale, resource, "", tok, m.Token)
	}
	// Cannot happen while the row is locked; treat it as a conflict.
	return asRetryable(fmt.Errorf("fence %q: refused, but the mark %d allows %d", resource, m.Token.Revision, tok.Revision))
}

// Mark returns resource's mark, or an error matching fence.ErrNoMark (as
// guard's Mark) when the resource was never fenced nor bound. A resource bound with Bind that no token fenced yet has a mark of
// revision 0 and Seq 0. It is a plain read: inside a transaction after
// Fence it shows that transaction's own advance; elsewhere it may be
// out of date as soon as it returns. Use it for display and tests, never to
// decide whether to write.
func (g *Guard) Mark(ctx context.Context, q DBTX, resource string) (Mark, error) {
	return engine{g}.Mark(ctx, querier(q), resource)
}

// Mark is Guard.Mark on a backend.Querier.
func (g engine) Mark(ctx context.Context, q backend.Querier, resource string) (Mark, error) {
	if err := validText("resource name", resource, MaxResourceLen); err != nil {
		return Mark{}, err
	}
	if q == nil {
		return Mark{}, fmt.Errorf("%w: mark: nil DBTX", ErrInvalid)
	}
	return g.readMark(ctx, q, resource, false)
}

func (g *Guard) readMark(ctx context.Context, q backend.Querier, resource string, locking bool) (Mark, error) {
	cols := "lock_key, token, seq"
	m := Mark{Resource: resource}
	var cluster sql.NullString
	dest := []any{&m.Token.Lock, &m.Token.Revision, &m.Seq}
	if g.cluster != "" {
		// Guards without WithCluster work on tables without the column.
		cols += ", cluster_id"
		dest = append(dest, &cluster)
	}
	query := "SELECT " + cols + " FROM " + g.table + " WHERE resource = " + g.ph(1)
	if locking {
		query += g.lockingRead()
	}
	found, err := queryRow(ctx, q, query, []any{resource}, dest...)
	m.Cluster = cluster.String
	switch {
	case err == nil && !found:
		return Mark{}, fmt.Errorf("sqlguard: resource %q: %w", resource, fence.ErrNoMark)
	case err != nil:
		return Mark{}, g.wrapErr(ctx, fmt.Sprintf("read mark %q", resource), err)
	}
	return m, nil
}

// Claim advances the marks of resources to tok in a transaction of its own
// and commits it. A new holder calls Claim before it reads the state it
// will change: from then on a late write of the previous holder is refused,
// so it cannot land between the new holder's read and its write. (Fencing
// alone admits an old holder's write until the new holder's first fenced
// transaction commits.) Claim retries retryable conflicts like RunTx and
// returns the same errors as Fence.
func (g *Guard) Claim(ctx context.Context, db Beginner, tok fence.Token, resources ...string) error {
	var begin backend.Begin
	if db != nil {
		begin = beginSQL(db, nil)
	}
	return engine{g}.Claim(ctx, begin, tok, resources...)
}

// Claim is Guard.Claim on a backend.Begin.
func (g engine) Claim(ctx context.Context, begin backend.Begin, tok fence.Token, resources ...string) error {
	return g.traced(ctx, "claim", modeTable, g.tname, tok, func(ctx context.Context, sp *span) error {
		sp.setInt(attrResources, len(resources))
		if len(resources) == 0 {
			return fmt.Errorf("%w: no resources to claim", ErrInvalid)
		}
		return g.runTx(ctx, begin, tok, resources, nil, false, sp)
	})
}

// RunTx runs fn in a transaction that is fenced first: it begins a
// transaction on db with opts, calls Fence(tok, resources...), then fn, then
// commits. resources may be empty, for a transaction that only uses
// row-column mode. fn may be nil.
//
// When any step fails with an error that Classify marks retryable, RunTx
// rolls back, waits a short random backoff and runs the whole transaction
// again with the same token, up to WithMaxAttempts times. That is safe for
// the fence: the same token is accepted again, or refused as stale if a
// newer holder got in first. fn must therefore be safe to run more than once
// (do not send e-mail from it). Any other error rolls back and is returned
// as is: *fence.RefusedError, *DuplicateError, fn's own errors,
// and the context's error. A COMMIT that fails without an error code from
// the database returns an error matching ErrCommitUnknown: it may have
// committed.
func (g *Guard) RunTx(ctx context.Context, db Beginner, opts *sql.TxOptions, tok fence.Token, resources []string,
	fn func(ctx context.Context, tx *sql.Tx) error) error {
	begin, f := sqlTxArgs(db, opts, fn)
	return engine{g}.RunTx(ctx, begin, tok, resources, f)
}

// RunTx is Guard.RunTx on a backend.Begin, traced.
func (g engine) RunTx(ctx context.Context, begin backend.Begin, tok fence.Token, resources []string,
	fn func(context.Context, backend.Tx) error) error {
	mode, table := modeRow, ""
	if len(resources) > 0 {
		mode, table = modeTable, g.tname
	}
	ctx, sp := g.startSpan(ctx, "tx", mode, table, tok)
	if len(resources) > 0 {
		sp.setInt(attrResources, len(resources))
	}
	err := g.runTx(ctx, begin, tok, resources, fn, true, sp)
	sp.end(err)
	return err
}

// runTx is RunTx; countFence says whether its Fence calls are counted,
// logged and traced as op "fence" (Claim counts its own result instead).
// sp, the caller's span, if any, records the attempts.
func (g engine) runTx(ctx context.Context, begin backend.Begin, tok fence.Token, resources []string,
	fn func(context.Context, backend.Tx) error, countFence bool, sp *span) error {
	if err := checkTx(begin, tok, resources); err != nil {
		return err
	}
	if err := g.verifyBefore(ctx, tok, resources, countFence); err != nil {
		return err
	}
	var fenceStep func(context.Context, backend.Tx) error
	if len(resources) > 0 {
		fenceStep = func(ctx context.Context, tx backend.Tx) error {
			if countFence {
				return g.Fence(ctx, tx, tok, resources...)
			}
			return g.fence(ctx, tx, tok, resources...)
		}
	}
	return g.retry(ctx, begin, fenceStep, fn, sp)
}

// retry runs a transaction (fenceStep, if any, then fn, then COMMIT) and
// runs it again after a retryable failure, up to the Guard's attempts.
func (g engine) retry(ctx context.Context, begin backend.Begin, fenceStep, fn func(context.Context, backend.Tx) error, sp *span) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = g.runOnce(ctx, begin, fenceStep, fn)
		sp.setInt(attrAttempts, attempt)
		if err == nil || !errors.Is(err, ErrRetryable) || attempt >= g.attempts || ctx.Err() != nil {
			return err
		}
		if werr := backoff(ctx, attempt); werr != nil {
			return errors.Join(werr, err)
		}
		if g.retries != nil {
			g.retries.Inc()
		}
		sp.retried(attempt)
	}
}

// RunTxAll is RunTx for a transaction that writes under several locks at
// once (a lease.Set): it begins a transaction on db with opts, calls
// FenceAll(fences), then fn, then commits, with RunTx's retries and
// errors. fences maps each resource to its token (see FenceAll); it is
// copied, and must not be empty. A refusal of any resource rolls the whole
// transaction back: fn does not run and no mark moves.
func (g *Guard) RunTxAll(ctx context.Context, db Beginner, opts *sql.TxOptions, fences map[string]fence.Token,
	fn func(ctx context.Context, tx *sql.Tx) error) error {
	begin, f := sqlTxArgs(db, opts, fn)
	return engine{g}.RunTxAll(ctx, begin, fences, f)
}

// sqlTxArgs adapts RunTx's and RunTxAll's database/sql arguments to the
// engine's: a nil db or fn stays nil, for the engine to refuse.
func sqlTxArgs(db Beginner, opts *sql.TxOptions, fn func(context.Context, *sql.Tx) error) (backend.Begin, func(context.Context, backend.Tx) error) {
	var begin backend.Begin
	if db != nil {
		begin = beginSQL(db, opts)
	}
	var f func(context.Context, backend.Tx) error
	if fn != nil {
		f = func(ctx context.Context, tx backend.Tx) error { return fn(ctx, tx.(sqlTx).tx) }
	}
	return begin, f
}

// RunTxAll is Guard.RunTxAll on a backend.Begin, traced.
func (g engine) RunTxAll(ctx context.Context, begin backend.Begin, fences map[string]fence.Token,
	fn func(context.Context, backend.Tx) error) error {
	ctx, sp := g.startSpan(ctx, "tx", modeTable, g.tname, fence.Token{})
	sp.hideLocks(fences)
	sp.setInt(attrResources, len(fences))
	err := g.runTxAll(ctx, begin, maps.Clone(fences), fn, sp)
	sp.end(err)
	return err
}

func (g engine) runTxAll(ctx context.Context, begin backend.Begin, fences map[string]fence.Token,
	fn func(context.Context, backend.Tx) error, sp *span) error {
	rs, err := canonicalAll(fences)
	if err != nil {
		return err
	}
	if begin == nil {
		return fmt.Errorf("%w: run tx: nil Beginner", ErrInvalid)
	}
	if err := g.decidedIfErr(ctx, "fence", g.verifyAll(ctx, fences, rs)); err != nil {
		return err
	}
	fenceStep := func(ctx context.Context, tx backend.Tx) error { return g.FenceAll(ctx, tx, fences) }
	return g.retry(ctx, begin, fenceStep, fn, sp)
}

// checkTx refuses a transaction's arguments before anything runs.
func checkTx(begin backend.Begin, tok fence.Token, resources []string) error {
	if len(resources) > 0 {
		if _, err := canonical(tok, resources); err != nil {
			return err
		}
	} else if err := validToken(tok); err != nil {
		return err
	}
	if begin == nil {
		return fmt.Errorf("%w: run tx: nil Beginner", ErrInvalid)
	}
	return nil
}

// verifyBefore verifies tok before BEGIN when the transaction fences
// resources, so that no transaction waits on etcd; Fence then finds tok
// verified. A refusal is counted as op "fence" unless Claim counts it.
func (g engine) verifyBefore(ctx context.Context, tok fence.Token, resources []string, countFence bool) error {
	switch {
	case len(resources) == 0:
		return nil
	case !countFence:
		return g.verify(ctx, "claim", tok) // counted by Claim
	}
	return g.decidedIfErr(ctx, "fence", g.verify(ctx, "fence", tok))
}

// backoff waits before attempt+1 of a transaction: full jitter, growing
// from 2 ms to at most about 100 ms. It returns ctx's error if ctx ends
// first.
func backoff(ctx context.Context, attempt int) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(min(2<<attempt, 100)) * int64(time.Millisecond))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (g engine) runOnce(ctx context.Context, begin backend.Begin, fenceStep, fn func(context.Context, backend.Tx) error) (err error) {
	tx, err := begin(ctx)
	if err != nil {
		return g.wrapErr(ctx, "begin", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // the error that matters is err
		}
	}()
	if fenceStep != nil {
		if err := fenceStep(ctx, tx); err != nil {
			return err
		}
	}
	if fn != nil {
		if err := fn(ctx, tx); err != nil {
			return ctxErr(ctx, g.Classify(err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, ErrRetryable) || g.retryable(err) {
			return g.wrapErr(ctx, "commit", err)
		}
		if serverError(err) || tx.Done(err) {
			// The database refused the commit, or the transaction had
			// already ended (rolled back when ctx was cancelled).
			return fmt.Errorf("sqlguard: commit: %w", ctxErr(ctx, err))
		}
		return fmt.Errorf("sqlguard: commit: %w", errors.Join(ErrCommitUnknown, ctxErr(ctx, err)))
	}
	return nil
}

// Bind declares that resource is protected by lock: it creates the
// resource's row in the fence table bound to lock, with no token yet
// (revision 0, below every valid token), so that the first token of
// another lock is refused with fence.ErrWrongLock instead of binding the
// resource to the wrong lock (see Fence for the first binding rule).
//
// Binding is idempotent: when the resource is already bound to lock, with
// or without a mark, Bind returns nil and changes nothing. When it is bound
// to another lock, Bind changes nothing and returns a *fence.RefusedError (fence.ErrWrongLock)
// whose Want is the lock it is bound to and whose Token is
// {Lock: lock, Revision: 0}. A binding is never changed by sqlguard; to
// move a resource to another lock, delete its row while no holder writes.
//
// q may be a *sql.DB: the row is inserted if absent, then read. Errors:
// ErrInvalid before any SQL for an invalid resource or lock name;
// *fence.RefusedError (fence.ErrWrongLock); ErrRetryable; the context's error. Bind is not
// counted in the decision metrics.
func (g *Guard) Bind(ctx context.Context, q DBTX, resource, lock string) error {
	return engine{g}.Bind(ctx, querier(q), resource, lock)
}

// Bind is Guard.Bind on a backend.Querier.
func (g engine) Bind(ctx context.Context, q backend.Querier, resource, lock string) error {
	if err := validText("resource name", resource, MaxResourceLen); err != nil {
		return err
	}
	if err := validText("lock name", lock, fence.MaxNameLen); err != nil {
		return err
	}
	if q == nil {
		return fmt.Errorf("%w: bind: nil DBTX", ErrInvalid)
	}
	insert := "INSERT INTO " + g.table + " (resource, lock_key, token, seq) VALUES (" + g.ph(1) + ", " + g.ph(2) + ", 0, 0) "
	if g.d.mysqlLike() {
		insert += "ON DUPLICATE KEY UPDATE resource = resource"
	} else {
		insert += "ON CONFLICT (resource) DO NOTHING"
	}
	if _, err := q.Exec(ctx, insert, resource, lock); err != nil {
		return g.wrapErr(ctx, fmt.Sprintf("bind %q", resource), err)
	}
	// lock_key never changes once the row exists, so a plain read after
	// the insert tells the binding.
	m, err := g.readMark(ctx, q, resource, false)
	if err != nil {
		return err
	}
	if m.Token.Lock != lock {
		return refused(fence.WrongLock, resource, "", fence.Token{Lock: lock}, m.Token)
	}
	return nil
}

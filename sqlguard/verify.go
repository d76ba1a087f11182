package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/sqlguard/internal/backend"
)

// Verifier confirms that a fencing token was issued by the lock service to
// its lock's current holder; it has the shape of guard.Verifier, and
// lease.Verifier implements it. Verify returns nil for a genuine token, an
// error matching fence.ErrUnverified for one the service does not confirm,
// and any other error when it cannot tell. It must be safe for concurrent
// use.
type Verifier interface {
	Verify(ctx context.Context, t fence.Token) error
}

// VerifiedCacheSize is how many locks a Guard with WithVerifier remembers
// a verified token of.
const VerifiedCacheSize = 1024

// WithVerifier makes Fence, Claim, RunTx, Update and Upsert verify their
// token with v before any statement that could advance a mark with it:
// only tokens of a lock's current holder, at the time of the check, can
// then raise a mark or a row's fence. A verified token is remembered, per
// lock, until a newer token of the same lock is verified (at most
// VerifiedCacheSize locks), so a holder's repeated transactions cost one
// Verify per acquisition, whatever resources they fence.
//
// A token v does not confirm is refused before any SQL with a
// *fence.RefusedError of Outcome fence.Unverified (fence.ErrUnverified;
// its Err is v's answer), and nothing changes. This includes the token of
// a holder that has since been superseded, when this Guard had not
// verified it while it was current: such a holder gets
// fence.ErrUnverified instead of fence.ErrStale; both mean it must stop.
// When v cannot tell (etcd unreachable, ctx ended) the call fails with v's
// error wrapped (outcome "failed") and nothing changes: a verifying Guard never advances a mark
// with a token it could not verify.
//
// A remembered token stays verified after its lease ends, until this
// Guard verifies a newer token of the lock: a new holder should Claim its
// resources (or write them) before the old one could write again, as
// without a verifier.
func WithVerifier(v Verifier) Option {
	return optionFunc(func(c *config) error {
		if v == nil {
			return fmt.Errorf("%w: nil verifier", ErrInvalid)
		}
		c.verifier = v
		return nil
	})
}

// verifiedCache remembers, per lock, the revision of the last token
// verified, for at most VerifiedCacheSize locks (oldest entry evicted).
type verifiedCache struct {
	mu    sync.Mutex
	revs  map[string]int64
	order []string // locks in insertion order, for eviction
}

func (c *verifiedCache) has(t fence.Token) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revs[t.Lock] == t.Revision
}

// add records t as verified. An older token of the lock than one already
// recorded is not recorded: its holder was superseded.
func (c *verifiedCache) add(t fence.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revs == nil {
		c.revs = map[string]int64{}
	}
	if rev, ok := c.revs[t.Lock]; ok {
		c.revs[t.Lock] = max(rev, t.Revision)
		return
	}
	if len(c.order) >= VerifiedCacheSize {
		delete(c.revs, c.order[0])
		c.order = c.order[1:]
	}
	c.revs[t.Lock] = t.Revision
	c.order = append(c.order, t.Lock)
}

// verify checks tok with the Guard's Verifier, unless there is none or it
// was verified before. The caller has validated tok.
func (g *Guard) verify(ctx context.Context, op string, tok fence.Token) error {
	if g.ver == nil || g.verified.has(tok) {
		return nil
	}
	err := g.ver.Verify(ctx, tok)
	switch {
	case err == nil:
		g.verified.add(tok)
		return nil
	case errors.Is(err, fence.ErrUnverified):
		return unverified(tok, err)
	}
	return fmt.Errorf("sqlguard: %s: verify token: %w", op, ctxErr(ctx, err))
}

// ResetMark sets resource's mark in the fence table back from old to
// next: the recovery from a poisoned mark, a token no acquisition made
// (written before a verifier was configured, or from an etcd cluster
// restored without --bump-revision, or from the etcd cluster a new one
// replaced, which restarts revisions), which refuses every real holder as
// stale. With WithCluster the reset mark records this Guard's cluster. It is an operator's action, never part of normal operation: it
// can let a superseded holder write again, so pick next as the current
// holder's token (or lower) and stop the writers of the old mark first.
//
// It runs one UPDATE on q (a *sql.DB, *sql.Tx or *sql.Conn) that changes
// the row only if it holds exactly old, and waits for fenced transactions
// holding the row. When the mark is not old it returns a
// error matching fence.ErrMarkChanged, naming both marks, and changes
// nothing; when the resource has no mark, an error matching
// fence.ErrNoMark. next must be valid
// and for old's lock (ErrInvalid otherwise). A reset is logged at Warn
// with both marks ("mark_old", "mark"); the row's seq grows by one.
func (g *Guard) ResetMark(ctx context.Context, q DBTX, resource string, old, next fence.Token) error {
	return engine{g}.ResetMark(ctx, querier(q), resource, old, next)
}

// ResetMark is Guard.ResetMark on a backend.Querier.
func (g engine) ResetMark(ctx context.Context, q backend.Querier, resource string, old, next fence.Token) error {
	if err := validText("resource name", resource, MaxResourceLen); err != nil {
		return err
	}
	if err := validToken(old); err != nil {
		return fmt.Errorf("old mark: %w", err)
	}
	if err := validToken(next); err != nil {
		return fmt.Errorf("new mark: %w", err)
	}
	if old.Lock != next.Lock {
		return fmt.Errorf("%w: reset mark of %q: new mark for lock %q, old for lock %q", ErrInvalid, resource, next.Lock, old.Lock)
	}
	if q == nil {
		return fmt.Errorf("%w: reset mark: nil DBTX", ErrInvalid)
	}
	set, args := "", []any{next.Revision}
	if g.cluster != "" {
		// The reset mark belongs to this Guard's cluster from now on.
		set, args = ", cluster_id = "+g.ph(2), append(args, g.cluster)
	}
	i := len(args)
	n, err := q.Exec(ctx, "UPDATE "+g.table+" SET token = "+g.ph(1)+set+", seq = seq + 1 WHERE resource = "+g.ph(i+1)+
		" AND lock_key = "+g.ph(i+2)+" AND token = "+g.ph(i+3), append(args, resource, old.Lock, old.Revision)...)
	if err != nil {
		return g.wrapErr(ctx, fmt.Sprintf("reset mark %q", resource), err)
	}
	if n != 1 {
		m, err := g.readMark(ctx, q, resource, false)
		if err != nil {
			return err
		}
		return fmt.Errorf("sqlguard: mark of %q is %s, not %s: not reset: %w", resource, m.Token, old, fence.ErrMarkChanged)
	}
	g.obs.Logger().LogAttrs(ctx, slog.LevelWarn, "sqlguard: mark reset by operator",
		slog.String("resource", resource), logattr.Lock(next.Lock),
		slog.Int64("mark_old", old.Revision), slog.Int64("mark", next.Revision))
	return nil
}

// unverified is the refusal of tok by a Verifier whose answer err matches
// fence.ErrUnverified: the verifier's own *fence.RefusedError
// (lease.Verifier's), or a new one around err. No resource is named: the
// token is refused before any statement.
func unverified(tok fence.Token, err error) error {
	var r *fence.RefusedError
	if errors.As(err, &r) && r.Outcome == fence.Unverified && r.Token == tok {
		return r
	}
	return &fence.RefusedError{Outcome: fence.Unverified, Lock: tok.Lock, Token: tok, Err: err}
}

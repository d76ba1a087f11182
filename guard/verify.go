package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
)

// Verifier confirms that a fencing token was issued by the lock service to
// its lock's current holder. lease.Verifier implements it for the records
// of package lease.
//
// Verify returns nil for a genuine token; an error matching
// fence.ErrUnverified for a token the service does not confirm (never
// issued, a waiter's, superseded, another cluster's); and any other error
// when it cannot tell (service unreachable, ctx ended). It must be safe
// for concurrent use.
type Verifier interface {
	Verify(ctx context.Context, t fence.Token) error
}

// WithVerifier makes the Guard verify with v every token that would raise
// a resource's mark, before the mark moves: only the lock's current holder
// at the time of the check can then raise a mark. A token equal to the
// mark or for another lock is decided without calling v, so the holder's
// repeated writes cost no verification; each acquisition costs one Verify
// per resource, on its first write. A stale token is refused whatever v
// says, and then costs one Verify: if v confirms it as the current
// holder's, the mark is ahead of the lock service and the refusal's
// Outcome is fence.MarkAhead (fence.ErrMarkAhead) instead of fence.Stale.
//
// A token v does not confirm is refused with a *fence.RefusedError of
// Outcome fence.Unverified (fence.ErrUnverified; HTTP 403, gRPC
// PermissionDenied) whose Err is v's answer, and the mark does not move.
// When v cannot tell, the outcome is failed (HTTP
// 503, gRPC Unavailable, an error matching ErrUnavailable): a Guard with a
// verifier never admits a newer token it could not verify. Each Verify
// gets the check budget (WithCheckTimeout), and runs without the resource
// held (except within a VerifyingStore's AdvanceVerified): requests that
// need no verification are not held up by it, and the verified token is
// then advanced by the store's compare-and-advance, refused if the mark
// passed it meanwhile.
func WithVerifier(v Verifier) Option {
	return optionFunc(func(c *config) error {
		if v == nil {
			return errors.New("guard: nil verifier")
		}
		c.verifier = v
		return nil
	})
}

// VerifyingStore is implemented by stores that can verify a token and
// raise the mark to it in one atomic step (etcdstore.Store, with a
// lease.Verifier of the same etcd cluster). A Guard with a verifier uses
// it instead of Mark, Verify and Advance.
type VerifyingStore interface {
	Store
	// AdvanceVerified is Advance, except that a token that would raise
	// the mark is first verified with v, and the mark is raised only if
	// the token is still verified when it is raised. It returns v's
	// error, matching fence.ErrUnverified, for a token v does not
	// confirm, and the mark is then unchanged. A token equal to the mark,
	// stale or for another lock is decided without v.
	AdvanceVerified(ctx context.Context, resource string, t fence.Token, v Verifier) (fence.Token, error)
}

// Resetter is implemented by stores whose marks an operator can set back
// (MemoryStore, etcdstore.Store); see Guard.ResetMark.
type Resetter interface {
	// ResetMark sets the resource's mark to next if it is exactly old
	// (the zero Token: no mark), as one atomic step with respect to
	// Advance. Otherwise it returns an error matching
	// fence.ErrMarkChanged and changes nothing.
	ResetMark(ctx context.Context, resource string, old, next fence.Token) error
}

// ValidateReset checks the arguments of a reset for Resetter
// implementations (MemoryStore, etcdstore.Store, redisguard.Store, and a
// user's own Store): next must be a valid token, and for the same lock as
// a non-zero old. It returns an error matching ErrInvalidTarget for an
// empty resource, fence.ErrInvalid for an invalid mark, and
// fence.ErrWrongLock when the locks differ.
func ValidateReset(resource string, old, next fence.Token) error {
	if resource == "" {
		return fmt.Errorf("%w: empty resource name", ErrInvalidTarget)
	}
	if err := next.Validate(); err != nil {
		return fmt.Errorf("guard: reset mark of %q: new mark: %w", resource, err)
	}
	if !old.IsZero() {
		if err := old.Validate(); err != nil {
			return fmt.Errorf("guard: reset mark of %q: old mark: %w", resource, err)
		}
		if old.Lock != next.Lock {
			return fmt.Errorf("guard: reset mark of %q: %w", resource,
				&fence.RefusedError{Outcome: fence.WrongLock, Resource: resource, Lock: old.Lock, Token: next, Mark: old})
		}
	}
	return nil
}

// ResetMark sets the resource's mark back from old to next: the recovery
// from a poisoned mark, a token that no acquisition made (sent before a
// verifier was configured, or from a cluster restored without
// --bump-revision) which refuses every real holder as stale. It is an
// operator's action, never part of normal operation: it can let a
// superseded holder write again, so pick next as the current holder's
// token (or lower) and stop the writers of the old mark first.
//
// old must be exactly the resource's mark (read it with Mark); otherwise
// ResetMark returns an error matching fence.ErrMarkChanged, naming both
// marks, and changes nothing, so a reset cannot undo an advance it did not see. next must be
// valid and for old's lock. The reset waits for the resource's in-flight
// write through this Guard, and is logged at Warn with both marks
// ("mark_old", "mark"). The store must implement Resetter; MemoryStore
// and etcdstore.Store do.
func (g *Guard) ResetMark(ctx context.Context, resource string, old, next fence.Token) error {
	r, ok := g.store.(Resetter)
	if !ok {
		return fmt.Errorf("guard: store %T cannot reset marks", g.store)
	}
	if err := ValidateReset(resource, old, next); err != nil {
		return err
	}
	unlock, err := g.lock(ctx, resource)
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.ResetMark(ctx, resource, old, next); err != nil {
		return err
	}
	g.obs.Logger().LogAttrs(ctx, slog.LevelWarn, "guard: mark reset by operator",
		slog.String("resource", resource), logattr.Lock(next.Lock),
		slog.Int64("mark_old", old.Revision), slog.Int64("mark", next.Revision))
	return nil
}

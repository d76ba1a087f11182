package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Permit is one held permit of a Semaphore, or one read lock of an
// RWMutex. Like a Lease, only it can renew or release itself, every such
// call is one transaction comparing its owner token, a lost reply never
// applies twice, and Done closes a safety margin before the server could
// expire it.
//
// A Permit has no fencing token. Several permits of one lock are held at
// the same time, so a resource that keeps "the newest token wins" would
// refuse the older, still valid holder as soon as a newer one wrote.
// Protect a resource shared under a semaphore by other means (each holder
// its own partition of the resource, or idempotent writes with an
// idempotency key); see Revision for read locks.
//
// A Permit is safe for concurrent use.
type Permit struct {
	l *Lease
}

// Name returns the lock's name.
func (p *Permit) Name() string { return p.l.name }

// Names returns the lock's name as the one element of a slice, for
// Handle.
func (p *Permit) Names() []string { return []string{p.l.name} }

// Fences returns nil: a permit has no fencing token (see Permit, and
// Revision for read locks). It is there for Handle.
func (p *Permit) Fences() []fence.Token { return nil }

// Revision returns the creation revision of the permit's record. It is not
// a fencing token: never send it where guard or sqlguard would take it as
// one. For a read lock it tells a resource whether a write lock was taken
// after this read began: every write lock acquired later has a higher
// fencing token, and is admitted only once this read lock is released or
// lost. A resource can therefore refuse a read whose Revision is below
// the highest write-lock token it has accepted.
func (p *Permit) Revision() int64 { return p.l.rev }

// Release gives the permit back. Results are as for Lease.Release: nil,
// ErrNotOwner, ErrNotFound, or ErrOutcomeUnknown (call Release again).
func (p *Permit) Release(ctx context.Context) error {
	if p == nil {
		return errNilLease
	}
	return p.l.Release(ctx)
}

// Renew confirms the permit and extends its session, as Lease.Renew.
func (p *Permit) Renew(ctx context.Context) error {
	if p == nil {
		return errNilLease
	}
	return p.l.Renew(ctx)
}

// Done returns a channel closed when the permit ends: released, lost, or
// its Client closed.
func (p *Permit) Done() <-chan struct{} { return p.l.Done() }

// Err returns nil while the permit is held, then ErrReleased, ErrClosed or
// a *LostError (whose Fence is the zero Token).
func (p *Permit) Err() error {
	if p == nil {
		return errNilLease
	}
	return p.l.Err()
}

// Context returns a copy of parent cancelled, with Err as its cause, when
// the permit ends. It carries no fencing token. Call the CancelFunc when
// the work is done.
func (p *Permit) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return p.l.bind(parent)
}

// OwnerDigest returns the digest of the owner token, as logs show it.
func (p *Permit) OwnerDigest() string { return p.l.owner.Digest() }

// Acquired returns when the permit was acquired.
func (p *Permit) Acquired() time.Time { return p.l.acquired }

// ValidUntil returns the permit's local validity deadline, as
// Lease.ValidUntil: the permit's record stays until then unless someone
// deletes it or revokes the session, and Done closes at it if no renewal
// moves it. After the permit has ended it returns the zero Time.
func (p *Permit) ValidUntil() time.Time { return p.l.ValidUntil() }

// ReleaseRequested is closed when someone asked this permit's holder to
// give it back (admin.Admin.RequestRelease with its Revision, which reaches
// only the oldest permit of the lock: the head of its queue). It stays
// open otherwise, also after the permit ends.
func (p *Permit) ReleaseRequested() <-chan struct{} { return p.l.ReleaseRequested() }

// String describes the permit without revealing its owner token.
func (p *Permit) String() string {
	if p == nil {
		return "permit(nil)"
	}
	return fmt.Sprintf("permit(%q %s owner=%s)", p.l.name, p.l.kind, p.l.owner.Digest())
}

// GoString is String, so that %#v does not print the owner token.
func (p *Permit) GoString() string { return p.String() }

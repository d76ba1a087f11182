package lease

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Handle is what every held thing of this package offers: a *Lease, a
// *Permit (of a Semaphore, or a read lock of an RWMutex), a *Term (of an
// Election) and a *Set (of AcquireAll). Code that only holds, watches and
// lets go (a job runner, a supervisor, a readiness check) can take a
// Handle and serve all four; each type adds what is its own (Lease.Reenter,
// Term.Proclaim and Transfer, Set.Lease, Permit.Revision).
//
// A Handle is safe for concurrent use. Its getters (Names, Acquired,
// Fences, ValidUntil, Err) read local state: they cost etcd nothing and
// never wait for a request.
type Handle interface {
	// Names returns the names of the locks held: one for a Lease, Permit
	// or Term (a Term's is its election's), every lock of a Set in the
	// order AcquireAll got them. The caller may modify the slice.
	Names() []string

	// Acquired returns when the handle became held, by this process's
	// clock: for a Term when it began to lead, for a Set when its last
	// lock was admitted.
	Acquired() time.Time

	// Fences returns the fencing tokens to send with every write the
	// handle protects, one per name in the order of Names. A Permit
	// returns nil: several permits are held at once, so none has a
	// fencing token (see Permit).
	Fences() []fence.Token

	// ValidUntil returns the local validity deadline (see
	// Lease.ValidUntil): the earliest of its locks' for a Set, and the
	// zero Time once the handle has ended.
	ValidUntil() time.Time

	// Done returns a channel closed when the handle ends: released,
	// lost, or its Client closed. For a Set, when any of its locks ends.
	Done() <-chan struct{}

	// Err returns nil while the handle is held, and why it ended after
	// Done has closed: ErrReleased (ErrTransferred, which matches it, for
	// a transferred Term), ErrClosed, or a *LostError.
	Err() error

	// Context returns a copy of parent cancelled, with Err as its cause,
	// when the handle ends, and carrying its fencing tokens (none for a
	// Permit). Call the CancelFunc when the work is done.
	Context(parent context.Context) (context.Context, context.CancelFunc)

	// Renew confirms the handle and extends its session's validity (see
	// Lease.Renew); results are as in the package doc's Results.
	Renew(ctx context.Context) error

	// Release gives the handle back in owner-checked transactions (see
	// Lease.Release): the one hold Acquire took (a Lease reentered needs
	// one Release per hold), every lock of a Set, a Term by resigning.
	// Results are as in the package doc's Results; check them.
	Release(ctx context.Context) error

	// ReleaseRequested returns a channel closed when someone asked the
	// holder to let go (admin.Admin.RequestRelease, Election.RequestTransfer):
	// for a Set, any of its locks. It stays open otherwise, also after
	// the handle ends. Nothing is taken away: the holder decides.
	ReleaseRequested() <-chan struct{}
}

// Every held type satisfies Handle.
var (
	_ Handle = (*Lease)(nil)
	_ Handle = (*Permit)(nil)
	_ Handle = (*Term)(nil)
	_ Handle = (*Set)(nil)
)

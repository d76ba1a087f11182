package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/record"
)

var (
	// ErrHeld reports that a try (TryAcquire, TryAcquireAll, TryLock,
	// TryRLock, Semaphore.TryAcquire) found the lock held, or waited for,
	// by another acquisition. Nothing was left behind: any record the try
	// wrote to find out was deleted before it returned, unless the error
	// is also a *LeftBehindError, which names the locks where it may remain.
	ErrHeld = errors.New("lease: held by another holder")
	// ErrLeftBehind matches every *LeftBehindError: a try failed and could
	// not confirm, before it returned, that the records it wrote are gone.
	ErrLeftBehind = errors.New("lease: records left behind")
	// ErrNotOwner reports that the lock record now belongs to a different
	// acquisition: this holder lost the lock and someone else holds it.
	ErrNotOwner = errors.New("lease: not owner")
	// ErrNotFound reports that no record of this acquisition exists: it
	// expired, was deleted, or was already released.
	ErrNotFound = errors.New("lease: not found")
	// ErrLost matches every *LostError: the lease ended without its holder
	// releasing it. The error's Cause says why.
	ErrLost = errors.New("lease: lost")
	// ErrReleased is the Err of a lease its holder released.
	ErrReleased = errors.New("lease: released")
	// ErrOutcomeUnknown reports that a Release, Reenter or Renew got no
	// answer from etcd (unreachable, or ctx ended; each resends itself
	// first, for up to one TTL): it may or may not have
	// applied. Retry the same call; it never applies twice.
	ErrOutcomeUnknown = errors.New("lease: outcome unknown")
	// ErrRetryable matches every error of Acquire, TryAcquire and Do after
	// which calling again may succeed: the lease was lost, the session
	// ended during the wait, the waiter's record was removed, or etcd could
	// not be reached. It never matches a ctx error, ErrClosed,
	// ErrPermissionDenied, ErrInvalidName, ErrInvalidSet, ErrInvalidOption,
	// ErrTTLTooShort, ErrMismatch, ErrServerTooOld or ErrHeld.
	ErrRetryable = errors.New("lease: retryable")
	// ErrEtcdClosed reports that the etcd client was closed before the
	// Client: its sessions could be neither renewed nor revoked, so its
	// records stay until their sessions expire. It matches ErrClosed.
	// Close the lease.Client first, then its etcd client.
	ErrEtcdClosed = fmt.Errorf("%w: the etcd client was closed before the lease.Client", ErrClosed)
	// ErrMismatch reports that one lock name is used as different kinds of
	// lock (a Lease or write lock, a semaphore, an election) or as
	// semaphores of different sizes: every participant must agree. The
	// acquisition that found the other kind ahead of it fails; nothing is
	// left behind.
	ErrMismatch = record.ErrMismatch
	// ErrClosed reports that the Client was closed; it is also the Err of
	// leases that ended because of it.
	ErrClosed = errors.New("lease: client closed")
	// ErrInvalidName reports a lock name that is empty, longer than
	// MaxNameLen, not UTF-8, or holds "/" or a control character.
	ErrInvalidName = errors.New("lease: invalid lock name")
	// ErrInvalidSet reports an AcquireAll or TryAcquireAll call with no
	// names, a name twice, or more than MaxSetSize names. Nothing was
	// written.
	ErrInvalidSet = errors.New("lease: invalid lock set")
	// ErrInvalidOption reports an AcquireOption with an invalid value
	// (such as a maximum hold that is not positive). Nothing was written.
	ErrInvalidOption = errors.New("lease: invalid acquire option")

	// ErrTTLTooShort reports a TTL (WithTTL) below the etcd server's
	// minimum lease TTL, which the server would silently raise. Nothing is
	// held; configure a longer TTL.
	ErrTTLTooShort = errors.New("lease: TTL below the server's minimum")
	// ErrServerTooOld reports an etcd member older than MinServerVersion,
	// found before the Client's first session was granted. Nothing was
	// written. Errors matching it are *ServerVersionError values.
	ErrServerTooOld = errors.New("lease: etcd server too old")
	// ErrPermissionDenied reports that etcd refused a request for lack of
	// permission or authentication: the user needs read and write on the
	// Client's key prefix. The request was not applied.
	ErrPermissionDenied = record.ErrPermissionDenied

	// ErrKeyDeleted is a loss cause: the lock record was deleted by someone
	// other than its holder (an operator, a revoke, an expiry).
	ErrKeyDeleted = errors.New("lease: lock record deleted")
	// ErrReleaseRequested is the cause with which Do cancels its
	// function's context when someone asked the holder to release
	// (admin.Admin.RequestRelease). It is not a loss: the lease is held until
	// Do releases it.
	ErrReleaseRequested = errors.New("lease: release requested")
	// ErrTransferred is the Err of a term its leader handed to a chosen
	// successor (Term.Transfer), and the cause with which the term's
	// Context is cancelled. It matches ErrReleased: the leader let go.
	ErrTransferred = fmt.Errorf("%w: transferred to a chosen successor", ErrReleased)
	// ErrNotCandidate reports that Term.Transfer was given a successor
	// that is not waiting in the election. Errors matching it are
	// *NotCandidateError values.
	ErrNotCandidate = errors.New("lease: not a waiting candidate")
	// ErrMaxHold is a loss cause: the lease was held for the maximum its
	// acquisition allowed (WithMaxHold), and the Client took it back.
	ErrMaxHold = errors.New("lease: held for its maximum time")
	// ErrKeyOverwritten is a loss cause: the lock record was overwritten by
	// someone other than its holder.
	ErrKeyOverwritten = errors.New("lease: lock record overwritten")
	// ErrSessionExpired is a loss cause: the Client's etcd session lease
	// expired or was revoked, which deletes every record attached to it.
	ErrSessionExpired = errors.New("lease: session expired or revoked")
	// ErrRevokedEarly is a loss cause, and matches ErrSessionExpired: etcd
	// ended the Client's session while the TTL its last confirmed renewal
	// granted had not yet run out. Someone revoked its etcd lease (etcdctl
	// lease revoke, a script), or etcd did: a known etcd defect lets a
	// leader that was frozen past the TTL, once it continues, revoke leases
	// the new leader renewed meanwhile (README, "What it does not
	// guarantee"). Either way the lock may have been taken over before its
	// holder learned; the fencing token is what keeps the holder's late
	// writes out. fencekit_lease_sessions_revoked_early_total counts them.
	ErrRevokedEarly = fmt.Errorf("%w before its TTL ran out", ErrSessionExpired)
	// ErrDeadline is a loss cause: no renewal was confirmed in time, so the
	// server may expire the session soon. The lease ends before that can
	// happen, by the safety margin.
	ErrDeadline = errors.New("lease: validity deadline passed without a confirmed renewal")
)

// LostError is the Err of a lease (or permit, or term) that ended without
// its holder releasing it. errors.Is matches it against ErrLost and
// against its Cause.
type LostError struct {
	// Lock is the lock's name.
	Lock string
	// Fence is the fencing token of the acquisition that was lost; the
	// zero Token for a Permit, which has none.
	Fence fence.Token
	// Cause is ErrKeyDeleted, ErrKeyOverwritten, ErrSessionExpired,
	// ErrDeadline, ErrNotOwner or ErrNotFound.
	Cause error
}

func (e *LostError) Error() string {
	if e.Fence.Revision == 0 {
		return fmt.Sprintf("lease %q lost: %v", e.Lock, e.Cause)
	}
	return fmt.Sprintf("lease %q (fence %d) lost: %v", e.Lock, e.Fence.Revision, e.Cause)
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the cause.
func (e *LostError) Unwrap() error { return e.Cause }

// TTLError reports a TTL of WithLeaseTTL the Client cannot use. It
// matches ErrInvalidOption; nothing was written.
type TTLError struct {
	TTL    time.Duration // the TTL asked for
	Reason string        // what is wrong with it
}

func (e *TTLError) Error() string {
	return fmt.Sprintf("%s: lease TTL %v: %s", ErrInvalidOption, e.TTL, e.Reason)
}

// Is reports whether target is ErrInvalidOption.
func (e *TTLError) Is(target error) bool { return target == ErrInvalidOption }

// LeftBehindError is the error of a try (TryAcquire, TryAcquireAll,
// TryLock, TryRLock, Semaphore.TryAcquire) that failed and could not
// confirm, before it returned, that every record it wrote was deleted: the
// delete was refused, or got no reply within ctx and one TTL, so its
// outcome is unknown. The Client goes on deleting those records in the
// background, comparing their owner tokens, as it does for a failed
// Acquire; they go with their session at the latest. Until then each may
// block its lock.
//
// errors.Is matches it against ErrLeftBehind, and against Err and Cause:
// a try that found a lock held still matches ErrHeld.
type LeftBehindError struct {
	// Locks names the locks whose records may remain, in the order the
	// call named them.
	Locks []string
	// Err is why the try failed: an error matching ErrHeld when a lock was
	// held or waited for, or any other error of the call.
	Err error
	// Cause is why the records could not be confirmed gone: an error
	// matching ErrOutcomeUnknown (and ctx's error once ctx ended), or
	// ErrPermissionDenied.
	Cause error
}

func (e *LeftBehindError) Error() string {
	quoted := make([]string, len(e.Locks))
	for i, name := range e.Locks {
		quoted[i] = strconv.Quote(name)
	}
	return fmt.Sprintf("lease: %s; records not confirmed removed from %s (deleted in the background): %s",
		trimPrefix(e.Err), strings.Join(quoted, ", "), trimPrefix(e.Cause))
}

// Is reports whether target is ErrLeftBehind.
func (e *LeftBehindError) Is(target error) bool { return target == ErrLeftBehind }

// Unwrap returns Err and Cause.
func (e *LeftBehindError) Unwrap() []error { return []error{e.Err, e.Cause} }

// trimPrefix is err's text without its leading "lease: ".
func trimPrefix(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.TrimPrefix(err.Error(), "lease: ")
}

// opError is the error of a call on a lock, read as
// lease: <op> "<name>": <cause> with one "lease: " however deep the cause.
type opError struct {
	op, name string
	err      error
}

func (e *opError) Error() string {
	return fmt.Sprintf("lease: %s %q: %s", e.op, e.name, trimPrefix(e.err))
}

func (e *opError) Unwrap() error { return e.err }

func opErr(op, name string, err error) error { return &opError{op: op, name: name, err: err} }

// unknown is the cause of a call whose outcome is unknown.
func unknown(ctx context.Context, err error) error {
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, errors.Join(err, ctx.Err()))
}

// retryableError marks an error after which calling again may succeed.
type retryableError struct{ err error }

func (e *retryableError) Error() string        { return e.err.Error() }
func (e *retryableError) Unwrap() error        { return e.err }
func (e *retryableError) Is(target error) bool { return target == ErrRetryable }

// retryable marks err as matching ErrRetryable.
func retryable(err error) error {
	if err == nil || errors.Is(err, ErrRetryable) {
		return err
	}
	return &retryableError{err}
}

// permanent reports whether err is one that calling again cannot cure.
func permanent(err error) bool {
	for _, e := range []error{ErrClosed, ErrPermissionDenied, ErrInvalidName, ErrInvalidSet, ErrInvalidOption, ErrTTLTooShort, ErrHeld, ErrMismatch, ErrServerTooOld} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// NotHolderError is returned by the operator tools of package lease/admin
// (admin.Admin.ForceRelease, admin.Admin.RequestRelease) and by
// Election.RequestTransfer when the given fencing revision is not that of
// the lock's current holder. It matches ErrNotOwner when another
// acquisition holds the lock, and ErrNotFound when nobody does. Nothing
// was deleted or written.
type NotHolderError struct {
	// Lock is the lock's name.
	Lock string
	// Revision is the fencing revision the call was given.
	Revision int64
	// Holder is the current holder's fencing revision, 0 when the lock is
	// free.
	Holder int64
}

func (e *NotHolderError) Error() string {
	if e.Holder == 0 {
		return fmt.Sprintf("lease: force release %q fence %d: lock is free: %v", e.Lock, e.Revision, ErrNotFound)
	}
	return fmt.Sprintf("lease: force release %q fence %d: holder is fence %d: %v", e.Lock, e.Revision, e.Holder, ErrNotOwner)
}

// Is reports whether target is ErrNotOwner (the lock is held by another
// acquisition) or ErrNotFound (it is free).
func (e *NotHolderError) Is(target error) bool {
	if e.Holder == 0 {
		return target == ErrNotFound
	}
	return target == ErrNotOwner
}

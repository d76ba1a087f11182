package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/lease/internal/lifetime"
	"github.com/fencekit/fencekit/lease/internal/lockorder"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/owner"
)

// errNilLease is returned by the methods of a nil *Lease.
var errNilLease = errors.New("lease: nil *Lease")

// Lease is one held acquisition of a lock: the only way to renew, reenter
// or release it. Release and Reenter are each one etcd transaction that
// compares this acquisition's owner token and the record's last confirmed
// mod revision (which pins its creation revision); Renew reads the record
// and checks its owner token and creation revision. A holder that was
// superseded can never act on its successor's record.
//
// A Lease is safe for concurrent use; Renew, Reenter and Release are
// serialised. Its owner token never leaves it: String and logs show a digest.
type Lease struct {
	c        *Client
	name     string
	key      string
	owner    owner.Token
	kind     record.Kind
	rev      int64
	sess     *session
	acquired time.Time
	position int       // records that blocked it when it queued
	queued   time.Time // when the acquisition started
	rec      *entry    // the records table's entry of its record, taken over from the waiter

	asked releaseAsk // see ReleaseRequested

	opMu    lockorder.OpMutex // serialises Renew, Reenter and Release
	count   int               // hold count last confirmed in etcd; guarded by opMu
	modRev  int64             // the record's mod revision last confirmed; guarded by opMu
	pending []pendingCall     // calls whose outcome is unknown; guarded by opMu
	payload string            // the public value stored with the record (elections); guarded by opMu
	// holds and value are count and payload as the getters (Holds,
	// Term.Value) read them, without opMu, which is held across etcd round
	// trips. value is nil for an empty payload (every lease but a term
	// and one acquired WithMetadata).
	holds atomic.Int64
	value atomic.Pointer[string]

	fin   lifetime.End  // the lease's end: Err and Done
	bound boundContexts // the contexts Context made, cancelled by the end
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Names returns the lock's name as the one element of a slice, for
// Handle.
func (l *Lease) Names() []string { return []string{l.name} }

// Fence returns the fencing token of this acquisition: the lock's name and
// the creation revision of its record. Send it with every write to a
// resource the lock protects.
func (l *Lease) Fence() fence.Token { return fence.Token{Lock: l.name, Revision: l.rev} }

// Fences returns Fence as the one element of a slice, for Handle.
func (l *Lease) Fences() []fence.Token { return []fence.Token{l.Fence()} }

// OwnerDigest returns the digest of the owner token, as logs show it.
func (l *Lease) OwnerDigest() string { return l.owner.Digest() }

// Acquired returns when the lock was acquired.
func (l *Lease) Acquired() time.Time { return l.acquired }

// ValidUntil returns the lease's local validity deadline: when the last
// confirmed renewal of its session was sent, plus the TTL less the safety
// margin (WithSafetyMargin), on this process's clock. Until then no other
// acquisition can hold the lock, unless someone deletes the record or
// revokes the session (Done reports that within milliseconds). Each
// confirmed renewal, in the background every third of the TTL or by Renew,
// moves it forward; if none does, Done closes at the deadline with
// ErrDeadline. Work that must finish under the lock can check that it will
// end before ValidUntil. After the lease has ended it returns the zero Time.
func (l *Lease) ValidUntil() time.Time {
	if l.Err() != nil {
		return time.Time{}
	}
	return l.sess.until()
}

// GoString is String, so that %#v does not print the owner token.
func (l *Lease) GoString() string { return l.String() }

// String describes the lease without revealing its owner token.
func (l *Lease) String() string {
	if l == nil {
		return "lease(nil)"
	}
	return fmt.Sprintf("lease(%q fence=%d owner=%s)", l.name, l.rev, l.owner.Digest())
}

// Done returns a channel closed when the lease ends: released, lost, or its
// Client closed. Stop every side effect of the critical section when it
// closes; Err says why. When renewals stop being confirmed, Done closes a
// safety margin before the server could expire the session, so before any
// other client can acquire the lock.
func (l *Lease) Done() <-chan struct{} { return l.fin.Done() }

// Err returns nil while the lease is held. After Done closes it returns
// ErrReleased, ErrClosed, or a *LostError (matching ErrLost and its cause).
func (l *Lease) Err() error {
	if l == nil {
		return errNilLease
	}
	return l.fin.Err()
}

// Holds returns the hold count: 1 after Acquire, plus one per Reenter, minus
// one per Release. After a Reenter or Release whose outcome is unknown it
// is the count before that call, until a later call finds out.
func (l *Lease) Holds() int {
	return int(l.holds.Load())
}

// Metadata returns the metadata the acquisition stored with its record
// (WithMetadata), or "".
func (l *Lease) Metadata() string {
	p := l.value.Load()
	if p == nil {
		return ""
	}
	_, md := record.DecodePayload(*p)
	return md
}

// confirm records the hold count, payload and mod revision etcd confirmed.
// l.opMu is held (or l is not shared yet).
func (l *Lease) confirm(count int, payload string, modRev int64) {
	l.count, l.payload, l.modRev = count, payload, modRev
	l.holds.Store(int64(count))
	switch p := l.value.Load(); {
	case payload == "":
		l.value.Store(nil)
	case p == nil || *p != payload:
		l.value.Store(&payload)
	}
}

// Context returns a copy of parent that carries l (see FromContext) and its
// fencing token (see fence.FromContext, which guard.Transport and the gRPC
// client interceptors read), and is cancelled, with l.Err() as its cause,
// when the lease ends. Call the CancelFunc when the work is done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.bind(fence.NewContext(NewContext(parent, l), l.Fence()))
}

// bind returns a copy of ctx cancelled, with l's end as its cause, when l
// ends: by the end itself, before Done closes, so that work under the
// context has been told before anything that lets a successor in (a
// Transfer's transaction) is sent.
func (l *Lease) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	id, ok := l.bound.add(cancel)
	if !ok {
		cancel(l.fin.Err()) // ended already
		return ctx, func() { cancel(context.Canceled) }
	}
	return ctx, func() {
		l.bound.remove(id)
		cancel(context.Canceled)
	}
}

// boundContexts are the cancel functions of the contexts a Lease's
// Context made and not yet cancelled. A Lease's end cancels them itself,
// at once, rather than through context.AfterFunc, whose goroutine could
// run after the end's next step.
type boundContexts struct {
	mu    lockorder.BoundMutex
	next  uint64
	m     map[uint64]context.CancelCauseFunc
	ended bool
}

// add registers cancel, and reports false (registering nothing) when the
// lease has ended.
func (b *boundContexts) add(cancel context.CancelCauseFunc) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return 0, false
	}
	if b.m == nil {
		b.m = map[uint64]context.CancelCauseFunc{}
	}
	b.next++
	b.m[b.next] = cancel
	return b.next, true
}

func (b *boundContexts) remove(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, id)
}

// end cancels every registered context with cause, and every later one
// at once.
func (b *boundContexts) end(cause error) {
	b.mu.Lock()
	b.ended = true
	m := b.m
	b.m = nil
	b.mu.Unlock()
	for _, cancel := range m {
		cancel(cause)
	}
}

// end ends the lease with err, once.
func (l *Lease) end(err error) {
	if !l.fin.Begin(err) {
		return
	}
	// Count and log before Done closes, so that whoever wakes on Done
	// finds the metrics and logs already saying why.
	l.c.met.Hold.Observe(time.Since(l.acquired).Seconds())
	if errors.Is(err, ErrLost) {
		l.c.met.Losses.WithLabelValues(lossCause(err)).Inc()
		l.c.log.LogAttrs(context.Background(), slog.LevelWarn, "lease lost", append(l.attrs(),
			slog.String("cause", errors.Unwrap(err).Error()), slog.Duration("held", time.Since(l.acquired)))...)
	}
	// Contexts from Context are cancelled here, not by a goroutine: a
	// Transfer sends its transaction right after end returns.
	l.bound.end(err)
	l.fin.Finish()
	if l.rec.mark != nil && errors.Is(err, ErrLost) && l.sess.failure() == nil {
		// Not released: the lock waits out the delay (see WithLockDelay).
		l.c.bg.Spawn(l.expireMarker)
	}
}

// lostError is the Err of l lost for cause.
func (l *Lease) lostError(cause error) *LostError {
	e := &LostError{Lock: l.name, Cause: cause}
	if l.kind == record.Exclusive {
		e.Fence = l.Fence()
	}
	return e
}

// attrs are the fields every record about this lease carries, the same as
// the "lease acquired" record's, so records join on them.
func (l *Lease) attrs() []slog.Attr {
	return []slog.Attr{logattr.Lock(l.name), slog.String("owner", l.owner.Digest()), logattr.Fence(l.rev)}
}

type ctxKey struct{ name string }

// NewContext returns a copy of ctx carrying l, so that code called with ctx
// can reenter the lease explicitly through FromContext instead of
// acquiring the lock again (which would wait for itself).
func NewContext(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, ctxKey{l.name}, l)
}

// FromContext returns the lease for the lock called name carried by ctx.
func FromContext(ctx context.Context, name string) (*Lease, bool) {
	l, ok := ctx.Value(ctxKey{name}).(*Lease)
	return l, ok
}

// relState says whether a delete of a held lease's record may be its
// holder's own Release of the last hold. It is the records table's state,
// kept in the record's entry (entry.rel, entry.sawDelete) under the
// table's lock.
type relState uint8

const (
	relNone     relState = iota
	relInFlight          // such a Release waits for etcd's reply: the reply decides
	relPending           // such a Release returned with an unknown outcome: a delete is it
)

// lossCause is the losses metric's word for err, the cause of a loss.
func lossCause(err error) string {
	switch {
	case errors.Is(err, ErrKeyDeleted):
		return "deleted"
	case errors.Is(err, ErrKeyOverwritten):
		return "overwritten"
	case errors.Is(err, ErrSessionExpired):
		return "session"
	case errors.Is(err, ErrDeadline):
		return "deadline"
	case errors.Is(err, ErrNotOwner):
		return "not_owner"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrMaxHold):
		return "max_hold"
	}
	return "other"
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/record"
)

// Term is one leadership of an Election: a fenced Lease with a public
// value. It is safe for concurrent use.
type Term struct {
	l     *Lease
	since time.Time
}

// Name returns the election's name.
func (t *Term) Name() string { return t.l.name }

// Names returns the election's name as the one element of a slice, for
// Handle.
func (t *Term) Names() []string { return []string{t.l.name} }

// Fence returns the term's fencing token.
func (t *Term) Fence() fence.Token { return t.l.Fence() }

// Fences returns Fence as the one element of a slice, for Handle.
func (t *Term) Fences() []fence.Token { return []fence.Token{t.l.Fence()} }

// Acquired returns when the term began, by this process's clock: the time
// the term publishes (Leader.Since).
func (t *Term) Acquired() time.Time { return t.since }

// Since returns when the term began.
//
// Deprecated: Use Acquired, which every Handle has; Since is the same
// call.
func (t *Term) Since() time.Time { return t.since }

// ValidUntil returns the term's local validity deadline, as
// Lease.ValidUntil: no other candidate can lead before it unless someone
// deletes the record or revokes the session, and Done closes at it if no
// renewal moves it. After the term has ended it returns the zero Time.
func (t *Term) ValidUntil() time.Time { return t.l.ValidUntil() }

// Value returns the value the term publishes.
func (t *Term) Value() string {
	var payload string
	if p := t.l.value.Load(); p != nil {
		payload = *p
	}
	_, v := record.DecodePayload(payload)
	return v
}

// Proclaim publishes a new value for the rest of the term, in one
// transaction that compares the term's owner token. Errors are as for
// Lease.Release; after ErrOutcomeUnknown, call Proclaim again.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if t == nil {
		return errNilLease
	}
	if err := validValue(value); err != nil {
		return err
	}
	return t.l.traced(ctx, opProclaim, func(ctx context.Context) error {
		return t.l.change(ctx, opProclaim, record.EncodePayload(t.since, value))
	})
}

// Release ends the term (resigns): the next candidate leads. Results are
// as for Lease.Release. It does not act on a request to transfer
// (TransferRequested): call Transfer for that.
func (t *Term) Release(ctx context.Context) error {
	if t == nil {
		return errNilLease
	}
	return t.l.Release(ctx)
}

// Resign ends the term: the next candidate leads. Results are as for
// Lease.Release.
//
// Deprecated: Use Release, which every Handle has; Resign is the same
// call.
func (t *Term) Resign(ctx context.Context) error { return t.Release(ctx) }

// Renew confirms the term and extends its session, as Lease.Renew.
func (t *Term) Renew(ctx context.Context) error {
	if t == nil {
		return errNilLease
	}
	return t.l.Renew(ctx)
}

// Done returns a channel closed when the term ends: resigned, lost, or its
// Client closed.
func (t *Term) Done() <-chan struct{} { return t.l.Done() }

// Err returns nil while the term lasts, then ErrReleased (resigned),
// ErrTransferred (handed on by Transfer; it matches ErrReleased),
// ErrClosed or a *LostError.
func (t *Term) Err() error {
	if t == nil {
		return errNilLease
	}
	return t.l.Err()
}

// Context returns a copy of parent that carries the term's fencing token
// (see fence.FromContext) and is cancelled, with Err as its cause, when
// the term ends.
func (t *Term) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return t.l.bind(fence.NewContext(parent, t.l.Fence()))
}

// String describes the term without revealing its owner token.
func (t *Term) String() string {
	if t == nil {
		return "term(nil)"
	}
	return fmt.Sprintf("term(%q fence=%d owner=%s)", t.l.name, t.l.rev, t.l.owner.Digest())
}

// GoString is String, so that %#v does not print the owner token.
func (t *Term) GoString() string { return t.String() }

func validValue(v string) error {
	switch {
	case len(v) > MaxValueLen:
		return fmt.Errorf("lease: election value of %d bytes, longer than %d", len(v), MaxValueLen)
	case !utf8.ValidString(v):
		return errors.New("lease: election value not UTF-8")
	}
	return nil
}

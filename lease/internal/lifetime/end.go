// Package lifetime holds the lease package's two lifetime primitives: an
// End, the one end of something that ends once with a cause (a session,
// a waiter, a Lease), and a Group, a Client's background goroutines bound
// by its lifetime. They know nothing of leases. It is internal to the
// lease module.
package lifetime

import (
	"context"
	"sync/atomic"
)

// End is the end of something that ends once, with a cause: a
// session, a waiter, a Lease. Its ctx is cancelled with that cause. The
// cause is set (Begin) before ctx is cancelled (Finish), so that whoever
// wakes on Done finds it, and whatever the ender does in between (a Lease
// counts and logs its end) has happened too.
type End struct {
	cause  atomic.Pointer[error] // set once, by the first begin
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Init readies e; it has not ended.
func (e *End) Init() {
	e.ctx, e.cancel = context.WithCancelCause(context.Background())
}

// Begin sets the cause of the end, and reports whether this call did:
// only the first one does, and must call Finish.
func (e *End) Begin(cause error) bool {
	return e.cause.CompareAndSwap(nil, &cause)
}

// Finish cancels e's ctx with the cause Begin set.
func (e *End) Finish() {
	e.cancel(*e.cause.Load())
}

// End ends e with cause, unless it has ended, and reports whether this
// call ended it.
func (e *End) End(cause error) bool {
	if !e.Begin(cause) {
		return false
	}
	e.Finish()
	return true
}

// Err returns the cause of the end, or nil while e lasts.
func (e *End) Err() error {
	if p := e.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// Context is cancelled, with the cause, once e has ended and finished.
func (e *End) Context() context.Context { return e.ctx }

// Done is closed once e has ended and finished.
func (e *End) Done() <-chan struct{} { return e.ctx.Done() }

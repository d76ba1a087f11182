package lease

import (
	"context"
	"sync/atomic"
)

// endOnce is the end of something that ends once, with a cause: a
// session, a waiter, a Lease. Its ctx is cancelled with that cause. The
// cause is set (begin) before ctx is cancelled (finish), so that whoever
// wakes on Done finds it, and whatever the ender does in between (a Lease
// counts and logs its end) has happened too.
type endOnce struct {
	cause  atomic.Pointer[error] // set once, by the first begin
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// init readies e; it has not ended.
func (e *endOnce) init() {
	e.ctx, e.cancel = context.WithCancelCause(context.Background())
}

// begin sets the cause of the end, and reports whether this call did:
// only the first one does, and must call finish.
func (e *endOnce) begin(cause error) bool {
	return e.cause.CompareAndSwap(nil, &cause)
}

// finish cancels e's ctx with the cause begin set.
func (e *endOnce) finish() {
	e.cancel(*e.cause.Load())
}

// end ends e with cause, unless it has ended, and reports whether this
// call ended it.
func (e *endOnce) end(cause error) bool {
	if !e.begin(cause) {
		return false
	}
	e.finish()
	return true
}

// err returns the cause of the end, or nil while e lasts.
func (e *endOnce) err() error {
	if p := e.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// done is closed once e has ended and finished.
func (e *endOnce) done() <-chan struct{} { return e.ctx.Done() }

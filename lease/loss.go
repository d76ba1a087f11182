package lease

import "errors"

// lose ends the lease because a call found it no longer owns its record.
func (l *Lease) lose(cause error) {
	l.c.recs.forget(l, errors.Is(cause, ErrNotFound))
	l.end(l.lostError(cause))
}

// released ends the lease because its record is gone at its holder's
// request.
func (l *Lease) released() {
	l.c.recs.forget(l, true)
	l.end(ErrReleased)
}

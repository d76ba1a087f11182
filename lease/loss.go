package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// relState says whether a delete of a held lease's record may be its
// holder's own Release of the last hold.
type relState uint8

const (
	relNone     relState = iota
	relInFlight          // such a Release waits for etcd's reply: the reply decides
	relPending           // such a Release returned with an unknown outcome: a delete is it
)

// release is what the watch must know of its holder's own Release of the
// last hold. It has its own lock; the watch consults it under Client.mu.
type release struct {
	mu        sync.Mutex
	state     relState
	sawDelete bool // the watch saw the record deleted while a Release was in flight
}

// set sets the state, and reports (forgetting it) whether the watch saw
// the record deleted since the last set.
func (r *release) set(st relState) (sawDelete bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = st
	sawDelete, r.sawDelete = r.sawDelete, false
	return sawDelete
}

// clear forgets any Release: the lease is no longer held. What the watch
// saw stays for the Release in flight, if any, to read.
func (r *release) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = relNone
}

// get returns the state.
func (r *release) get() relState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// recordGone returns the state when the watch finds the record gone, and
// notes the delete for a Release in flight, whose reply decides.
func (r *release) recordGone() relState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == relInFlight {
		r.sawDelete = true
	}
	return r.state
}

// startRelease marks l's Release of its last hold as in flight and reports
// whether the Client still tracks l's record. When it does not, the record
// was already seen gone or the lease has ended: a delete of it cannot be
// this Release's, and an unknown outcome must not be taken for one.
func (c *Client) startRelease(l *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[l.key] != l {
		return false
	}
	l.rel.set(relInFlight)
	return true
}

// recordGoneLocked handles a held lease whose record is gone, and returns
// what to run once c.mu is released (or nil). A delete while its last-hold
// Release is in flight is left to that Release to judge; a delete after it
// returned with an unknown outcome is that Release taking effect; any
// other delete is a loss. c.mu is held.
func (c *Client) recordGoneLocked(l *Lease) func() {
	switch l.rel.recordGone() {
	case relInFlight:
		return nil
	case relPending:
		c.finishLocked(l, true)
		return func() { l.end(ErrReleased) }
	}
	c.finishLocked(l, true)
	c.recordDeletedLocked(l)
	return nil
}

// recordDeletedLocked handles the deletion of a held lease's record by someone
// other than its holder: it asks etcd whether the session is gone, so that
// a revoked or expired session is reported as ErrSessionExpired (its
// records go first, the session's end is seen later) and a deleted record
// as ErrKeyDeleted. l is no longer in c.held. c.mu is held, and the
// Client is not closed.
func (c *Client) recordDeletedLocked(l *Lease) {
	s := l.sess
	if !s.noteDeleted(l) {
		return // a check is under way
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, min(s.ttl/4, time.Second))
		resp, err := c.etcd.TimeToLive(ctx, s.id)
		cancel()
		gone := errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && resp.TTL < 0)
		ls := s.takeDeleted()
		cause := ErrKeyDeleted
		if gone {
			cause = ErrSessionExpired
			c.endSession(s, ErrSessionExpired)
		}
		for _, l := range ls {
			l.end(l.lostError(cause))
		}
	}()
}

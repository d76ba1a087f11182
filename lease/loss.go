package lease

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// recordGoneLocked handles a held lease whose record is gone, and returns
// what to run once c.mu is released (or nil). A delete while its last-hold
// Release is in flight is left to that Release to judge; a delete after it
// returned with an unknown outcome is that Release taking effect; any
// other delete is a loss. c.mu is held.
func (c *Client) recordGoneLocked(l *Lease) func() {
	switch l.releasing {
	case relInFlight:
		l.sawDelete = true
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
	s.deleted = append(s.deleted, l)
	if s.checking {
		return
	}
	s.checking = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, min(s.ttl/4, time.Second))
		resp, err := c.etcd.TimeToLive(ctx, s.id)
		cancel()
		gone := errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && resp.TTL < 0)
		c.mu.Lock()
		ls := s.deleted
		s.deleted, s.checking = nil, false
		c.mu.Unlock()
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

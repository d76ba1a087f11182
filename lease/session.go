package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// errRetired ends a tainted session that nothing uses any more.
var errRetired = errors.New("lease: session retired")

// session returns the Client's current session, granting one if there is
// none or the current one is tainted.
func (c *Client) session(ctx context.Context) (*session, error) {
	if s, err := c.liveSession(); s != nil || err != nil {
		return s, err
	}
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if s, err := c.liveSession(); s != nil || err != nil {
		return s, err
	}
	if err := c.checkServers(ctx); err != nil {
		return nil, err
	}
	sent := time.Now()
	resp, err := c.etcd.Grant(ctx, int64(c.cfg.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("lease: grant session: %w", errors.Join(rpcError(err), ctx.Err()))
	}
	ttl := time.Duration(resp.TTL) * time.Second
	if ttl != c.cfg.ttl {
		// etcd raises a TTL below its minimum without saying so; a holder
		// would then block others longer than configured.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		_, _ = c.etcd.Revoke(rctx, resp.ID)
		cancel()
		return nil, fmt.Errorf("%w: asked for %v, etcd granted %v, its minimum (1.5 election timeouts): "+
			"use lease.WithTTL(%v) or more, or run etcd with a shorter --election-timeout", ErrTTLTooShort, c.cfg.ttl, ttl, ttl)
	}
	margin := min(c.cfg.margin, ttl/2)
	ended, end := context.WithCancel(context.Background())
	s := &session{
		id:         resp.ID,
		keyID:      fmt.Sprintf("%016x-", int64(resp.ID)),
		ttl:        ttl,
		margin:     margin,
		done:       make(chan struct{}),
		ended:      ended,
		end:        end,
		validUntil: sent.Add(ttl - margin),
		slots:      map[string]struct{}{},
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = c.revoke(s)
		return nil, ErrClosed
	}
	old := c.sess
	c.sess = s
	c.sessions[s] = struct{}{}
	s.armDeadline(func() { c.onDeadline(s) })
	c.wg.Add(1)
	if old != nil {
		c.retireIfIdleLocked(old)
	}
	c.mu.Unlock()
	go c.keepAlive(s)
	c.log.Debug("lease session granted", slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.Duration("ttl", ttl))
	return s, nil
}

// liveSession returns the current session if it is usable for a new
// acquisition, nil if a new one must be granted.
func (c *Client) liveSession() (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.sess != nil && c.sess.isTainted() {
		return nil, nil
	}
	return c.sess, nil
}

// revoke revokes s, bounded by the TTL.
func (c *Client) revoke(s *session) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	_, err := c.etcd.Revoke(ctx, s.id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("lease: revoke session: %w", err)
	}
	return nil
}

// retireIfIdleLocked ends and revokes s, in the background, if it is
// tainted and nothing held or waiting uses it. c.mu is held.
func (c *Client) retireIfIdleLocked(s *session) {
	if c.closed || !s.retirable() {
		return
	}
	for _, l := range c.held {
		if l.sess == s {
			return
		}
	}
	for _, w := range c.waiters {
		if w.sess == s {
			return
		}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if c.endSession(s, errRetired) {
			if err := c.revoke(s); err != nil {
				c.log.Warn("lease retired session revoke failed; it expires within its TTL",
					slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.String("error", err.Error()))
			}
		}
	}()
}

// keepAlive renews s every third of its TTL and extends its validity from
// the time each renewal was sent, until s ends.
func (c *Client) keepAlive(s *session) {
	defer c.wg.Done()
	interval := s.ttl / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.done:
			return
		case <-c.ctx.Done():
			return
		}
		until := s.until()
		sent := time.Now()
		if floor := sent.Add(interval); until.Before(floor) {
			until = floor
		}
		ctx, cancel := context.WithDeadline(c.ctx, c.renewalDeadline(sent, until, interval))
		resp, err := c.etcd.KeepAliveOnce(ctx, s.id)
		cancel()
		if err == nil {
			observeLatency(&c.renewLatency, time.Since(sent))
		}
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			c.endSession(s, ErrSessionExpired)
			return
		case errors.Is(rpcError(err), ErrPermissionDenied):
			// etcd refuses to renew a lease when the user may not write
			// every key attached to it; the session is as good as gone.
			c.endSession(s, fmt.Errorf("%w: renewal refused: %w", ErrSessionExpired, rpcError(err)))
			return
		case err != nil && c.etcdClosed():
			// The etcd client was closed under the Client: nothing can be
			// renewed or revoked any more.
			c.log.Error("lease session ended: the etcd client was closed before the lease.Client; close the lease.Client first")
			c.endSession(s, ErrEtcdClosed)
			return
		case err != nil:
			if c.ctx.Err() != nil {
				return
			}
			c.log.Warn("lease session renewal failed", slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.String("error", err.Error()))
			t.Reset(max(interval/4, 20*time.Millisecond))
		default:
			s.extend(sent.Add(time.Duration(resp.TTL)*time.Second - s.margin))
			t.Reset(interval)
		}
		c.deleteOrphans(s)
		c.mu.Lock()
		c.sweepLocked(false)
		c.mu.Unlock()
	}
}

// renewalDeadline is when a renewal sent at sent stops waiting for its
// reply. A follower forwards a renewal to the leader it knows and, if that
// leader is stalled (a frozen process or VM), answers only at etcd's
// request timeout (7 s by default), even once a new leader is elected: so
// while there is time for another, a renewal waits at most a third of the
// renewal interval (or four times the recent reply time, at least 250 ms)
// and is then sent again, to the client's next endpoint; the last one
// before the validity deadline waits until it.
func (c *Client) renewalDeadline(sent, until time.Time, interval time.Duration) time.Time {
	d := max(interval/3, 4*time.Duration(c.renewLatency.Load()), minTryDeadline)
	if until.Sub(sent) > 2*d+max(interval/4, 20*time.Millisecond) {
		return sent.Add(d)
	}
	return until
}

// onDeadline runs when s's validity timer fires: it ends s unless a renewal
// moved the deadline meanwhile, in which case it re-arms the timer.
func (c *Client) onDeadline(s *session) {
	if !s.pastDeadline() || !c.endSession(s, ErrDeadline) {
		return
	}
	// The server may still hold the session; give up its records now rather
	// than when it expires, so the next holder does not wait for the TTL.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed { // Close revokes it
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := c.revoke(s); err != nil {
			c.log.Warn("lease session revoke after deadline failed", slog.String("error", err.Error()))
		}
	}()
}

// endSession ends s with cause and every lease attached to it, and reports
// whether this call ended it. Waiters on s notice through s.done.
func (c *Client) endSession(s *session, cause error) bool {
	c.mu.Lock()
	if !s.finish(cause) {
		c.mu.Unlock()
		return false
	}
	if c.sess == s {
		c.sess = nil
	}
	delete(c.sessions, s)
	var lost, released []*Lease
	for k, l := range c.held {
		if l.sess != s {
			continue
		}
		delete(c.held, k)
		if !errors.Is(cause, ErrClosed) && l.rel.get() == relPending {
			// Its holder asked for it to go (its Release's outcome is
			// unknown), and the session's end takes it: released.
			released = append(released, l)
		} else {
			lost = append(lost, l)
		}
	}
	for k, o := range c.orphans {
		if o.sess == s {
			delete(c.orphans, k) // the record dies with the session
		}
	}
	c.mu.Unlock()
	for _, l := range released {
		l.end(ErrReleased)
	}
	for _, l := range lost {
		if errors.Is(cause, ErrClosed) {
			l.end(cause)
		} else {
			l.end(l.lostError(cause))
		}
	}
	if !errors.Is(cause, ErrClosed) && cause != errRetired {
		c.log.Warn("lease session ended", slog.String("session", strconv.FormatInt(int64(s.id), 16)),
			slog.String("cause", cause.Error()), slog.Int("leases_lost", len(lost)))
	}
	return true
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/lease/internal/lockorder"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/lease/internal/resend"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sessionSet is a Client's session lifecycle: the session new
// acquisitions use, one per TTL, every session not yet ended, and whether
// the Client is closed.
type sessionSet struct {
	grant   lockorder.GrantMutex // serialises session creation
	checked map[string]struct{}  // endpoints whose version was checked; guarded by grant
	// bound is the number of records a session takes (maxSessionRecords;
	// tests lower it before the first acquisition).
	bound int
	// idleAfter is how long a session of another TTL than the Client's is
	// kept without records (maxSessionIdle; tests lower it before the
	// first acquisition).
	idleAfter time.Duration
	// fixedMargin: the Client's safety margin was set (WithSafetyMargin),
	// so every session uses it; otherwise a session whose TTL is not the
	// Client's gets the default margin of its own TTL.
	fixedMargin bool

	mu     lockorder.SessionsMutex // guards the fields below
	closed bool
	cur    map[time.Duration]*session // per TTL, the session new acquisitions use
	live   map[*session]struct{}      // every session not yet ended
}

// close marks the set closed and returns its live sessions; ok is false
// if it was closed already.
func (ss *sessionSet) close() (live []*session, ok bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, false
	}
	ss.closed = true
	for s := range ss.live {
		live = append(live, s)
	}
	return live, true
}

// remove forgets s, which ended.
func (ss *sessionSet) remove(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.cur[s.ttl] == s {
		delete(ss.cur, s.ttl)
	}
	delete(ss.live, s)
}

// session returns a session of TTL ttl on which the Client claimed the
// record keys of reqs (see session.claimSlots): the current session of
// that TTL, or a new one granted when there is none or the current one is
// tainted, full, or has no room for them.
func (c *Client) session(ctx context.Context, ttl time.Duration, reqs []slotReq) (*session, []string, error) {
	for {
		s, err := c.liveSession(ttl)
		if err != nil {
			return nil, nil, err
		}
		if s == nil {
			if s, err = c.grantSession(ctx, ttl); err != nil {
				return nil, nil, err
			}
		}
		if keys, ok := s.claimSlots(reqs); ok {
			return s, keys, nil
		}
		// Full or tainted since: the next round grants another.
	}
}

// grantSession returns the current session of TTL ttl if it is usable,
// or grants one and makes it current.
func (c *Client) grantSession(ctx context.Context, ttl time.Duration) (*session, error) {
	c.sessions.grant.Lock()
	defer c.sessions.grant.Unlock()
	if s, err := c.liveSession(ttl); s != nil || err != nil {
		return s, err
	}
	margin, err := c.marginFor(ttl)
	if err != nil {
		return nil, err
	}
	if err := c.checkServers(ctx); err != nil {
		return nil, err
	}
	sent := time.Now()
	resp, err := c.etcd.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("lease: grant session: %w", errors.Join(record.RPCError(err), ctx.Err()))
	}
	if got := time.Duration(resp.TTL) * time.Second; got != ttl {
		// etcd raises a TTL below its minimum without saying so; a holder
		// would then block others longer than configured.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), got)
		_, _ = c.etcd.Revoke(rctx, resp.ID)
		cancel()
		return nil, fmt.Errorf("%w: asked for %v, etcd granted %v, its minimum (1.5 election timeouts): "+
			"use a TTL of %v or more, or run etcd with a shorter --election-timeout", ErrTTLTooShort, ttl, got, got)
	}
	s := &session{
		id:         resp.ID,
		keyID:      fmt.Sprintf("%016x-", int64(resp.ID)),
		ttl:        ttl,
		margin:     margin,
		validUntil: sent.Add(ttl - margin),
		slots:      map[string]struct{}{},
		bound:      c.sessions.bound,
	}
	s.fin.Init()
	ss := &c.sessions
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		_ = c.revoke(s)
		return nil, ErrClosed
	}
	old := ss.cur[ttl]
	ss.cur[ttl] = s
	ss.live[s] = struct{}{}
	s.armDeadline(func() { c.onDeadline(s) })
	c.bg.Spawn(func() { c.keepAlive(s) })
	c.bg.Spawn(func() { c.watchAsks(s, resp.ResponseHeader.Revision+1) })
	ss.mu.Unlock()
	if old != nil {
		c.recs.retireIfIdle(old)
	}
	c.log.Debug("lease session granted", slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.Duration("ttl", ttl))
	return s, nil
}

// idleRenewals is how many renewals in a row, interval apart, must find
// a session of another TTL than the Client's without records before it is
// retired: idleAfter's worth, and at least three.
func (ss *sessionSet) idleRenewals(interval time.Duration) int {
	return max(3, int((ss.idleAfter+interval-1)/interval))
}

// marginFor returns the safety margin of a session of TTL ttl: the
// Client's (see WithSafetyMargin) for its own TTL, or when it was set;
// otherwise the default, a tenth of ttl and at least 50 ms. A margin that
// is not less than half of ttl is a *TTLError.
func (c *Client) marginFor(ttl time.Duration) (time.Duration, error) {
	margin := c.cfg.margin
	if ttl != c.cfg.ttl && !c.sessions.fixedMargin {
		margin = max(ttl/10, 50*time.Millisecond)
	}
	if margin*2 >= ttl {
		return 0, &TTLError{TTL: ttl, Reason: fmt.Sprintf("not more than twice the safety margin %v", margin)}
	}
	return margin, nil
}

// liveSession returns the current session of TTL ttl if it is usable for
// a new acquisition, nil if a new one must be granted.
func (c *Client) liveSession(ttl time.Duration) (*session, error) {
	ss := &c.sessions
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, ErrClosed
	}
	// An ended session stays current until endSession removes it, after
	// the records table dropped it: an acquisition that picked it then
	// would only fail with errRetired, again and again while the window
	// lasts.
	s := ss.cur[ttl]
	if s != nil && (s.closedToNew() || s.failure() != nil) {
		return nil, nil
	}
	return s, nil
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

// retire ends and revokes s, tainted or full and unused (see
// records.retireUnused), in the background.
func (c *Client) retire(s *session) {
	c.bg.Spawn(func() {
		if c.endSession(s, errRetired) {
			if err := c.revoke(s); err != nil {
				c.log.Warn("lease retired session revoke failed; it expires within its TTL",
					slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.String("error", err.Error()))
			}
		}
	})
}

// checkGone asks etcd, in the background, whether s is gone, after the
// watch saw records of s deleted (see session.noteDeleted): a revoked or
// expired session is reported as ErrSessionExpired (its records go first,
// its end is seen later), a deleted record as ErrKeyDeleted.
func (c *Client) checkGone(s *session) {
	c.bg.Spawn(func() {
		ctx, cancel := context.WithTimeout(c.bg.Context(), min(s.ttl/4, time.Second))
		resp, err := c.etcd.TimeToLive(ctx, s.id)
		cancel()
		gone := errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && resp.TTL < 0)
		ls := s.takeDeleted()
		var cause error = ErrKeyDeleted
		if gone {
			cause = goneCause(s)
			c.endSession(s, cause)
		}
		for _, l := range ls {
			l.end(l.lostError(cause))
		}
	})
}

// keepAlive renews s every third of its TTL and extends its validity from
// the time each renewal was sent, until s ends.
func (c *Client) keepAlive(s *session) {
	interval := s.ttl / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.fin.Done():
			return
		case <-c.bg.Context().Done():
			return
		}
		until := s.until()
		sent := time.Now()
		if floor := sent.Add(interval); until.Before(floor) {
			until = floor
		}
		ctx, cancel := context.WithDeadline(c.bg.Context(), c.renewalDeadline(sent, until, interval))
		// The lock-delay leases first: the session is renewed only once
		// they are, so that each outlasts it by its delay.
		err := c.renewShadows(ctx, s)
		var resp *clientv3.LeaseKeepAliveResponse
		if err == nil {
			resp, err = c.etcd.KeepAliveOnce(ctx, s.id)
		}
		cancel()
		if err == nil {
			c.renewed(time.Since(sent))
		}
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			c.endSession(s, goneCause(s))
			return
		case errors.Is(record.RPCError(err), ErrPermissionDenied):
			// etcd refuses to renew a lease when the user may not write
			// every key attached to it; the session is as good as gone.
			c.endSession(s, fmt.Errorf("%w: renewal refused: %w", ErrSessionExpired, record.RPCError(err)))
			return
		case err != nil && c.etcdClosed():
			// The etcd client was closed under the Client: nothing can be
			// renewed or revoked any more.
			c.log.Error("lease session ended: the etcd client was closed before the lease.Client; close the lease.Client first")
			c.endSession(s, ErrEtcdClosed)
			return
		case err != nil:
			if c.bg.Context().Err() != nil {
				return
			}
			c.log.Warn("lease session renewal failed", slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.String("error", err.Error()))
			t.Reset(max(interval/4, 20*time.Millisecond))
		default:
			c.confirmed(s, sent, resp, interval)
			t.Reset(interval)
		}
		c.recs.deleteOrphans(s)
		c.recs.sweep()
	}
}

// confirmed takes in a renewal of s sent at sent and confirmed by resp:
// s's validity moves to the TTL less the margin after sent, and a session
// of another TTL than the Client's that has been idle too long retires.
func (c *Client) confirmed(s *session, sent time.Time, resp *clientv3.LeaseKeepAliveResponse, interval time.Duration) {
	s.extend(sent.Add(time.Duration(resp.TTL)*time.Second - s.margin))
	c.log.Debug("lease session renewed", slog.String("session", strconv.FormatInt(int64(s.id), 16)),
		slog.Time("sent", sent), slog.Time("valid_until", s.until()),
		slog.String("member", strconv.FormatUint(resp.MemberId, 16)), slog.Uint64("raft_term", resp.RaftTerm))
	if s.ttl != c.cfg.ttl && s.idleRenewal(c.sessions.idleRenewals(interval)) {
		c.recs.retireIfIdle(s)
	}
}

// goneCause is why s ended when etcd no longer has its lease:
// ErrRevokedEarly while the TTL of its last confirmed renewal has not run
// out (etcd expires a lease no sooner than that TTL after the renewal was
// sent, and s's validity deadline is earlier still, by the margin), else
// ErrSessionExpired.
func goneCause(s *session) error {
	if time.Now().Before(s.until()) {
		return ErrRevokedEarly
	}
	return ErrSessionExpired
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
	d := max(interval/3, 4*time.Duration(c.lat.renew.Load()), resend.MinTryDeadline)
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
	ss := &c.sessions
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed { // Close revokes it
		return
	}
	c.bg.Spawn(func() {
		if err := c.revoke(s); err != nil {
			c.log.Warn("lease session revoke after deadline failed", slog.String("error", err.Error()))
		}
	})
}

// endSession ends s with cause and every lease attached to it, and reports
// whether this call ended it. Waiters on s notice through s.fin.
//
// s ends (finish) under the records table's lock, the lock under which
// the table promotes a waiter after checking its session and judges watch
// events: none of them misses the end.
func (c *Client) endSession(s *session, cause error) bool {
	lost, ended := c.recs.dropSession(s, cause)
	if !ended {
		return false
	}
	c.sessions.remove(s)
	if cause == ErrRevokedEarly {
		c.met.RevokedEarly.Inc()
	}
	if !errors.Is(cause, ErrClosed) && cause != errRetired {
		c.log.Warn("lease session ended", slog.String("session", strconv.FormatInt(int64(s.id), 16)),
			slog.String("cause", cause.Error()), slog.Int("leases_lost", lost))
	}
	return true
}

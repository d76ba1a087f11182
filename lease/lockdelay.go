package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/lease/internal/record"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxLockDelay is the longest lock-delay WithLockDelay accepts, as in
// Chubby and Consul: a delay is a safety net for late writes, not a way to
// keep a lock out of use.
const MaxLockDelay = time.Minute

// WithLockDelay makes the lock wait d before it admits the next holder
// when this acquisition's record disappears without a clean Release: its
// session expired or was revoked (the holder crashed, was partitioned or
// paused), its record was deleted (admin.Admin.ForceRelease, "fencekit release
// --fence") or it reached WithMaxHold. A Release hands over at once. It
// is for resources that cannot check fencing tokens: a late write of a
// vanished holder lands before the next holder starts, if it lands within
// d.
//
// The delay is kept in etcd, not in configuration, so every participant
// honours it: Clients that did not pass the option, waiters queued behind,
// and acquirers that arrive after the holder vanished. With the record the
// acquisition writes a lock-delay marker in the lock's directory, in the
// same transaction, so that it queues at the record's place; the marker is
// attached to a second etcd lease of the session whose TTL is the
// session's TTL plus d plus one second, renewed together with (just before)
// the session. When the session expires, the record goes at once and the
// marker d to d + 1 s later. ForceRelease reads the marker in the
// transaction that deletes the record and then moves it to a lease of
// d + 1 s (a put keeps its creation revision, so its place); a Client
// whose lease ends otherwise while its session lives (its record deleted
// or overwritten, WithMaxHold) does the same. Until the marker goes the
// lock is delayed (admin.Admin.Inspect: LockState.DelayedUntil; "fencekit status":
// "lock-delay until"). The next holder thus starts at least d after the
// record vanished, provided etcd applies each session renewal within a
// second of the lock-delay lease's renewal sent just before it; and
// usually at most d + 1 s plus etcd's lease-expiry lag after (up to the
// TTL + d + 1 s when a Client revokes or closes its session, or a
// ForceRelease could not move the marker).
//
// d rounds up to whole seconds and must be positive and at most
// MaxLockDelay, or the acquisition fails with ErrInvalidOption before
// anything is written. It costs, per session and distinct d, one etcd lease
// granted on first use and renewed with the session (the session is
// renewed only once its lock-delay leases are), plus the marker's put in
// the record's transaction and its delete in the Release's: no extra
// request per acquisition. A waiter that dies while it waits leaves its
// marker too, so those behind it wait d after its record goes.
// A Client's Close ends its leases without releasing them: release first
// for a hand-over without delay.
func WithLockDelay(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(r *request) error {
		if err := ValidateLockDelay(d); err != nil {
			return err
		}
		r.lockDelay = record.RoundUpSeconds(d)
		return nil
	})
}

// ValidateLockDelay returns nil for a delay WithLockDelay accepts: more
// than 0 and at most MaxLockDelay; otherwise an error matching
// ErrInvalidOption.
func ValidateLockDelay(d time.Duration) error {
	if d <= 0 || d > MaxLockDelay {
		return fmt.Errorf("%w: lock-delay %v is not in (0, %v]", ErrInvalidOption, d, MaxLockDelay)
	}
	return nil
}

// newMark returns the marker of the record at key, of delay d, on the
// session's lock-delay lease for d (granted now if it has none).
func (c *Client) newMark(ctx context.Context, s *session, key string, d time.Duration) (*record.Mark, error) {
	id, err := c.shadowFor(ctx, s, d)
	if err != nil {
		return nil, err
	}
	return &record.Mark{Key: key + record.MarkerSep + s.nextMarker(), Value: record.MarkerValue(d), Delay: d, Shadow: id}, nil
}

// shadowFor returns s's lock-delay lease for d, granting it on first use.
func (c *Client) shadowFor(ctx context.Context, s *session, d time.Duration) (clientv3.LeaseID, error) {
	if id, ok := s.shadow(d); ok {
		return id, nil
	}
	resp, err := c.etcd.Grant(ctx, int64((s.ttl+d+record.DelaySlack)/time.Second))
	if err != nil {
		return 0, fmt.Errorf("lease: grant lock-delay lease: %w", errors.Join(record.RPCError(err), ctx.Err()))
	}
	id, kept := s.addShadow(d, resp.ID)
	if !kept {
		// Another acquisition granted one first, or s ended: nothing is
		// attached to this one.
		c.bg.Spawn(func() { c.revokeLease(resp.ID, s.ttl) })
	}
	return id, nil
}

// revokeLease revokes an etcd lease of the Client's, bounded by ttl; a
// lease it fails to revoke expires by itself.
func (c *Client) revokeLease(id clientv3.LeaseID, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(c.bg.Context(), ttl)
	defer cancel()
	_, _ = c.etcd.Revoke(ctx, id)
}

// renewShadows renews s's lock-delay leases, before s itself (see
// keepAlive), so that each outlasts the session by its delay. A
// lock-delay lease that no longer exists (revoked by hand) is forgotten:
// its markers went with it. It returns the first other error.
func (c *Client) renewShadows(ctx context.Context, s *session) error {
	for d, id := range s.shadowList() {
		_, err := c.etcd.KeepAliveOnce(ctx, id)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.dropShadow(d, id)
			c.log.Warn("lease lock-delay lease gone; the markers on it went with it",
				slog.String("session", strconv.FormatInt(int64(s.id), 16)), slog.Duration("delay", d))
		case err != nil:
			return err
		}
	}
	return nil
}

// expireMarker starts the countdown of l's lock-delay marker, once l has
// ended otherwise than by a Release while its session lives: the marker
// moves, if it is still on the session's lock-delay lease, to a new lease
// of its delay (plus record.DelaySlack), keeping its place in the queue. A
// session that ends meanwhile leaves the marker on its lock-delay lease,
// which expires by itself at least the delay later.
func (l *Lease) expireMarker() {
	c, m := l.c, l.rec.mark
	for attempt := 0; ; attempt++ {
		if l.sess.failure() != nil || c.bg.Context().Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(c.bg.Context(), l.sess.ttl)
		discard := func(id clientv3.LeaseID, ttl time.Duration) { c.bg.Spawn(func() { c.revokeLease(id, ttl) }) }
		err := record.MoveMarker(ctx, c.etcd, m, discard)
		cancel()
		if err == nil {
			return
		}
		if attempt == 0 {
			c.log.Warn("lease lock-delay marker not moved; trying again", logattr.Lock(l.name), logattr.Fence(l.rev),
				slog.String("error", err.Error()))
		}
		if !c.bg.Sleep(100 * time.Millisecond) {
			return
		}
	}
}

// delayEnd returns about when the lock-delay of the marker kv, whose
// record is gone, ends: now plus the TTL etcd reports for its lease (as
// admin.LockState.DelayedUntil), or, if that cannot be read, now plus
// its delay and record.DelaySlack, the longest its countdown lasts once started.
func (c *Client) delayEnd(ctx context.Context, kv *mvccpb.KeyValue) time.Time {
	now := time.Now()
	ttl, err := record.SessionTTL(ctx, c.etcd, kv.Lease)
	if err != nil {
		d, _ := record.MarkerDelay(kv.Value)
		return now.Add(record.RoundUpSeconds(d + record.DelaySlack))
	}
	return now.Add(max(ttl, 0))
}

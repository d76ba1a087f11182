// Package resend paces the tries of an etcd request whose replies are
// lost (Pacer), and keeps the moving average of reply times that sets
// their deadlines. It knows nothing of leases: the lease package's
// Release, Reenter, Proclaim, renewals and cleanups are its callers, and
// what a try compares is theirs. It is internal to the lease module.
package resend

import (
	"context"
	"sync/atomic"
	"time"
)

// The first try's deadline is four times the recent reply time, within
// these bounds; the pause between tries grows to maxResendPause.
const (
	// MinTryDeadline is the shortest a try waits for its reply.
	MinTryDeadline = 250 * time.Millisecond
	maxTryDeadline = 2 * time.Second
	maxResendPause = 200 * time.Millisecond
)

// Pacer paces the tries of one Release, Reenter or Proclaim whose
// replies are lost. When the etcd leader dies, a request that a follower
// forwarded to it is lost, and the follower answers only at etcd's request
// timeout (5 s plus two election timeouts, 7 s by default), long after a
// new leader could have applied it. So each try gets a deadline of its own:
// four times the Client's recent reply time, at least 250 ms (far above a
// healthy cluster's commit latency) and at most 2 s, growing by a quarter
// with each try, so that a cluster that is merely slow still answers one.
// A try that fails fast (its endpoint is down, or no leader is elected yet)
// is sent again after a short pause, growing to 200 ms. The client's
// balancer sends each try to its next healthy endpoint. Tries go on for at
// most one TTL in all, and never past the caller's ctx.
//
// A try in flight when the new leader takes over may still be lost, so the
// lock waits for the election plus at most the deadline of that try (about
// half a second, two seconds in), instead of etcd's request timeout.
//
// Resending is the caller's own retry, done sooner: every try compares the
// record as last confirmed, so at most one applies, and the next try finds
// out which (see the lease package's pendingCall).
type Pacer struct {
	start  time.Time     // of the first try
	budget time.Duration // no try starts later than this after start
	next   time.Duration // the next try's deadline
	pause  time.Duration // before a try that follows a fast failure
	sent   time.Time     // when the last try started
	last   time.Duration // its deadline
}

// New returns the Pacer of a call whose tries may go on for ttl, with the
// recent reply time at latency (see ObserveLatency).
func New(ttl time.Duration, latency *atomic.Int64) *Pacer {
	return &Pacer{
		start:  time.Now(),
		budget: ttl,
		next:   min(max(4*time.Duration(latency.Load()), MinTryDeadline), maxTryDeadline),
		pause:  10 * time.Millisecond,
	}
}

// ObserveLatency folds the reply time d into the moving average at avg
// (an eighth of each new reply).
func ObserveLatency(avg *atomic.Int64, d time.Duration) {
	for {
		old := avg.Load()
		next := old + (int64(d)-old)/8
		if old == 0 {
			next = int64(d)
		}
		if avg.CompareAndSwap(old, next) {
			return
		}
	}
}

// Deadline starts a try and returns how long it may wait for its reply.
func (r *Pacer) Deadline() time.Duration {
	r.sent, r.last = time.Now(), r.next
	r.next += r.next / 4
	return r.last
}

// Again reports whether to send another try after one whose outcome is
// unknown, pausing first when that try failed fast. It does not once ctx
// or stop (the caller's owner's lifetime) has ended, or the time for tries
// is up.
func (r *Pacer) Again(ctx, stop context.Context) bool {
	if ctx.Err() != nil || stop.Err() != nil {
		return false
	}
	var wait time.Duration
	if time.Since(r.sent) < r.last {
		wait = r.pause
		r.pause = min(2*r.pause, maxResendPause)
	}
	if time.Since(r.start)+wait >= r.budget {
		return false
	}
	if wait == 0 {
		return true
	}
	return Sleep(ctx, stop.Done(), wait)
}

// Sleep waits d and reports true, or false as soon as ctx ends or stop
// (nil: never) closes.
func Sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

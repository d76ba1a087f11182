package lease

import (
	"fmt"
	"net/http"
	"time"
)

// Headroom returns how long the Client's leases stay valid if no renewal
// is confirmed from now on: the time left before the earliest local
// validity deadline of its sessions (see Lease.Done), negative once that
// deadline has passed and the session is ending. ok is false when the
// Client has no session: it holds and waits for nothing, or is closed.
//
// Every confirmed renewal moves a session's deadline to the time the
// renewal was sent plus the TTL less the safety margin, so while etcd
// answers, Headroom stays between about two thirds of that and all of it;
// it falls steadily once renewals stop being confirmed.
func (c *Client) Headroom() (d time.Duration, ok bool) {
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	if c.sessions.closed {
		return 0, false
	}
	for s := range c.sessions.live {
		left := time.Until(s.until())
		if !ok || left < d {
			d, ok = left, true
		}
	}
	return d, ok
}

// Ready returns nil while the Client is open, its etcd client is open, and
// its leases stay valid for at least minHeadroom more without another
// confirmed renewal (see Headroom); otherwise a *NotReadyError, or
// ErrClosed or ErrEtcdClosed. A Client that holds and waits for nothing is
// ready.
//
// Used as a readiness probe, Ready fails about minHeadroom before a lease
// whose renewals stopped being confirmed ends (before Done closes), so
// that traffic can move away from a holder that is about to lose its
// locks. Choose minHeadroom below the TTL less the safety margin less a
// third of the TTL (the headroom right before a regular renewal), or Ready
// fails between renewals; with WithLeaseTTL, that TTL is the shortest one
// the Client's acquisitions use, since Headroom follows the session that
// ends first. Healthy applies the same rule with half of each session's
// TTL less its margin. A negative minHeadroom is refused with a
// *NotReadyError that says so.
func (c *Client) Ready(minHeadroom time.Duration) error {
	if minHeadroom < 0 {
		return &NotReadyError{Min: minHeadroom, Reason: "the minimum headroom is negative"}
	}
	if c.etcdClosed() {
		return ErrEtcdClosed
	}
	d, ok := c.Headroom()
	switch {
	case !ok && c.isClosed():
		return ErrClosed
	case ok && d < minHeadroom:
		return &NotReadyError{Headroom: d, Min: minHeadroom, Reason: "renewals are not being confirmed"}
	}
	return nil
}

// ProbeHandler returns an http.Handler for a Kubernetes readiness or
// liveness probe: it answers 200 "ok" while Ready(minHeadroom) is nil, and
// 503 with the error's text otherwise. (For controller-runtime's healthz,
// use func(*http.Request) error { return c.Ready(minHeadroom) }.)
func (c *Client) ProbeHandler(minHeadroom time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := c.Ready(minHeadroom); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// NotReadyError is Ready's answer when the Client's leases would end
// sooner than the minimum headroom asked for, or the minimum is invalid.
type NotReadyError struct {
	// Headroom is the time left before the earliest validity deadline.
	Headroom time.Duration
	// Min is the minimum headroom Ready was asked for.
	Min time.Duration
	// Reason says why, in a few words.
	Reason string
}

func (e *NotReadyError) Error() string {
	if e.Min < 0 {
		return fmt.Sprintf("lease: not ready: %s (%v)", e.Reason, e.Min)
	}
	return fmt.Sprintf("lease: not ready: %s: %v of validity left, below %v",
		e.Reason, e.Headroom.Round(time.Millisecond), e.Min)
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	return c.sessions.closed
}

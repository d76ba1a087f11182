package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"strings"

	"github.com/fencekit/fencekit/internal/logattr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
)

// Acquire blocks until it holds the lock called name, and returns the
// handle. Waiters are served in the order their records were written (FIFO
// across processes). ctx bounds only the wait: once Acquire returns, the
// lease lives until it is released or lost, whatever happens to ctx.
//
// On error nothing is held, and the waiter's record is deleted in the
// background (comparing its owner token), so the call returns within ctx;
// a record whose write etcd may still apply later is deleted when it
// appears, and at the latest with its session, which the Client then
// retires. Acquire returns ctx's error when ctx ends first; ErrClosed when
// the Client is closed; an error matching ErrPermissionDenied,
// ErrInvalidName, ErrTTLTooShort or ErrMismatch for a use that cannot work.
// Every other error matches ErrRetryable (calling again may succeed) and
// one cause: ErrSessionExpired or ErrDeadline when the Client's session
// ended during the wait, ErrKeyDeleted or ErrKeyOverwritten when someone
// removed or replaced the waiter's record, or etcd's own error when it
// could not be reached.
func (c *Client) Acquire(ctx context.Context, name string) (*Lease, error) {
	return c.acquire(ctx, request{name: name, kind: exclusive})
}

// TryAcquire takes the lock called name if nobody holds or waits for it,
// and returns an error matching ErrHeld at once otherwise, leaving nothing
// behind. It costs one etcd transaction either way, plus the session grant
// on a Client's first call and, when the Client did not watch the record
// key it writes yet and etcd confirmed the new watch after that
// transaction, one read to catch up. ctx bounds the requests.
func (c *Client) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	return c.acquire(ctx, request{name: name, kind: exclusive, try: true})
}

// tryAgain reports whether an acquisition failed for a reason another
// attempt, on a new session or another key, does not have (see
// acquireWithRetries).
func tryAgain(err error) bool {
	return errors.Is(err, errNoSession) || errors.Is(err, errSlotTaken) || errors.Is(err, errRetired)
}

// request is one acquisition asked for.
type request struct {
	name    string
	kind    recordKind
	try     bool   // fail with ErrHeld rather than wait
	payload string // an election candidate's public value
	op      string // for errors: "acquire", "lock", ...
}

func (c *Client) acquire(ctx context.Context, req request) (*Lease, error) {
	if req.op == "" {
		req.op = "acquire"
	}
	if err := ValidateName(req.name); err != nil {
		return nil, err
	}
	ctx, span := c.tracer.Start(ctx, "fencekit.lease."+strings.ReplaceAll(req.op, " ", "_"))
	// Attributes cost hashes: only a span that records gets them.
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attrLock.String(logattr.Hash(req.name)), attrKind.String(req.kind.String()))
	}
	l, err := c.acquireWithRetries(ctx, req)
	if l != nil && recording {
		span.SetAttributes(attrOwner.String(l.owner.Digest()), attrFence.Int64(l.rev),
			attrPosition.Int(l.position), attrWaited.Int64(l.acquired.Sub(l.queued).Milliseconds()))
	}
	endSpan(span, err)
	return l, err
}

func (c *Client) acquireWithRetries(ctx context.Context, req request) (*Lease, error) {
	start := time.Now()
	l, err := c.acquireOnce(ctx, req)
	for range 3 {
		// errNoSession: the session was revoked or expired before the
		// Client noticed, and nothing was written. errRetired: the Client
		// retired the session under this acquisition, which revokes its
		// record. errSlotTaken: someone else wrote the key this
		// acquisition was to use. Either way, try again (on a new
		// session, with another key).
		if !tryAgain(err) || ctx.Err() != nil {
			break
		}
		l, err = c.acquireOnce(ctx, req)
	}
	if tryAgain(err) && ctx.Err() != nil {
		err = context.Cause(ctx) // it would have tried again but for ctx
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrHeld):
			c.met.held.Inc()
		case ctx.Err() != nil:
			c.met.cancelled.Inc()
		default:
			c.met.failed.Inc()
		}
		err = opErr(req.op, req.name, err)
		if ctx.Err() == nil && !permanent(err) {
			err = retryable(err)
		}
		return nil, err
	}
	c.met.acquired(l.acquired.Sub(start))
	if !c.log.Enabled(ctx, slog.LevelInfo) {
		return l, nil // the record's fields cost hashes
	}
	c.log.Info("lease acquired", logattr.Lock(req.name), slog.String("owner", l.owner.Digest()), logattr.Fence(l.rev),
		slog.Duration("waited", l.acquired.Sub(start)))
	return l, nil
}

// acquireOnce writes a record on the current session and waits until it
// is admitted.
func (c *Client) acquireOnce(ctx context.Context, req request) (*Lease, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	// Every request of this acquisition ends when its session does: a
	// request cut off by a partition must not outlive the session.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.fin.ctx, func() { cancel(s.cause()) })
	defer stop()
	tok := c.src.New()
	dir := lockDir(c.cfg.prefix, req.name)
	key := s.claimSlot(dir, req.kind.suffix())
	val := encodeValue(tok.Value(), 1, req.payload)
	w := &waiter{key: key, dir: dir, owner: tok.Value(), kind: req.kind, tok: tok, sess: s,
		wakec: make(chan struct{}, 1), queued: time.Now()}
	w.fin.init()
	if err := c.recs.subscribe(w); err != nil {
		return nil, err
	}
	queue, readRev, written, err := c.enqueue(ctx, w, val, req.try)
	var l *Lease
	if err == nil {
		l, err = c.awaitAdmission(ctx, w, queue, readRev, req)
	}
	if err != nil {
		c.recs.unsubscribe(w)
		switch {
		case errors.Is(err, errNoSession):
			c.endSession(s, ErrSessionExpired)
		case errors.Is(err, errSlotTaken):
			// Keep the key claimed: it is not ours to reuse.
		case !written && !w.uncertain:
			s.freeSlot(key) // nothing was written
		default:
			c.recs.abandon(s, key, val, w.uncertain)
		}
		c.log.Debug("lease acquire failed", logattr.Lock(req.name), slog.String("owner", tok.Digest()), slog.String("error", err.Error()))
		return nil, err
	}
	return l, nil
}

// errSlotTaken reports that the key an acquisition was to write holds
// someone else's record.
var errSlotTaken = fmt.Errorf("%w: the record key was taken by someone else", ErrKeyOverwritten)

// errNoSession reports that etcd refused to attach a record to the session
// because the session lease no longer exists; the record was not written.
var errNoSession = fmt.Errorf("%w: the session lease no longer exists", ErrSessionExpired)

// pauseAfter waits a moment after a failed request while acquiring, and
// returns nil to try again, or the error that ends the acquisition.
func (c *Client) pauseAfter(ctx context.Context, w *waiter, err error) error {
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return errNoSession
	}
	if code, ok := errCode(err); ok {
		switch code {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.FailedPrecondition,
			codes.ResourceExhausted, codes.OutOfRange:
			return rpcError(err)
		}
	}
	t := time.NewTimer(25 * time.Millisecond)
	defer t.Stop()
	return waitFor(ctx, c, w, t.C)
}

// waitFor waits until ch delivers or closes, and returns nil, or the error
// that ends w's acquisition first: its record gone, its session ended, ctx
// ended, the Client closed.
func waitFor[T any](ctx context.Context, c *Client, w *waiter, ch <-chan T) error {
	select {
	case <-ch:
		return nil
	case <-w.fin.done():
		return w.failure()
	case <-w.sess.fin.done():
		return w.sess.cause()
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.bg.ctx.Done():
		return ErrClosed
	}
}

// promote turns the waiter into a held lease, unless its record or session
// went meanwhile (see records.replace).
func (c *Client) promote(w *waiter, rev int64, req request) (*Lease, error) {
	l := &Lease{
		c:         c,
		name:      req.name,
		key:       w.key,
		kind:      w.kind,
		owner:     w.tok,
		acquired:  time.Now(),
		rev:       rev,
		sess:      w.sess,
		uncertain: w.uncertain,
		written:   encodeValue(w.tok.Value(), 1, req.payload),
		position:  w.position,
		queued:    w.queued,
	}
	l.confirm(1, req.payload, rev)
	l.fin.init()
	if err := c.recs.replace(w, l); err != nil {
		return nil, err
	}
	return l, nil
}

package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"strings"

	"github.com/fencekit/fencekit/internal/logattr"
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
//
// Options (see AcquireOption) apply to this acquisition only; an invalid one
// fails with an error matching ErrInvalidOption before anything is written.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	req, err := newRequest(name, false, opts)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, req)
}

// TryAcquire takes the lock called name if nobody holds or waits for it,
// and returns an error matching ErrHeld at once otherwise, leaving nothing
// behind. It costs one etcd transaction either way, plus the session grant
// on a Client's first call and, when the Client did not watch the record
// key it writes yet and etcd confirmed the new watch after that
// transaction, one read to catch up. ctx bounds the requests.
// Options are as for Acquire.
//
// A TryAcquire that wrote its record and then failed (the record or the
// session went, ctx ended) returns only once the record is deleted, or
// with a *LeftBehindError, as every try does: see TryAcquireAll.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	req, err := newRequest(name, true, opts)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, req)
}

// tryAgain reports whether an acquisition failed for a reason another
// attempt, on a new session or another key, does not have (see
// acquireWithRetries). A try that left records behind reports it instead.
func tryAgain(err error) bool {
	if errors.Is(err, ErrLeftBehind) {
		return false
	}
	return errors.Is(err, errNoSession) || errors.Is(err, errSlotTaken) || errors.Is(err, errRetired)
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
	for tries := 0; ctx.Err() == nil; {
		// errSkipped: a Term.Transfer passed this acquisition over,
		// deleting its record; it queues again at the tail, however often
		// that happens (each time, someone else was admitted).
		// errNoSession: the session was revoked or expired before the
		// Client noticed, and nothing was written. errRetired: the Client
		// retired the session under this acquisition, which revokes its
		// record. errSlotTaken: someone else wrote the key this
		// acquisition was to use. Either way, try again (on a new
		// session, with another key), up to three times.
		if !errors.Is(err, errSkipped) {
			if !tryAgain(err) || tries == 3 {
				break
			}
			tries++
		}
		l, err = c.acquireOnce(ctx, req)
	}
	if (tryAgain(err) || errors.Is(err, errSkipped)) && ctx.Err() != nil {
		err = context.Cause(ctx) // it would have tried again but for ctx
	}
	if err != nil {
		c.countFailure(ctx, err)
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
	// request cut off by a partition must not outlive the session. The
	// deletes of a failed try's record are bound by the caller's ctx only.
	callerCtx := ctx
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
	if req.lockDelay > 0 {
		if w.mark, err = c.newMark(ctx, s, key, req.lockDelay); err != nil {
			s.freeSlot(key)
			return nil, err
		}
	}
	w.fin.init()
	if err := c.recs.subscribe(w); err != nil {
		return nil, err
	}
	c.met.waiting.Inc()
	defer c.met.waiting.Dec()
	queue, readRev, written, err := c.enqueue(ctx, w, val, req.try)
	var l *Lease
	if err == nil {
		l, err = c.awaitAdmission(ctx, w, queue, readRev, req)
		if errors.Is(err, ErrKeyDeleted) && c.skipped(ctx, w) {
			err = errSkipped
		}
	}
	if errors.Is(err, ErrKeyDeleted) && errors.Is(s.failure(), ErrClosed) {
		// The record went because Close revoked its session: the Client's
		// close is the cause, whichever the acquisition saw first.
		err = s.cause()
	}
	if err != nil {
		var left []leftRecord
		if r, ok := c.giveUp(s, w, req.name, val, written, err); ok {
			left = append(left, r)
		}
		err = c.dropRecords(callerCtx, s, left, req.try, err)
		c.log.Debug("lease acquire failed", logattr.Lock(req.name), slog.String("owner", tok.Digest()), slog.String("error", err.Error()))
		return nil, err
	}
	return l, nil
}

// countFailure counts an acquisition that failed with err.
func (c *Client) countFailure(ctx context.Context, err error) {
	switch {
	case errors.Is(err, ErrHeld):
		c.met.held.Inc()
	case ctx.Err() != nil:
		c.met.cancelled.Inc()
	default:
		c.met.failed.Inc()
	}
}

// giveUp stops routing events to w, whose acquisition of the lock called
// name failed with err, and returns its record (value val) if one was or
// may yet be written, for dropRecords to remove; ok is false when there is
// nothing to remove.
func (c *Client) giveUp(s *session, w *waiter, name, val string, written bool, err error) (r leftRecord, ok bool) {
	c.recs.unsubscribe(w)
	switch {
	case errors.Is(err, errNoSession):
		c.endSession(s, ErrSessionExpired)
	case errors.Is(err, errSlotTaken):
		// Keep the key claimed: it is not ours to reuse.
	case !written && !w.uncertain:
		s.freeSlot(w.key) // nothing was written
	case errors.Is(err, errSkipped) && !w.uncertain:
		s.freeSlot(w.key) // a transfer deleted the record, and no late write of it can come
	default:
		return leftRecord{name: name, key: w.key, value: val, mark: w.mark, uncertain: w.uncertain}, true
	}
	return leftRecord{}, false
}

// dropRecords removes left, the records of an acquisition that failed
// with err, and returns the error the acquisition returns. A try deletes
// them before it returns (see removeNow); any other acquisition leaves
// them to the background (see records.abandon), so that it returns within
// its ctx.
func (c *Client) dropRecords(ctx context.Context, s *session, left []leftRecord, try bool, err error) error {
	if try && len(left) > 0 {
		return c.removeNow(ctx, s, left, err)
	}
	for _, r := range left {
		c.recs.abandon(s, r.key, r.value, r.mark, r.uncertain)
	}
	return err
}

// Do acquires the lock called name, runs fn with a context that carries
// the lease and its fencing token and is cancelled the moment the lease is
// lost, and releases it. ctx bounds the wait and is fn's parent context;
// the release runs even when ctx has ended, bounded by the TTL.
//
// Do returns Acquire's error if it could not acquire; otherwise fn's error
// joined with the lease's *LostError if the lease was lost before fn
// returned (the work may have been cut short), or with the Release error.
// Every error after which calling Do again may succeed (the lease was lost,
// the session ended during the wait, the waiter's record was removed,
// etcd could not be reached) matches ErrRetryable, so a worker loop can be:
//
//	for {
//		err := locks.Do(ctx, name, work)
//		if !errors.Is(err, lease.ErrRetryable) {
//			return err
//		}
//	}
//
// Options are as for Acquire: with WithMaxHold, fn's ctx is cancelled with
// a cause matching ErrMaxHold when the cap is reached.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error, opts ...AcquireOption) (err error) {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return c.run(ctx, l, func(ctx context.Context) error { return fn(ctx, l) })
}

// run runs fn under l, as Do describes, and releases l.
func (c *Client) run(ctx context.Context, l *Lease, fn func(ctx context.Context) error) (err error) {
	var lost error
	defer func() {
		if errors.Is(l.Err(), ErrTransferred) {
			return // handed on (Term.Transfer, or a request to transfer): nothing to release
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.sess.ttl)
		defer cancel()
		relErr := l.Release(rctx)
		switch {
		case lost != nil:
			err = errors.Join(err, retryable(lost))
		case errors.Is(relErr, ErrNotOwner) || errors.Is(relErr, ErrNotFound):
			err = errors.Join(err, retryable(relErr))
		default:
			err = errors.Join(err, relErr)
		}
	}()
	lctx, cancel := l.Context(ctx)
	defer cancel()
	actx, acancel := context.WithCancelCause(lctx)
	defer acancel(nil)
	asked := make(chan struct{})
	stop := context.AfterFunc(l.asked.get(), func() {
		defer close(asked)
		l.honourAsk(ctx, acancel)
	})
	defer func() {
		if !stop() {
			<-asked // a transfer it started has ended
		}
	}()
	err = fn(actx)
	lost = l.Err()
	if errors.Is(lost, ErrTransferred) {
		lost = nil // not a loss
	}
	return err
}

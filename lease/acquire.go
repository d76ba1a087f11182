package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/lease/internal/record"
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
//
// Acquire is AcquireAll of one lock, handed out as its Lease: both run the
// same code.
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

// AcquireAll takes every lock named, all or nothing, and returns them as one
// Set. One etcd transaction writes a record into each lock's queue, so every
// record has the same creation revision: the Set's fencing revision, and
// each lock's usual fencing token (a plain Acquire of one of those locks
// queues with the Set's record in the usual order). The Set is held once
// its record heads every queue (FIFO per lock, as for Acquire).
//
// Waiting for a set cannot deadlock: every acquisition waits only for
// records created before its own, and two sets that share locks were
// written at two different revisions, so the older one is ahead of the
// newer one in every queue they share. Each record has its own owner token;
// while the Set waits, a lock whose record is already at the head is held
// (its record blocks those behind it, as any waiting record does).
//
// Options are Acquire's, and apply to every lock of the set: WithMetadata
// stores its note with each record, WithMaxHold caps each lease (the first
// to reach it ends the set), and WithLockDelay writes a marker with each
// record, so that every lock of a set that vanished waits out the delay.
// An invalid option fails with an error matching ErrInvalidOption before
// anything is written.
//
// Names must be valid lock names (see ValidateName), distinct, and at most
// MaxSetSize (MaxDelayedSetSize with WithLockDelay, whose markers add an
// operation per lock); otherwise AcquireAll returns an error matching
// ErrInvalidSet or ErrInvalidName and writes nothing. Errors are otherwise
// as for Acquire: when any lock of the set fails (ctx ends, a record is
// removed), every record is removed again and nothing is held.
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...AcquireOption) (*Set, error) {
	return c.acquireSet(ctx, names, false, opts)
}

// TryAcquireAll takes every lock named if none of them is held or waited
// for, in one transaction, and returns an error matching ErrHeld at once
// otherwise. Names and options are as for AcquireAll; ctx bounds the
// requests.
//
// A TryAcquireAll that fails returns only once the records it wrote are
// deleted (one transaction, each delete comparing its record's owner
// token), so that a lock it found free is free again when it returns. A
// delete whose reply is lost is sent again, within ctx and for up to one
// TTL. If it still cannot confirm that the records are gone, it returns a
// *LeftBehindError (matching ErrLeftBehind, and ErrHeld when a lock was
// held) naming the locks whose records may remain; the Client goes on
// deleting them in the background, and they go with their session at the
// latest. As for Acquire, a write whose reply was lost may still be
// applied by etcd after the call: the Client deletes such a record as soon
// as its watch sees it appear.
func (c *Client) TryAcquireAll(ctx context.Context, names []string, opts ...AcquireOption) (*Set, error) {
	return c.acquireSet(ctx, names, true, opts)
}

// acquireSet runs AcquireAll (TryAcquireAll if try).
func (c *Client) acquireSet(ctx context.Context, names []string, try bool, opts []AcquireOption) (*Set, error) {
	names = slices.Clone(names)
	reqs, err := newSetRequests(names, try, opts)
	if err != nil {
		return nil, err
	}
	leases, err := (&acquisition{c: c, reqs: reqs}).run(ctx)
	if err != nil {
		return nil, err
	}
	return newSet(names, leases, leases[0].rev), nil
}

// acquire takes the one lock req asks for: the acquisition of a Lease,
// a Permit, a Term.
func (c *Client) acquire(ctx context.Context, req request) (*Lease, error) {
	if err := ValidateName(req.name); err != nil {
		return nil, err
	}
	leases, err := (&acquisition{c: c, reqs: []request{req}}).run(ctx)
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// acquisition is one call that takes locks: the one lock of an Acquire
// (or of a Semaphore's, an RWMutex's, a Campaign's), or every lock of an
// AcquireAll. Each of its attempts writes a record per lock, in one
// transaction, and waits until every record is admitted (see attempt).
type acquisition struct {
	c    *Client
	reqs []request // one per lock, in the caller's order; all tries or none
}

// tryAgain reports whether an acquisition failed for a reason another
// attempt, on a new session or another key, does not have (see
// acquisition.retry). A try that left records behind reports it instead.
func tryAgain(err error) bool {
	if errors.Is(err, ErrLeftBehind) {
		return false
	}
	return errors.Is(err, errNoSession) || errors.Is(err, errSlotTaken) || errors.Is(err, errRetired)
}

// run traces the acquisition and runs it.
func (a *acquisition) run(ctx context.Context) ([]*Lease, error) {
	req := a.reqs[0]
	if req.op == "" {
		req.op = "acquire"
		for i := range a.reqs {
			a.reqs[i].op = req.op
		}
	}
	ctx, span := a.c.tracer.Start(ctx, "fencekit.lease."+strings.ReplaceAll(req.op, " ", "_"))
	// Attributes cost hashes: only a span that records gets them.
	recording := span.IsRecording() && len(a.reqs) == 1
	if recording {
		span.SetAttributes(attrLock.String(logattr.Hash(req.name)), attrKind.String(req.kind.String()))
	}
	leases, err := a.retry(ctx)
	if err == nil && recording {
		l := leases[0]
		span.SetAttributes(attrOwner.String(l.owner.Digest()), attrFence.Int64(l.rev),
			attrPosition.Int(l.position), attrWaited.Int64(l.acquired.Sub(l.queued).Milliseconds()))
	}
	endSpan(span, err)
	return leases, err
}

// retry runs attempts until one holds every lock or fails for good.
func (a *acquisition) retry(ctx context.Context) ([]*Lease, error) {
	start := time.Now()
	leases, err := a.attempt(ctx)
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
		leases, err = a.attempt(ctx)
	}
	if (tryAgain(err) || errors.Is(err, errSkipped)) && ctx.Err() != nil {
		err = context.Cause(ctx) // it would have tried again but for ctx
	}
	if err != nil {
		return nil, a.failed(ctx, err)
	}
	a.succeeded(ctx, leases, time.Since(start))
	return leases, nil
}

// failed counts and logs an acquisition that failed with err, and returns
// the error it returns.
func (a *acquisition) failed(ctx context.Context, err error) error {
	met := a.c.met
	switch {
	case errors.Is(err, ErrHeld):
		met.Held.Inc()
	case ctx.Err() != nil:
		met.Cancelled.Inc()
	default:
		met.Failed.Inc()
	}
	err = opErr(a.reqs[0].op, a.label(), err)
	if ctx.Err() == nil && !permanent(err) {
		err = retryable(err)
	}
	return err
}

// succeeded counts and logs an acquisition that holds leases after waited.
func (a *acquisition) succeeded(ctx context.Context, leases []*Lease, waited time.Duration) {
	a.c.met.Acquired(waited)
	if !a.c.log.Enabled(ctx, slog.LevelInfo) {
		return // the record's fields cost hashes
	}
	l := leases[0]
	if len(leases) > 1 {
		a.c.log.Info("lease set acquired", slog.Int("locks", len(leases)), logattr.Fence(l.rev), slog.Duration("waited", waited))
		return
	}
	a.c.log.Info("lease acquired", logattr.Lock(l.name), slog.String("owner", l.owner.Digest()), logattr.Fence(l.rev),
		slog.Duration("waited", waited))
}

// label names the acquisition's locks in errors: its lock, or a set's
// first lock and how many others.
func (a *acquisition) label() string {
	if len(a.reqs) == 1 {
		return a.reqs[0].name
	}
	return fmt.Sprintf("%s and %d more", a.reqs[0].name, len(a.reqs)-1)
}

// attempt writes the acquisition's records on the current session, in one
// transaction, and waits until every one is admitted.
func (a *acquisition) attempt(ctx context.Context) ([]*Lease, error) {
	c := a.c
	s, keys, err := c.session(ctx, a.ttl(), a.slotReqs())
	if err != nil {
		return nil, err
	}
	// Every request of this attempt ends when its session does: a
	// request cut off by a partition must not outlive the session. The
	// deletes of a failed try's records are bound by the caller's ctx only.
	callerCtx := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.fin.Context(), func() { cancel(s.cause()) })
	defer stop()
	ms, err := a.members(ctx, s, keys)
	if err != nil {
		return nil, a.drop(callerCtx, s, ms, nil, false, err)
	}
	c.met.Waiting.Add(float64(len(ms)))
	defer c.met.Waiting.Sub(float64(len(ms)))
	e := &enqueuer{c: c, ms: ms}
	err = e.enqueue(ctx)
	var leases []*Lease
	if err == nil {
		leases, err = admit(ctx, ms)
	}
	if errors.Is(err, ErrKeyDeleted) && errors.Is(s.failure(), ErrClosed) {
		// A record went because Close revoked its session: the Client's
		// close is the cause, whichever the acquisition saw first.
		err = s.cause()
	}
	if err != nil {
		err = a.drop(callerCtx, s, ms, leases, e.written, err)
		c.log.Debug("lease acquire failed", logattr.Lock(a.reqs[0].name), slog.String("owner", ms[0].w.tok.Digest()),
			slog.Int("locks", len(ms)), slog.String("error", err.Error()))
		return nil, err
	}
	return leases, nil
}

// ttl is the TTL of the session the acquisition's records go on: its
// WithLeaseTTL, or the Client's.
func (a *acquisition) ttl() time.Duration {
	if d := a.reqs[0].ttl; d > 0 {
		return d
	}
	return a.c.cfg.ttl
}

// slotReqs are the locks of the acquisition's records, for the session to
// claim their keys.
func (a *acquisition) slotReqs() []slotReq {
	rs := make([]slotReq, len(a.reqs))
	for i, req := range a.reqs {
		rs[i] = slotReq{dir: record.Dir(a.c.cfg.prefix, req.name), suffix: req.kind.Suffix()}
	}
	return rs
}

// members prepares, on session s, a member per request: its record key
// (keys, claimed on s), an owner token, a lock-delay marker if asked for,
// and the watch of the key. On error it returns the members prepared so
// far, for drop, and frees the keys of the others.
func (a *acquisition) members(ctx context.Context, s *session, keys []string) ([]*member, error) {
	c := a.c
	ms := make([]*member, 0, len(a.reqs))
	for i, req := range a.reqs {
		tok := c.src.New()
		dir, key := record.Dir(c.cfg.prefix, req.name), keys[i]
		val := record.EncodeValue(tok.Value(), 1, req.payload)
		w := &waiter{key: key, dir: dir, owner: tok.Value(), kind: req.kind, tok: tok, sess: s,
			wakec: make(chan struct{}, 1), queued: time.Now(), rec: &entry{value: val}}
		w.fin.Init()
		m := &member{c: c, req: req, w: w, val: val}
		var err error
		if req.lockDelay > 0 {
			w.rec.mark, err = c.newMark(ctx, s, key, req.lockDelay)
		}
		if err == nil {
			err = c.recs.subscribe(w)
		}
		if err != nil {
			for _, k := range keys[i:] {
				s.freeSlot(k)
			}
			return ms, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// admit waits until every member is admitted, and returns their leases. A
// set's members wait concurrently: if one fails, the others stop waiting,
// and the first error is returned with the leases already admitted (nil
// where a member was not), for drop to give up.
func admit(ctx context.Context, ms []*member) ([]*Lease, error) {
	if len(ms) == 1 {
		l, err := ms[0].await(ctx)
		if err != nil {
			return nil, err
		}
		return []*Lease{l}, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	leases := make([]*Lease, len(ms))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.await(ctx)
			if err != nil {
				failed.Store(true)
				cancel(fmt.Errorf("lock %q: %w", m.req.name, err))
				return
			}
			leases[i] = l
		}()
	}
	wg.Wait()
	if !failed.Load() {
		return leases, nil
	}
	return leases, context.Cause(ctx)
}

// drop gives up an attempt that failed with err, and returns the error the
// attempt returns. leases are the leases already admitted (nil where a
// member was not; all nil when leases is nil). A try ends them unreleased
// and deletes their records with the other members' before it returns
// (see letGo, removeNow); otherwise they are released (see
// releaseAdmitted) and the other records are removed in the background
// (see records.abandon), so that the call returns within its ctx.
func (a *acquisition) drop(ctx context.Context, s *session, ms []*member, leases []*Lease, written bool, err error) error {
	try := a.reqs[0].try
	if !try {
		a.releaseAdmitted(leases)
	}
	left := make([]leftRecord, 0, len(ms))
	for i, m := range ms {
		if leases != nil && leases[i] != nil {
			if try {
				left = append(left, m.letGo(leases[i]))
			}
			continue
		}
		if r, ok := m.giveUp(written, err); ok {
			left = append(left, r)
		}
	}
	if try && len(left) > 0 {
		return a.removeNow(ctx, s, left, err)
	}
	for _, r := range left {
		a.c.recs.abandon(s, r.key, r.value, r.mark, r.uncertain)
	}
	return err
}

// giveUp stops routing events to m, whose acquisition failed with err, and
// returns its record if one was or may yet be written (written: the
// attempt wrote its records), for drop to remove; ok is false when there
// is nothing to remove.
func (m *member) giveUp(written bool, err error) (r leftRecord, ok bool) {
	w := m.w
	m.c.recs.unsubscribe(w)
	switch {
	case errors.Is(err, errNoSession):
		m.c.endSession(w.sess, ErrSessionExpired)
	case errors.Is(err, errSlotTaken):
		// Keep the key claimed: it is not ours to reuse.
	case !written && !w.rec.uncertain:
		w.sess.freeSlot(w.key) // nothing was written
	case errors.Is(err, errSkipped) && !w.rec.uncertain:
		w.sess.freeSlot(w.key) // a transfer deleted the record, and no late write of it can come
	default:
		return m.left(), true
	}
	return leftRecord{}, false
}

// letGo ends l, the lease of m admitted by a try that failed as a whole,
// without touching its record, and returns that record for drop to delete
// with the others: l was never anyone's, so nothing of a Release (hold
// count, unknown outcomes) applies to it.
func (m *member) letGo(l *Lease) leftRecord {
	m.c.recs.forget(l, false)
	l.end(ErrReleased)
	return m.left()
}

// left is m's record as one to remove.
func (m *member) left() leftRecord {
	e := m.w.rec
	return leftRecord{name: m.req.name, key: m.w.key, value: e.value, mark: e.mark, uncertain: e.uncertain}
}

// releaseAdmitted releases the leases of a set that failed as a whole.
func (a *acquisition) releaseAdmitted(leases []*Lease) {
	c := a.c
	for _, l := range leases {
		if l == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(c.bg.Context(), l.sess.ttl)
		if err := l.Release(ctx); err != nil {
			c.log.Warn("lease set: release of an admitted lock failed; it ends with its session",
				logattr.Lock(l.name), slog.String("error", err.Error()))
		}
		cancel()
	}
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

package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/owner"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// waiter is one Acquire call between writing its record and holding the
// lock. Its fields are guarded by mu; the Client's watch calls onDelete,
// onPut and wake.
//
// Record keys are reused (see Client.claimSlot), so the watch may deliver
// events of an earlier record under the same key. Every event is therefore
// judged by its revision against the creation revision of the record in
// question: a delete counts only if it came after that record was created.
type waiter struct {
	key, dir, owner string
	tok             owner.Token
	sess            *session
	wakec           chan struct{} // a predecessor left: re-read the queue
	failc           chan struct{} // closed, after failErr is set, when the waiter's own record went
	failErr         error
	failOnce        sync.Once
	watch           *dirWatch // covers dir; set by addWaiter
	// uncertain: a write of the record got no reply, so it may still
	// apply later (see orphan.uncertain). Set by wait only.
	uncertain bool

	mu       sync.Mutex
	myRev    int64            // creation revision of the waiter's record; 0 until known
	ownDel   int64            // latest delete of the waiter's key seen before myRev was known
	pred     string           // the record this waiter waits on; "" while reading
	predRev  int64            // its creation revision
	predGone bool             // the watch saw pred deleted
	seen     map[string]int64 // latest delete revision per key seen while reading the queue
}

// onDelete tells the waiter that a record of its lock was deleted at rev.
func (w *waiter) onDelete(key string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case key == w.key && w.myRev == 0:
		w.ownDel = max(w.ownDel, rev)
	case key == w.key:
		if rev > w.myRev {
			w.fail(ErrKeyDeleted)
		}
	case w.pred == "":
		w.seen[key] = max(w.seen[key], rev)
	case key == w.pred && rev > w.predRev:
		w.predGone = true
		w.wake()
	}
}

// onPut tells the waiter that its own key was written at rev, by this
// acquisition (mine) or by someone else.
func (w *waiter) onPut(rev int64, mine bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !mine && w.myRev != 0 && rev > w.myRev {
		w.fail(ErrKeyOverwritten)
	}
}

// resync applies what a read at revision at of the waiter's own record
// found after the watch missed events: gone, or overwritten by someone else.
func (w *waiter) resync(kv *mvccpb.KeyValue, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.myRev == 0 || w.myRev > at {
		return // not written when read, as far as the waiter knows
	}
	switch tok, _, ok := decodeValue(valueOf(kv)); {
	case kv == nil || kv.CreateRevision != w.myRev:
		w.fail(ErrKeyDeleted)
	case !ok || tok != w.owner:
		w.fail(ErrKeyOverwritten)
	}
}

func valueOf(kv *mvccpb.KeyValue) []byte {
	if kv == nil {
		return nil
	}
	return kv.Value
}

// setMyRev records the creation revision of the waiter's record, and fails
// the waiter if the watch already saw that record deleted.
func (w *waiter) setMyRev(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.myRev = rev
	if w.ownDel > rev {
		w.fail(ErrKeyDeleted)
	}
}

func (w *waiter) wake() {
	select {
	case w.wakec <- struct{}{}:
	default:
	}
}

func (w *waiter) fail(err error) {
	w.failOnce.Do(func() {
		w.failErr = err
		close(w.failc)
	})
}

// failure returns why the waiter failed, or nil.
func (w *waiter) failure() error {
	select {
	case <-w.failc:
		return w.failErr
	default:
		return nil
	}
}

// reading starts a queue read: deletes are remembered until setPred.
func (w *waiter) reading() {
	w.mu.Lock()
	w.pred = ""
	w.predGone = false
	w.seen = map[string]int64{}
	w.mu.Unlock()
}

// setPred sets the record to wait on, created at rev, and reports whether
// it already left during the read.
func (w *waiter) setPred(pred string, rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pred, w.predRev = pred, rev
	w.predGone = w.seen[pred] > rev
	w.seen = nil
	return w.predGone
}

// gone reports whether the watch saw the predecessor deleted.
func (w *waiter) gone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.predGone
}

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
// ErrInvalidName or ErrTTLTooShort for a configuration that cannot work.
// Every other error matches ErrRetryable (calling again may succeed) and
// one cause: ErrSessionExpired or ErrDeadline when the Client's session
// ended during the wait, ErrKeyDeleted or ErrKeyOverwritten when someone
// removed or replaced the waiter's record, or etcd's own error when it
// could not be reached.
func (c *Client) Acquire(ctx context.Context, name string) (*Lease, error) {
	return c.acquire(ctx, name, false)
}

// TryAcquire takes the lock called name if nobody holds or waits for it,
// and returns an error matching ErrHeld at once otherwise, leaving nothing
// behind. It costs one etcd transaction either way (plus the session grant
// on a Client's first call). ctx bounds the request.
func (c *Client) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	return c.acquire(ctx, name, true)
}

func (c *Client) acquire(ctx context.Context, name string, try bool) (*Lease, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := c.acquireOnce(ctx, name, try)
	for range 3 {
		// errNoSession: the session was revoked or expired before the
		// Client noticed, and nothing was written. errSlotTaken: someone
		// else wrote the key this acquisition was to use. Either way,
		// try again (on a new session, with another key).
		if !errors.Is(err, errNoSession) && !errors.Is(err, errSlotTaken) || ctx.Err() != nil {
			break
		}
		l, err = c.acquireOnce(ctx, name, try)
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrHeld):
			c.met.acquisitions.WithLabelValues("held").Inc()
		case ctx.Err() != nil:
			c.met.acquisitions.WithLabelValues("cancelled").Inc()
		default:
			c.met.acquisitions.WithLabelValues("error").Inc()
		}
		err = fmt.Errorf("lease: acquire %q: %w", name, err)
		if ctx.Err() == nil && !permanent(err) {
			err = retryable(err)
		}
		return nil, err
	}
	c.met.acquired(l.acquired.Sub(start))
	c.log.Info("lease acquired", logattr.Lock(name), slog.String("owner", l.owner.Digest()), logattr.Fence(l.rev),
		slog.Duration("waited", l.acquired.Sub(start)))
	return l, nil
}

// acquireOnce writes a record on the current session and waits for it to
// reach the head of the queue.
func (c *Client) acquireOnce(ctx context.Context, name string, try bool) (*Lease, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	tok := c.src.New()
	dir := c.cfg.prefix + name + "/"
	key := c.claimSlot(s, dir)
	val := encodeValue(tok.Value(), 1)
	w := &waiter{key: key, dir: dir, owner: tok.Value(), tok: tok, sess: s,
		wakec: make(chan struct{}, 1), failc: make(chan struct{})}
	if err := c.addWaiter(w); err != nil {
		return nil, err
	}
	l, err := c.wait(ctx, w, val, try)
	if err != nil {
		c.removeWaiter(w)
		switch {
		case errors.Is(err, errNoSession):
			c.endSession(s, ErrSessionExpired)
		case errors.Is(err, errSlotTaken):
			// Keep the key claimed: it is not ours to reuse.
		case errors.Is(err, ErrHeld) && !w.uncertain:
			c.freeSlot(s, key) // nothing was written
		default:
			c.abandon(s, key, val, w.uncertain)
		}
		c.log.Debug("lease acquire failed", logattr.Lock(name), slog.String("owner", tok.Digest()), slog.String("error", err.Error()))
		return nil, err
	}
	return l, nil
}

func (c *Client) addWaiter(w *waiter) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	w.reading()
	w.watch = c.watchLocked(w.dir)
	c.waiters[w.key] = w
	if c.byDir[w.dir] == nil {
		c.byDir[w.dir] = map[*waiter]struct{}{}
	}
	c.byDir[w.dir][w] = struct{}{}
	return nil
}

func (c *Client) removeWaiter(w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unlinkWaiter(w)
	c.retireIfIdleLocked(w.sess)
}

func (c *Client) unlinkWaiter(w *waiter) {
	delete(c.waiters, w.key)
	if ws := c.byDir[w.dir]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(c.byDir, w.dir)
		}
	}
}

// queueOpts reads a lock's queue: record keys (no values) in the order they
// were written.
func queueOpts(maxRev int64) []clientv3.OpOption {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	if maxRev > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(maxRev))
	}
	return opts
}

// wait writes w's record and waits until it is first in its queue.
func (c *Client) wait(ctx context.Context, w *waiter, val string, try bool) (*Lease, error) {
	s := w.sess
	put := clientv3.OpPut(w.key, val, clientv3.WithLease(s.id))
	var txn func() (*clientv3.TxnResponse, error)
	if try {
		// Write only if the lock has no record at all; a retry after a
		// lost reply finds its own record first in the queue.
		txn = func() (*clientv3.TxnResponse, error) {
			return c.etcd.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(w.dir).WithPrefix(), "=", 0)).
				Then(put, clientv3.OpGet(w.dir, queueOpts(0)...)).
				Else(clientv3.OpGet(w.dir, append(queueOpts(0), clientv3.WithLimit(1))...), clientv3.OpGet(w.key)).
				Commit()
		}
	} else {
		// Write the record unless a previous try already did, and read the
		// queue in the same transaction.
		txn = func() (*clientv3.TxnResponse, error) {
			return c.etcd.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", 0)).
				Then(put, clientv3.OpGet(w.dir, queueOpts(0)...)).
				Else(clientv3.OpGet(w.dir, queueOpts(0)...), clientv3.OpGet(w.key)).
				Commit()
		}
	}
	var (
		queue   []*mvccpb.KeyValue
		readRev int64
	)
	for {
		resp, err := txn()
		if err != nil {
			// The request may have gone out; if so etcd may still apply
			// it, now or later.
			w.uncertain = true
		}
		if err == nil {
			if !resp.Succeeded {
				// The key exists: written by an earlier try of this very
				// acquisition whose reply was lost, or by someone else.
				if own := resp.Responses[1].GetResponseRange().Kvs; len(own) > 0 && string(own[0].Value) != val {
					return nil, errSlotTaken
				}
				queue = resp.Responses[0].GetResponseRange().Kvs
			} else {
				queue = resp.Responses[1].GetResponseRange().Kvs
			}
			readRev = resp.Header.Revision
			break
		}
		if err := c.retryable(ctx, s, w, err); err != nil {
			return nil, err
		}
	}
	if !try || len(queue) > 0 && string(queue[0].Key) == w.key {
		q, err := c.catchUp(ctx, w, val, readRev)
		if err != nil {
			return nil, err
		}
		if q != nil {
			queue = q
		}
	}
	var myRev int64
	for {
		pos := -1
		for i, kv := range queue {
			if string(kv.Key) == w.key {
				pos, myRev = i, kv.CreateRevision
				break
			}
		}
		if pos >= 0 {
			w.setMyRev(myRev)
		}
		switch {
		case w.failure() != nil:
			return nil, w.failure()
		case pos == 0:
			return c.promote(w, myRev)
		case try:
			return nil, ErrHeld
		case pos < 0:
			return nil, ErrKeyDeleted
		}
		pred := queue[pos-1]
		gone, err := c.waitPred(ctx, w, pred)
		if err != nil {
			return nil, err
		}
		if gone && pos == 1 {
			// The record ahead was the head of the queue and is gone. No
			// record can be written ahead of ours later (creation
			// revisions only grow), so ours is the head now; had ours
			// been deleted first, the watch would have failed the wait.
			return c.promote(w, myRev)
		}
		for {
			w.reading()
			resp, err := c.etcd.Get(ctx, w.dir, queueOpts(myRev)...)
			if err == nil {
				queue = resp.Kvs
				break
			}
			if err := c.retryable(ctx, s, w, err); err != nil {
				return nil, err
			}
		}
	}
}

// catchUp makes sure that the watch of w's directory delivers every event
// after readRev, the revision the queue was read at. A watch started after
// that (a directory this Client had not watched yet) may have missed some:
// then the queue and the waiter's own record are read again, and the new
// queue returned.
func (c *Client) catchUp(ctx context.Context, w *waiter, val string, readRev int64) ([]*mvccpb.KeyValue, error) {
	select {
	case <-w.watch.created:
	case <-w.failc:
		return nil, w.failure()
	case <-w.sess.done:
		return nil, w.sess.cause(c)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-c.ctx.Done():
		return nil, ErrClosed
	}
	if w.watch.start <= readRev {
		return nil, nil
	}
	for {
		w.reading()
		resp, err := c.etcd.Get(ctx, w.dir, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err == nil {
			for _, kv := range resp.Kvs {
				if string(kv.Key) == w.key {
					if string(kv.Value) != val {
						return nil, ErrKeyOverwritten
					}
					return resp.Kvs, nil
				}
			}
			return nil, ErrKeyDeleted
		}
		if err := c.retryable(ctx, w.sess, w, err); err != nil {
			return nil, err
		}
	}
}

// waitPred waits until the watch wakes w: its predecessor pred left (gone)
// or the queue must be read again.
func (c *Client) waitPred(ctx context.Context, w *waiter, pred *mvccpb.KeyValue) (gone bool, err error) {
	if w.setPred(string(pred.Key), pred.CreateRevision) {
		return true, nil
	}
	stuck := time.NewTicker(c.cfg.ttl)
	defer stuck.Stop()
	for {
		select {
		case <-w.wakec:
			return w.gone(), nil
		case <-w.failc:
			return false, w.failure()
		case <-w.sess.done:
			return false, w.sess.cause(c)
		case <-ctx.Done():
			return false, context.Cause(ctx)
		case <-c.ctx.Done():
			return false, ErrClosed
		case <-stuck.C:
			// Longer than a TTL behind one record: say so if it is a
			// record that no session keeps, which never goes by itself.
			c.checkForeign(ctx, pred)
		}
	}
}

// errSlotTaken reports that the key an acquisition was to write holds
// someone else's record.
var errSlotTaken = fmt.Errorf("%w: the record key was taken by someone else", ErrKeyOverwritten)

// errNoSession reports that etcd refused to attach a record to the session
// because the session lease no longer exists; the record was not written.
var errNoSession = fmt.Errorf("%w: the session lease no longer exists", ErrSessionExpired)

// retryable decides what to do after a failed request while acquiring:
// nil means try again (after a short pause), anything else is the error to
// return.
func (c *Client) retryable(ctx context.Context, s *session, w *waiter, err error) error {
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
	select {
	case <-time.After(25 * time.Millisecond):
		return nil
	case <-w.failc:
		return w.failure()
	case <-s.done:
		return s.cause(c)
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.ctx.Done():
		return ErrClosed
	}
}

func (s *session) cause(c *Client) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.err == ErrClosed {
		return ErrClosed
	}
	return fmt.Errorf("session ended while waiting: %w", s.err)
}

// promote turns the waiter into a held lease, unless its record or session
// went meanwhile. The check and the registration happen under the Client's
// lock, the same lock the watch dispatches under, so no loss is missed.
func (c *Client) promote(w *waiter, rev int64) (*Lease, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unlinkWaiter(w)
	if err := w.failure(); err != nil {
		return nil, err
	}
	if w.sess.err != nil {
		if w.sess.err == ErrClosed {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("session ended while acquiring: %w", w.sess.err)
	}
	l := &Lease{
		c:         c,
		name:      dirName(w.key),
		key:       w.key,
		owner:     w.tok,
		acquired:  time.Now(),
		rev:       rev,
		modRev:    rev,
		sess:      w.sess,
		uncertain: w.uncertain,
		count:     1,
	}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	c.held[w.key] = l
	if w.uncertain {
		// A copy of its write may apply after its release: retire the
		// session once it is idle (see session.tainted).
		w.sess.tainted = true
	}
	return l, nil
}

// checkForeign reports a record in a lock's queue that no session keeps
// alive (written by something other than a fencekit Client, or detached
// from its lease): it blocks the lock until an operator deletes it.
func (c *Client) checkForeign(ctx context.Context, rec *mvccpb.KeyValue) {
	resp, err := c.etcd.Get(ctx, string(rec.Key))
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rec.CreateRevision {
		return
	}
	kv := resp.Kvs[0]
	_, _, ok := decodeValue(kv.Value)
	if kv.Lease != 0 && ok {
		return
	}
	c.met.foreign.Inc()
	c.log.Warn("lease queue blocked by a record no session keeps; delete it (etcdctl del, or fencekit release --fence) to unblock the lock",
		logattr.Lock(dirName(string(kv.Key))), slog.String("key", string(kv.Key)), logattr.Fence(kv.CreateRevision),
		slog.Bool("has_lease", kv.Lease != 0), slog.Bool("fencekit_value", ok))
}

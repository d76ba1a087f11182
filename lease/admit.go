package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fencekit/fencekit/internal/logattr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// awaitAdmission waits until fewer records than w's kind allows block w in
// queue, read at revision readRev, and returns the held lease.
//
// While it waits, the Client watches only the last record that blocks w
// (see waiter.target), so that one release wakes the one waiter behind it
// and not the whole queue. When that record goes, w is admitted if no
// other blocker is left as far as it knows; otherwise it reads the queue
// again and watches the new last blocker (see waitBehind).
func (c *Client) awaitAdmission(ctx context.Context, w *waiter, queue []*mvccpb.KeyValue, readRev int64, req request) (*Lease, error) {
	myRev, admitted, err := c.place(w, queue, readRev, req.try)
	if err != nil {
		return nil, err
	}
	if !admitted && req.try {
		return nil, ErrHeld
	}
	stuck := time.NewTicker(c.cfg.ttl)
	defer stuck.Stop()
	for !admitted {
		if err := c.waitBehind(ctx, w, stuck.C); err != nil {
			return nil, err
		}
		admitted = w.admitted()
	}
	return c.admit(ctx, w, myRev, req)
}

// place finds w's record in queue, read at readRev when it was written,
// and sets what blocks it. It returns the record's creation revision, and
// whether w is admitted.
func (c *Client) place(w *waiter, queue []*mvccpb.KeyValue, readRev int64, try bool) (int64, bool, error) {
	pos := position(queue, w.key, 0)
	switch {
	case pos < 0 && try:
		return 0, false, ErrHeld
	case pos < 0:
		return 0, false, ErrKeyDeleted
	}
	myRev := queue[pos].CreateRevision
	w.setMyRev(myRev)
	if err := w.failure(); err != nil {
		return 0, false, err
	}
	blockers, need, err := admission(w.kind, queue[:pos], myRev)
	if err != nil {
		return 0, false, err
	}
	w.position = len(blockers)
	return myRev, w.setBlockers(blockers, need, readRev), nil
}

// position returns the index of the record at key in queue (created at
// crev, unless 0), or -1.
func position(queue []*mvccpb.KeyValue, key string, crev int64) int {
	for i, kv := range queue {
		if string(kv.Key) == key && (crev == 0 || kv.CreateRevision == crev) {
			return i
		}
	}
	return -1
}

// waitBehind waits behind w's target (see watchTarget) until that record
// goes or w is admitted, and reads the queue again unless w is admitted
// then. A waiter whose watch started after its read reads at once; one
// stuck behind the same records for a TTL checks for a foreign record.
func (c *Client) waitBehind(ctx context.Context, w *waiter, stuck <-chan time.Time) error {
	target, covered, err := c.watchTarget(ctx, w)
	if err != nil {
		return err
	}
	for covered && (target == w.dir || w.blocking(target)) && !w.admitted() {
		if err := c.waitEvent(ctx, w, stuck); err != nil {
			return err
		}
	}
	if w.admitted() {
		return nil
	}
	return c.reread(ctx, w)
}

// waitEvent waits for w to be woken (see waiter.wake), or the TTL tick
// stuck, and returns nil, or the error that ends w's acquisition first.
func (c *Client) waitEvent(ctx context.Context, w *waiter, stuck <-chan time.Time) error {
	select {
	case <-w.wakec:
		return nil
	case <-stuck:
		// Longer than a TTL behind the same record: say so if it is a
		// record that no session keeps, which never goes by itself.
		if key, crev := w.oldestBlocker(); key != "" {
			c.checkForeign(ctx, key, crev)
		}
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

// admit turns the admitted waiter w into a held lease (see promote), once
// its own record is known to have existed when the last blocker went.
func (c *Client) admit(ctx context.Context, w *waiter, myRev int64, req request) (*Lease, error) {
	if at := w.unconfirmed(); at != 0 && !c.recs.orderedWithOwn(w) {
		if err := c.confirmOwn(ctx, w, at); err != nil {
			return nil, err
		}
	}
	return c.promote(w, myRev, req)
}

// confirmOwn reads w's own record as it was at revision at, when a blocker
// was seen gone, and fails w if it was gone or someone else's by then. A
// serializable read at that revision is answered by any member that has
// applied it; one that has not (ErrFutureRev), or a revision compacted
// away, leads to a read of the present instead: a record still there with
// w's creation revision was there at every revision since.
func (c *Client) confirmOwn(ctx context.Context, w *waiter, at int64) error {
	for {
		resp, err := c.etcd.Get(ctx, w.key, clientv3.WithRev(at), clientv3.WithSerializable())
		if errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrCompacted) {
			resp, err = c.etcd.Get(ctx, w.key)
		}
		if err == nil {
			w.confirm(resp.Kvs)
			return w.failure()
		}
		if err := c.pauseAfter(ctx, w, err); err != nil {
			return err
		}
	}
}

// watchTarget makes the Client watch what w waits behind (see
// waiter.target), and returns it. covered reports whether that watch
// delivers every event since w's blockers were read; if not, they must be
// read again. A semaphore waiter's target is its directory, behind which
// it waits until admitted.
func (c *Client) watchTarget(ctx context.Context, w *waiter) (target string, covered bool, err error) {
	key, prefix, at := w.target()
	if key == "" {
		return "", false, nil
	}
	kw := c.recs.watchBehind(w, key, prefix)
	if err := waitFor(ctx, c, w, c.recs.watches.Created(kw)); err != nil {
		return "", false, err
	}
	if c.bg.ctx.Err() != nil {
		return "", false, ErrClosed // its watches stopped unconfirmed
	}
	return key, kw.Start() <= at, nil
}

// reread reads the records ahead of w again and sets its blockers.
func (c *Client) reread(ctx context.Context, w *waiter) error {
	opts := queueKeys(clientv3.WithMaxCreateRev(w.myRev))
	for {
		w.reading()
		resp, err := c.etcd.Get(ctx, w.dir, opts...)
		if err == nil {
			pos := position(resp.Kvs, w.key, w.myRev)
			if pos < 0 {
				return ErrKeyDeleted
			}
			blockers, need, err := admission(w.kind, resp.Kvs[:pos], w.myRev)
			if err != nil {
				return err
			}
			w.setBlockers(blockers, need, resp.Header.Revision)
			return nil
		}
		if err := c.pauseAfter(ctx, w, err); err != nil {
			return err
		}
	}
}

// checkForeign reports a record in a lock's queue that no session keeps
// alive (written by something other than a fencekit Client, or detached
// from its lease): it blocks the lock until an operator deletes it.
func (c *Client) checkForeign(ctx context.Context, key string, crev int64) {
	resp, err := c.etcd.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != crev {
		return
	}
	kv := resp.Kvs[0]
	_, _, ok := decodeValue(kv.Value)
	if kv.Lease != 0 && ok {
		return
	}
	c.met.foreign.Inc()
	c.log.Warn("lease queue blocked by a record no session keeps; delete it (etcdctl del, or fencekit release --fence) to unblock the lock",
		logattr.Lock(dirName(key)), slog.String("key", key), logattr.Fence(crev),
		slog.Bool("has_lease", kv.Lease != 0), slog.Bool("fencekit_value", ok))
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
		mark:      w.mark,
	}
	l.confirm(1, req.payload, rev)
	l.fin.init()
	if err := c.recs.replace(w, l); err != nil {
		return nil, err
	}
	if w.asked.Load() == rev {
		l.asked.request(w.askedTo.Load()) // asked while it was being admitted
	}
	if req.maxHold > 0 {
		l.capHold(req.maxHold)
	}
	return l, nil
}

// request is one acquisition asked for.
type request struct {
	name    string
	kind    recordKind
	try     bool          // fail with ErrHeld rather than wait
	payload string        // an election candidate's public value
	op      string        // for errors: "acquire", "lock", ...
	maxHold time.Duration // see WithMaxHold; 0: no cap
	// lockDelay is the delay of WithLockDelay, in whole seconds; 0: none.
	lockDelay time.Duration
}

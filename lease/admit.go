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
// again and watches the new last blocker.
func (c *Client) awaitAdmission(ctx context.Context, w *waiter, queue []*mvccpb.KeyValue, readRev int64, req request) (*Lease, error) {
	pos := -1
	for i, kv := range queue {
		if string(kv.Key) == w.key {
			pos = i
			break
		}
	}
	switch {
	case pos < 0 && req.try:
		return nil, ErrHeld
	case pos < 0:
		return nil, ErrKeyDeleted
	}
	myRev := queue[pos].CreateRevision
	w.setMyRev(myRev)
	if err := w.failure(); err != nil {
		return nil, err
	}
	blockers, need, err := admission(w.kind, queue[:pos])
	if err != nil {
		return nil, err
	}
	w.position = len(blockers)
	if w.setBlockers(blockers, need, readRev) {
		return c.admit(ctx, w, myRev, req)
	}
	if req.try {
		return nil, ErrHeld
	}
	stuck := time.NewTicker(c.cfg.ttl)
	defer stuck.Stop()
	for {
		target, covered, err := c.watchTarget(ctx, w)
		if err != nil {
			return nil, err
		}
		for covered && (target == w.dir || w.blocking(target)) {
			select {
			case <-w.wakec:
				if w.admitted() {
					return c.admit(ctx, w, myRev, req)
				}
			case <-w.fin.done():
				return nil, w.failure()
			case <-w.sess.fin.done():
				return nil, w.sess.cause()
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-c.bg.ctx.Done():
				return nil, ErrClosed
			case <-stuck.C:
				// Longer than a TTL behind the same record: say so if it
				// is a record that no session keeps, which never goes by
				// itself.
				if key, crev := w.oldestBlocker(); key != "" {
					c.checkForeign(ctx, key, crev)
				}
			}
		}
		if w.admitted() {
			return c.admit(ctx, w, myRev, req)
		}
		if err := c.reread(ctx, w); err != nil {
			return nil, err
		}
		if w.admitted() {
			return c.admit(ctx, w, myRev, req)
		}
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
		if err := c.retryable(ctx, w, err); err != nil {
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
	if err := waitFor(ctx, c, w, kw.created); err != nil {
		return "", false, err
	}
	if c.bg.ctx.Err() != nil {
		return "", false, ErrClosed // its watches stopped unconfirmed
	}
	return key, kw.start <= at, nil
}

// reread reads the records ahead of w again and sets its blockers.
func (c *Client) reread(ctx context.Context, w *waiter) error {
	opts := queueKeys(clientv3.WithMaxCreateRev(w.myRev))
	for {
		w.reading()
		resp, err := c.etcd.Get(ctx, w.dir, opts...)
		if err == nil {
			pos := -1
			for i, kv := range resp.Kvs {
				if string(kv.Key) == w.key && kv.CreateRevision == w.myRev {
					pos = i
					break
				}
			}
			if pos < 0 {
				return ErrKeyDeleted
			}
			blockers, need, err := admission(w.kind, resp.Kvs[:pos])
			if err != nil {
				return err
			}
			w.setBlockers(blockers, need, resp.Header.Revision)
			return nil
		}
		if err := c.retryable(ctx, w, err); err != nil {
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

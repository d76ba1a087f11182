package lease

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// enqueue writes w's record (value val) and returns the queue up to and
// including it, and the revision that was read at, made current with the
// watch of w's key (see catchUp). written reports whether the record was
// written.
//
// A lock that looks free is written in one transaction that compares the
// whole directory with nothing: when it is empty the record is the queue,
// and nothing needs reading. Otherwise (and for a lock this Client found
// taken lately, see busyLocks) the write compares w's key only (unless an
// earlier try of this acquisition already wrote it, its reply lost) and
// reads the queue in the same transaction. A transaction that does not
// write is followed by a read of the queue and of w's key: etcd charges a
// transaction for its unused branch (measured: more than a read of the
// queue), so writes carry none, and not writing is rare. A try of an
// exclusive record reads the head in the same transaction's other branch,
// so that polling a held lock costs one request.
func (c *Client) enqueue(ctx context.Context, w *waiter, val string, try bool) (queue []*mvccpb.KeyValue, readRev int64, written bool, err error) {
	put := clientv3.OpPut(w.key, val, clientv3.WithLease(w.sess.id))
	alone := try && w.kind == exclusive
	// reads are built only when needed: an acquisition that writes (the
	// common case) has no use for them.
	reads := func() []clientv3.Op {
		q := clientv3.OpGet(w.dir, queueKeys()...)
		if alone {
			// The head is enough to tell who holds it.
			q = clientv3.OpGet(w.dir, headKey()...)
		}
		return []clientv3.Op{q, clientv3.OpGet(w.key)}
	}
	empty := clientv3.Compare(clientv3.CreateRevision(w.dir).WithPrefix(), "=", 0)
	fast := !try && !c.recs.busy.has(w.dir)
	for {
		var txn clientv3.Txn
		switch {
		case alone:
			txn = c.etcd.Txn(ctx).If(empty).Then(put).Else(reads()...)
		case fast:
			txn = c.etcd.Txn(ctx).If(empty).Then(put)
		default:
			txn = c.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", 0)).
				Then(put, clientv3.OpGet(w.dir, queueKeys()...))
		}
		resp, err := txn.Commit()
		if err != nil {
			// The request may have gone out; if so etcd may still apply
			// it, now or later.
			w.uncertain = true
			if err := c.retryable(ctx, w, err); err != nil {
				return nil, 0, written, err
			}
			continue
		}
		if resp.Succeeded {
			written, readRev = true, resp.Header.Revision
			queue = []*mvccpb.KeyValue{{Key: []byte(w.key), CreateRevision: readRev, ModRevision: readRev}}
			if !alone && !fast {
				queue = resp.Responses[1].GetResponseRange().Kvs
				c.recs.busy.note(w.dir, len(queue) > 1)
			}
			break
		}
		if fast {
			// Someone's record is there (or this acquisition's own, from
			// a try whose reply was lost): queue behind it.
			fast = false
			c.recs.busy.note(w.dir, true)
			continue
		}
		// Not written: the key or the lock exists. Read them (a try has
		// already): this acquisition's own record, written by an earlier
		// try whose reply was lost, or someone else's.
		if !alone {
			resp, err = c.etcd.Txn(ctx).Then(reads()...).Commit()
			if err != nil {
				if err := c.retryable(ctx, w, err); err != nil {
					return nil, 0, written, err
				}
				continue
			}
		}
		readRev = resp.Header.Revision
		if own := resp.Responses[1].GetResponseRange().Kvs; len(own) > 0 {
			if string(own[0].Value) != val {
				return nil, 0, written, errSlotTaken
			}
			written = true
		}
		queue = resp.Responses[0].GetResponseRange().Kvs
		break
	}
	if try && w.kind == exclusive && !written {
		return queue, readRev, written, nil // held: nothing to wait for
	}
	q, at, err := c.catchUp(ctx, w, val, readRev)
	if q != nil {
		queue, readRev = q, at
	}
	return queue, readRev, written, err
}

// maxBusy bounds busyLocks; forgetting a lock costs its next acquisition
// one transaction.
const maxBusy = 4096

// busyLocks are the lock directories in which this Client found someone
// else's record when it last wrote its own. Writing into a free lock
// skips the read of its queue (see enqueue), but the attempt fails, and
// costs a transaction, when the lock is taken; a lock seen taken is
// therefore written the queueing way until an acquisition finds it free
// again.
type busyLocks struct {
	mu   busyMutex
	dirs map[string]struct{}
}

func (b *busyLocks) has(dir string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.dirs[dir]
	return ok
}

// note records whether dir was found taken.
func (b *busyLocks) note(dir string, taken bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !taken:
		delete(b.dirs, dir)
	case b.dirs == nil || len(b.dirs) >= maxBusy:
		b.dirs = map[string]struct{}{dir: {}}
	default:
		b.dirs[dir] = struct{}{}
	}
}

// catchUp makes sure that the watch of w's key delivers every event after
// readRev, the revision the queue was read at. A watch started after that
// (a key this Client had not watched yet, whose watch etcd confirmed after
// the write) may have missed some: then the queue and the waiter's own
// record are read again, and the new queue and its revision returned.
func (c *Client) catchUp(ctx context.Context, w *waiter, val string, readRev int64) ([]*mvccpb.KeyValue, int64, error) {
	if err := waitFor(ctx, c, w, w.own.created); err != nil {
		return nil, 0, err
	}
	if w.own.start <= readRev {
		return nil, 0, nil
	}
	for {
		w.reading()
		resp, err := c.etcd.Get(ctx, w.dir, queueRecords()...)
		if err == nil {
			for _, kv := range resp.Kvs {
				if string(kv.Key) == w.key {
					if string(kv.Value) != val {
						return nil, 0, ErrKeyOverwritten
					}
					return resp.Kvs, resp.Header.Revision, nil
				}
			}
			return nil, 0, ErrKeyDeleted
		}
		if err := c.retryable(ctx, w, err); err != nil {
			return nil, 0, err
		}
	}
}

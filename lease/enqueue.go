package lease

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueOpts reads a lock's queue: record keys (no values) in the order they
// were written.
func queueOpts() []clientv3.OpOption {
	return queueOptions[:len(queueOptions):len(queueOptions)] // appends copy
}

var queueOptions = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
	clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}

// enqueue writes w's record (value val) and returns the queue up to and
// including it, and the revision that was read at, made current with the
// watch of w's key (see catchUp). It writes the record unless an earlier
// try of this acquisition already did (its reply lost), reading the queue
// in the same transaction; a try of an exclusive record writes only if the
// lock has no record at all, and then has nothing to read. Otherwise a
// transaction that does not write is followed by a read of the queue and
// of w's key: etcd charges for a transaction's unused branch (about 50 µs
// of a 0.8 ms write here), so the write carries none, and not writing is
// rare (a retry after a lost reply, a key taken). A try reads in its own
// transaction's other branch, so that polling a held lock costs one
// request. written reports whether the record was written.
func (c *Client) enqueue(ctx context.Context, w *waiter, val string, try bool) (queue []*mvccpb.KeyValue, readRev int64, written bool, err error) {
	put := clientv3.OpPut(w.key, val, clientv3.WithLease(w.sess.id))
	alone := try && w.kind == exclusive
	// reads are built only when needed: an acquisition that writes (the
	// common case) has no use for them.
	reads := func() []clientv3.Op {
		q := clientv3.OpGet(w.dir, queueOpts()...)
		if alone {
			// The head is enough to tell who holds it.
			q = clientv3.OpGet(w.dir, append(queueOpts(), clientv3.WithLimit(1))...)
		}
		return []clientv3.Op{q, clientv3.OpGet(w.key)}
	}
	cond := clientv3.Compare(clientv3.CreateRevision(w.key), "=", 0)
	then := []clientv3.Op{put, clientv3.OpGet(w.dir, queueOpts()...)}
	var orElse []clientv3.Op
	if alone {
		cond = clientv3.Compare(clientv3.CreateRevision(w.dir).WithPrefix(), "=", 0)
		then = then[:1]
		orElse = reads() // one request either way, so that polling stays cheap
	}
	for {
		resp, err := c.etcd.Txn(ctx).If(cond).Then(then...).Else(orElse...).Commit()
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
			if !alone {
				queue = resp.Responses[1].GetResponseRange().Kvs
			}
			break
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
		resp, err := c.etcd.Get(ctx, w.dir, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
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

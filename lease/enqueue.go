package lease

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueOpts reads a lock's queue: record keys (no values) in the order they
// were written.
func queueOpts() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
}

// enqueue writes w's record (value val) and returns the queue read in the
// same transaction and the revision it was read at, made current with the
// watch of w's key (see catchUp). A try of an exclusive record writes only
// if the lock has no record at all. written reports whether the record was
// written.
func (c *Client) enqueue(ctx context.Context, w *waiter, val string, try bool) (queue []*mvccpb.KeyValue, readRev int64, written bool, err error) {
	put := clientv3.OpPut(w.key, val, clientv3.WithLease(w.sess.id))
	// Write the record unless a previous try of this acquisition already
	// did (its reply lost), and read the queue in the same transaction.
	cond := clientv3.Compare(clientv3.CreateRevision(w.key), "=", 0)
	orElse := clientv3.OpGet(w.dir, queueOpts()...)
	if try && w.kind == exclusive {
		// Write only if the lock has no record at all; the head is enough
		// to tell who holds it.
		cond = clientv3.Compare(clientv3.CreateRevision(w.dir).WithPrefix(), "=", 0)
		orElse = clientv3.OpGet(w.dir, append(queueOpts(), clientv3.WithLimit(1))...)
	}
	for {
		resp, err := c.etcd.Txn(ctx).If(cond).
			Then(put, clientv3.OpGet(w.dir, queueOpts()...)).
			Else(orElse, clientv3.OpGet(w.key)).
			Commit()
		if err != nil {
			// The request may have gone out; if so etcd may still apply
			// it, now or later.
			w.uncertain = true
			if err := c.retryable(ctx, w, err); err != nil {
				return nil, 0, written, err
			}
			continue
		}
		readRev = resp.Header.Revision
		if resp.Succeeded {
			written = true
			queue = resp.Responses[1].GetResponseRange().Kvs
			break
		}
		// The key or the lock exists: this acquisition's own record,
		// written by an earlier try whose reply was lost, or someone
		// else's.
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

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
	e := &enqueuer{c: c, w: w, val: val, mode: c.writeMode(w, try)}
	for {
		done, err := e.step(ctx)
		if err != nil {
			return nil, 0, e.written, err
		}
		if done {
			break
		}
	}
	if e.mode == writeTry && !e.written {
		return e.queue, e.readRev, false, nil // held: nothing to wait for
	}
	q, at, err := c.catchUp(ctx, w, val, e.readRev)
	if q != nil {
		e.queue, e.readRev = q, at
	}
	return e.queue, e.readRev, e.written, err
}

// writeMode is how enqueue writes a record (see enqueue).
type writeMode uint8

const (
	writeTry    writeMode = iota // a try of an exclusive record: into a free lock, else read the head instead
	writeFree                    // into a lock that looks free, reading nothing
	writeQueued                  // behind whatever is there, reading the queue with the write
)

// writeMode chooses how w's record is written: a lock this Client found
// taken lately is written the queueing way at once.
func (c *Client) writeMode(w *waiter, try bool) writeMode {
	switch {
	case try && w.kind == exclusive:
		return writeTry
	case !try && !c.recs.busy.has(w.dir):
		return writeFree
	}
	return writeQueued
}

// enqueuer is one enqueue under way.
type enqueuer struct {
	c       *Client
	w       *waiter
	val     string
	mode    writeMode
	written bool               // the record was written
	queue   []*mvccpb.KeyValue // the queue up to w's record, once known
	readRev int64              // the revision queue was read at
}

// step sends one write of the record (with what its mode reads) and, if
// it did not write, the read that explains why. It reports whether the
// queue is known.
func (e *enqueuer) step(ctx context.Context) (bool, error) {
	resp, err := e.txn(ctx).Commit()
	if err != nil {
		// The request may have gone out; if so etcd may still apply it,
		// now or later.
		e.w.uncertain = true
		return false, e.c.pauseAfter(ctx, e.w, err)
	}
	if resp.Succeeded {
		e.wrote(resp)
		return true, nil
	}
	switch e.mode {
	case writeFree:
		// Someone's record is there (or this acquisition's own, from a
		// try whose reply was lost): queue behind it.
		e.mode = writeQueued
		e.c.recs.busy.note(e.w.dir, true)
		return false, nil
	case writeQueued:
		// Not written: the key exists. Read it and the queue (a try has
		// already): this acquisition's own record, written by an earlier
		// try whose reply was lost, or someone else's.
		if resp, err = e.c.etcd.Txn(ctx).Then(e.reads()...).Commit(); err != nil {
			return false, e.c.pauseAfter(ctx, e.w, err)
		}
	}
	return true, e.found(resp)
}

// txn is the write of e's mode.
func (e *enqueuer) txn(ctx context.Context) clientv3.Txn {
	w := e.w
	put := clientv3.OpPut(w.key, e.val, clientv3.WithLease(w.sess.id))
	empty := clientv3.Compare(clientv3.CreateRevision(w.dir).WithPrefix(), "=", 0)
	switch e.mode {
	case writeTry:
		return e.c.etcd.Txn(ctx).If(empty).Then(e.withMark(put)...).Else(e.reads()...)
	case writeFree:
		return e.c.etcd.Txn(ctx).If(empty).Then(e.withMark(put)...)
	}
	// The marker after the read: the queue read is the records ahead and
	// w's own, as without one.
	return e.c.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", 0)).
		Then(e.withMark(put, clientv3.OpGet(w.dir, queueKeys()...))...)
}

// withMark is ops followed by the put of w's lock-delay marker, if it has
// one: in the record's transaction, so that the marker has the record's
// creation revision and its place in the queue.
func (e *enqueuer) withMark(ops ...clientv3.Op) []clientv3.Op {
	if e.w.mark != nil {
		ops = append(ops, e.w.mark.put())
	}
	return ops
}

// reads are the queue (its head only for a try: enough to tell who holds
// it) and w's key.
func (e *enqueuer) reads() []clientv3.Op {
	q := clientv3.OpGet(e.w.dir, queueKeys()...)
	if e.mode == writeTry {
		q = clientv3.OpGet(e.w.dir, headKey()...)
	}
	return []clientv3.Op{q, clientv3.OpGet(e.w.key)}
}

// wrote takes in a write that applied: the queue is what the write read,
// or, into a free lock, the record alone.
func (e *enqueuer) wrote(resp *clientv3.TxnResponse) {
	e.written, e.readRev = true, resp.Header.Revision
	e.queue = []*mvccpb.KeyValue{{Key: []byte(e.w.key), CreateRevision: e.readRev, ModRevision: e.readRev}}
	if e.mode == writeQueued {
		e.queue = resp.Responses[1].GetResponseRange().Kvs
		e.c.recs.busy.note(e.w.dir, len(e.queue) > 1)
	}
}

// found takes in the reads of a write that did not apply: the key holds
// this acquisition's record (an earlier try wrote it), someone else's
// (errSlotTaken), or nothing.
func (e *enqueuer) found(resp *clientv3.TxnResponse) error {
	e.readRev = resp.Header.Revision
	if own := resp.Responses[1].GetResponseRange().Kvs; len(own) > 0 {
		if string(own[0].Value) != e.val {
			return errSlotTaken
		}
		e.written = true
	}
	e.queue = resp.Responses[0].GetResponseRange().Kvs
	return nil
}

// catchUp makes sure that the watch of w's key delivers every event after
// readRev, the revision the queue was read at. A watch started after that
// (a key this Client had not watched yet, whose watch etcd confirmed after
// the write) may have missed some: then the queue and the waiter's own
// record are read again, and the new queue and its revision returned.
func (c *Client) catchUp(ctx context.Context, w *waiter, val string, readRev int64) ([]*mvccpb.KeyValue, int64, error) {
	if err := waitFor(ctx, c, w, c.recs.watches.Created(w.own)); err != nil {
		return nil, 0, err
	}
	if w.own.Start() <= readRev {
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
		if err := c.pauseAfter(ctx, w, err); err != nil {
			return nil, 0, err
		}
	}
}

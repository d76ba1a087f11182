package lease

import (
	"context"

	"github.com/fencekit/fencekit/lease/internal/record"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// enqueuer writes the records of one attempt, every member's in one
// transaction, and learns each member's queue up to and including its
// record, and the revision that was read at, made current with the watch
// of the member's key (see member.catchUp).
//
// When every lock looks free (none found taken lately, see busyLocks) the
// records are written in one transaction that compares each whole
// directory with nothing: when they are empty each record is its queue,
// and nothing needs reading. Otherwise the write compares each record's
// key only (an earlier write of this attempt, its reply lost, may have
// written it) and reads every queue in the same transaction. A
// transaction that does not write is followed by a read of the queues and
// of the members' keys: etcd charges a transaction for its unused branch
// (measured: more than a read of the queue), so writes carry none, and not
// writing is rare. A try of one exclusive record reads the head in the
// same transaction's other branch, so that polling a held lock costs one
// request. A transaction whose reply was lost is sent again: it then finds
// the records written (with this attempt's owner tokens) and reads the
// queues.
type enqueuer struct {
	c       *Client
	ms      []*member
	mode    writeMode
	written bool  // the records were written
	readRev int64 // the revision the queues were read at
}

// writeMode is how the enqueuer writes (see enqueuer).
type writeMode uint8

const (
	writeQueued writeMode = iota // behind whatever is there, reading the queues with the write
	writeTry                     // a try of one exclusive record: into a free lock, else read the head instead
	writeFree                    // into locks that look free, reading nothing
)

// enqueue writes the members' records and sets each member's queue and
// the revision it was read at.
func (e *enqueuer) enqueue(ctx context.Context) error {
	e.mode = e.firstMode()
	for {
		done, err := e.step(ctx)
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	if e.mode == writeTry && !e.written {
		return nil // held: nothing to wait for (see member.place)
	}
	for _, m := range e.ms {
		if err := m.catchUp(ctx, e.readRev); err != nil {
			return err
		}
	}
	return nil
}

// firstMode chooses how the records are written first: a try of one
// exclusive record probes; locks this Client found taken lately, and a
// set's try, which removes what it wrote, are written the queueing way.
func (e *enqueuer) firstMode() writeMode {
	req := e.ms[0].req
	if req.try {
		if len(e.ms) == 1 && req.kind == record.Exclusive {
			return writeTry
		}
		return writeQueued
	}
	for _, m := range e.ms {
		if e.c.recs.busy.has(m.w.dir) {
			return writeQueued
		}
	}
	return writeFree
}

// step sends one write of the records (with what its mode reads) and, if
// it did not write, the read that explains why. It reports whether the
// queues are known.
func (e *enqueuer) step(ctx context.Context) (bool, error) {
	resp, err := e.txn(ctx).Commit()
	if err != nil {
		// The request may have gone out; if so etcd may still apply it,
		// now or later.
		for _, m := range e.ms {
			m.w.rec.uncertain = true
		}
		return false, e.ms[0].pause(ctx, err)
	}
	if resp.Succeeded {
		e.wrote(resp)
		return true, nil
	}
	switch e.mode {
	case writeFree:
		// Someone's record is there (or this attempt's own, from a write
		// whose reply was lost): queue behind it.
		e.mode = writeQueued
		for _, m := range e.ms {
			e.c.recs.busy.note(m.w.dir, true)
		}
		return false, nil
	case writeQueued:
		// Not written: a key exists. Read the keys and the queues (a try
		// has already): this attempt's own records, written by a write
		// whose reply was lost, or someone else's.
		if resp, err = e.c.etcd.Txn(ctx).Then(e.reads()...).Commit(); err != nil {
			return false, e.ms[0].pause(ctx, err)
		}
	}
	return e.found(resp)
}

// txn is the write of e's mode. A member's lock-delay marker is put in the
// same transaction, so that it has the record's creation revision and its
// place in the queue; after the queue reads, which are thus the records
// ahead and the member's own, as without one.
func (e *enqueuer) txn(ctx context.Context) clientv3.Txn {
	n := len(e.ms)
	cmps := make([]clientv3.Cmp, 0, n)
	ops := make([]clientv3.Op, 0, 3*n)
	for _, m := range e.ms {
		ops = append(ops, clientv3.OpPut(m.w.key, m.val, clientv3.WithLease(m.w.sess.id)))
		if e.mode == writeQueued {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.w.key), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.w.dir).WithPrefix(), "=", 0))
		}
	}
	if e.mode == writeQueued {
		for _, m := range e.ms {
			ops = append(ops, clientv3.OpGet(m.w.dir, record.QueueKeys()...))
		}
	}
	for _, m := range e.ms {
		if m.w.rec.mark != nil {
			ops = append(ops, m.w.rec.mark.Put())
		}
	}
	txn := e.c.etcd.Txn(ctx).If(cmps...).Then(ops...)
	if e.mode == writeTry {
		txn = txn.Else(e.reads()...)
	}
	return txn
}

// reads are, per member, its queue (its head only for a try: enough to
// tell who holds it) and its key.
func (e *enqueuer) reads() []clientv3.Op {
	ops := make([]clientv3.Op, 0, 2*len(e.ms))
	for _, m := range e.ms {
		q := clientv3.OpGet(m.w.dir, record.QueueKeys()...)
		if e.mode == writeTry {
			q = clientv3.OpGet(m.w.dir, record.HeadKey()...)
		}
		ops = append(ops, q, clientv3.OpGet(m.w.key))
	}
	return ops
}

// wrote takes in a write that applied: each queue is what the write read,
// or, into a free lock, the record alone.
func (e *enqueuer) wrote(resp *clientv3.TxnResponse) {
	e.written, e.readRev = true, resp.Header.Revision
	n := len(e.ms)
	for i, m := range e.ms {
		m.readRev = e.readRev
		if e.mode != writeQueued {
			m.queue = []*mvccpb.KeyValue{{Key: []byte(m.w.key), CreateRevision: e.readRev, ModRevision: e.readRev}}
			continue
		}
		m.queue = resp.Responses[n+i].GetResponseRange().Kvs
		e.c.recs.busy.note(m.w.dir, len(m.queue) > 1)
	}
}

// found takes in the reads of a write that did not apply: each key holds
// this attempt's record (an earlier write applied), someone else's
// (errSlotTaken), or nothing. It reports whether the queues are known: a
// queueing write that finds none of its records is sent again.
func (e *enqueuer) found(resp *clientv3.TxnResponse) (bool, error) {
	e.readRev = resp.Header.Revision
	found := false
	for i, m := range e.ms {
		m.queue, m.readRev = resp.Responses[2*i].GetResponseRange().Kvs, e.readRev
		if own := resp.Responses[2*i+1].GetResponseRange().Kvs; len(own) > 0 {
			if string(own[0].Value) != m.val {
				return false, errSlotTaken
			}
			found = true
		}
	}
	e.written = e.written || found
	return found || e.mode == writeTry, nil
}

// catchUp makes sure that the watch of m's key delivers every event after
// readRev, the revision m's queue was read at. A watch started after that
// (a key this Client had not watched yet, whose watch etcd confirmed after
// the write) may have missed some: then the queue and the member's own
// record are read again, and the new queue and its revision kept.
func (m *member) catchUp(ctx context.Context, readRev int64) error {
	w := m.w
	m.readRev = readRev
	if _, err := m.wait(ctx, m.c.recs.watches.Created(w.own), nil); err != nil {
		return err
	}
	if w.own.Start() <= readRev {
		return nil
	}
	for {
		w.reading()
		resp, err := m.c.etcd.Get(ctx, w.dir, record.QueueRecords()...)
		if err == nil {
			for _, kv := range resp.Kvs {
				if string(kv.Key) == w.key {
					if string(kv.Value) != m.val {
						return ErrKeyOverwritten
					}
					m.queue, m.readRev = resp.Kvs, resp.Header.Revision
					return nil
				}
			}
			return ErrKeyDeleted
		}
		if err := m.pause(ctx, err); err != nil {
			return err
		}
	}
}

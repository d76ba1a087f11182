package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/lease/internal/resend"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// orphan is a record that an acquisition may have written and no longer
// wants: it is deleted, comparing its value (which holds that acquisition's
// unique owner token), in the background.
type orphan struct {
	value string
	sess  *session
	mark  *record.Mark // the acquisition's lock-delay marker, deleted with the record; nil if none
	// uncertain: a write of value may still be applied by etcd later (a
	// request went out and its reply never came), so the record can appear
	// after any delete. The entry then stays until its session ends: the
	// watch deletes the record whenever it appears, and the session's end
	// removes it for good (see session.tainted).
	uncertain bool
	busy      bool // a delete is in flight
}

// abandon removes the record of a failed acquisition in the background,
// so that the failed call returns within its ctx. The delete compares the
// record's value; until it succeeds the key stays claimed, and a late
// write that the watch sees is deleted at once. Records of a session that
// ended go with it.
func (t *records) abandon(s *session, key, value string, mark *record.Mark, uncertain bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || s.failure() != nil {
		return
	}
	o := orphan{value: value, sess: s, mark: mark, uncertain: uncertain}
	t.orphans[key] = o
	t.cleanOrphan(key, o)
	if uncertain {
		t.addUncertain(s)
	}
}

// addUncertain counts one more uncertain orphan on s, and taints s when
// there are too many to keep checking. t.mu is held.
func (t *records) addUncertain(s *session) {
	if s.addUncertain() {
		t.retireUnused(s)
	}
}

// releaseKey is called once l's record is gone: its key may be reused,
// unless the acquisition's own write might still apply late, in which
// case the key stays an orphan until the session ends. t.mu is held.
func (t *records) releaseKey(l *Lease) {
	if !l.rec.uncertain {
		l.sess.freeSlot(l.key)
		return
	}
	if l.sess.failure() == nil {
		t.orphans[l.key] = orphan{value: l.rec.value, sess: l.sess, uncertain: true}
		t.addUncertain(l.sess)
	}
}

// deleteOrphans retries the deletion of s's orphans; it runs after every
// renewal of s.
func (t *records) deleteOrphans(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, o := range t.orphans {
		if o.sess == s && !o.busy {
			t.cleanOrphan(k, o)
		}
	}
}

// cleanOrphan starts the owner-checked delete of one orphan. t.mu is held.
func (t *records) cleanOrphan(key string, o orphan) {
	if o.busy || t.closed {
		return
	}
	o.busy = true
	t.orphans[key] = o
	t.bg.Spawn(func() { t.deleteOrphan(key, o) })
}

func (t *records) deleteOrphan(key string, o orphan) {
	ctx, cancel := context.WithTimeout(t.bg.Context(), o.sess.ttl/3)
	cmp, del, get := deleteOps(key, o.value, o.mark)
	resp, err := t.etcd.Txn(ctx).If(cmp).Then(del...).Else(get...).Commit()
	cancel()
	if t.settleOrphan(key, o, resp, err) && t.bg.Context().Err() == nil {
		t.log.Warn("lease abandoned record left for background cleanup", logattr.Lock(record.DirName(key)), slog.String("error", err.Error()))
	}
}

// deleteOps are the owner-checked delete of the record at key: if it
// still holds value (the acquisition's unique owner token), delete it;
// otherwise read its key, to tell a record gone from someone else's.
// The lock-delay marker mark, if any, goes either way: its key is the
// acquisition's alone (see record.Mark), and it was written only with the
// record.
func deleteOps(key, value string, mark *record.Mark) (cmp clientv3.Cmp, del, get []clientv3.Op) {
	del, get = []clientv3.Op{clientv3.OpDelete(key)}, []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())}
	if mark != nil {
		del, get = append(del, clientv3.OpDelete(mark.Key)), append(get, clientv3.OpDelete(mark.Key))
	}
	return clientv3.Compare(clientv3.Value(key), "=", value), del, get
}

// settleOrphan applies the outcome of an orphan's delete, and reports
// whether the delete failed while the orphan is still the table's.
func (t *records) settleOrphan(key string, o orphan, resp *clientv3.TxnResponse, err error) (failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.orphans[key]
	if !ok || cur.value != o.value || cur.sess != o.sess {
		return false // its session ended meanwhile
	}
	cur.busy = false
	t.orphans[key] = cur
	switch {
	case err != nil:
		return true
	case cur.uncertain:
		// Deleted or absent for now; a late write may still come, until
		// the session is revoked.
		t.retireUnused(cur.sess)
	default:
		delete(t.orphans, key)
		if resp.Succeeded || len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			cur.sess.freeSlot(key) // gone; otherwise someone else's record holds the key
		}
	}
	return false
}

// leftRecord is a record that a failed acquisition wrote, or may have
// written, and gives up.
type leftRecord struct {
	name      string       // the lock's name, for a *LeftBehindError
	key       string       // the record's key
	value     string       // the value written: the acquisition's owner token and hold count
	mark      *record.Mark // the acquisition's lock-delay marker; nil if none
	uncertain bool         // a write of value may still apply later (see orphan.uncertain)
}

// removeNow deletes left, the records of a try that failed with err, in
// one transaction of owner-checked deletes (see deleteOps), and returns err
// once every record is gone. A transaction whose reply is lost is sent
// again, paced as a Release's tries are (see resend.Pacer), within ctx and for
// up to one TTL: every delete compares its record's unique value, so a
// resend after one that applied finds the records gone, as it would have.
//
// When it gets no reply, or etcd refuses, the records go to the background
// clean-up (records.abandon), and the error is a *LeftBehindError naming
// their locks. A record whose write may still apply later (uncertain) is
// handed to that clean-up first, whatever happens: it deletes the record
// whenever the watch sees it appear, until the session ends (see
// orphan.uncertain).
func (a *acquisition) removeNow(ctx context.Context, s *session, left []leftRecord, err error) error {
	c := a.c
	for _, r := range left {
		if r.uncertain {
			c.recs.abandon(s, r.key, r.value, r.mark, true)
		}
	}
	gone, cause := a.deleteLeft(ctx, s, left)
	if cause != nil {
		names := make([]string, len(left))
		for i, r := range left {
			names[i] = r.name
			if !r.uncertain {
				c.recs.abandon(s, r.key, r.value, r.mark, false)
			}
		}
		return &LeftBehindError{Locks: names, Err: err, Cause: cause}
	}
	for i, r := range left {
		if gone[i] && !r.uncertain {
			s.freeSlot(r.key) // otherwise someone else's record holds the key
		}
	}
	return err
}

// deleteLeft sends the deletes of left in one transaction until a reply
// comes (see removeNow), and reports for each record whether it is gone:
// deleted now, or found absent, rather than someone else's record under
// its key. cause is why no reply came, or etcd's refusal.
func (a *acquisition) deleteLeft(ctx context.Context, s *session, left []leftRecord) (gone []bool, cause error) {
	c := a.c
	ops := make([]clientv3.Op, len(left))
	for i, r := range left {
		cmp, del, get := deleteOps(r.key, r.value, r.mark)
		ops[i] = clientv3.OpTxn([]clientv3.Cmp{cmp}, del, get)
	}
	rs := resend.New(s.ttl, &c.lat.change)
	for {
		resp, err := a.txnWithin(ctx, rs.Deadline(), ops)
		switch {
		case err == nil:
			gone = make([]bool, len(left))
			for i := range left {
				r := resp.Responses[i].GetResponseTxn()
				gone[i] = r.Succeeded || len(r.Responses[0].GetResponseRange().Kvs) == 0
			}
			return gone, nil
		case errors.Is(record.RPCError(err), ErrPermissionDenied):
			return nil, record.RPCError(err)
		case !c.again(ctx, rs):
			return nil, unknown(ctx, err)
		}
	}
}

// txnWithin sends a transaction of ops, giving etcd d to reply, within
// ctx; no reply in time is errNoReply, not a ctx error, while ctx lives
// (as Lease.txnWithin).
func (a *acquisition) txnWithin(ctx context.Context, d time.Duration, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := a.c.etcd.Txn(tctx).Then(ops...).Commit()
	if err != nil && ctx.Err() == nil && tctx.Err() != nil {
		err = fmt.Errorf("%w within %v", errNoReply, d)
	}
	return resp, err
}

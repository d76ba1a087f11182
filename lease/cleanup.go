package lease

import (
	"context"
	"log/slog"

	"github.com/fencekit/fencekit/internal/logattr"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// orphan is a record that an acquisition may have written and no longer
// wants: it is deleted, comparing its value (which holds that acquisition's
// unique owner token), in the background.
type orphan struct {
	value string
	sess  *session
	mark  *delayMark // the acquisition's lock-delay marker, deleted with the record; nil if none
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
func (t *records) abandon(s *session, key, value string, mark *delayMark, uncertain bool) {
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
	if !l.uncertain {
		l.sess.freeSlot(l.key)
		return
	}
	if l.sess.failure() == nil {
		t.orphans[l.key] = orphan{value: l.written, sess: l.sess, uncertain: true}
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
	t.bg.spawn(func() { t.deleteOrphan(key, o) })
}

func (t *records) deleteOrphan(key string, o orphan) {
	ctx, cancel := context.WithTimeout(t.bg.ctx, o.sess.ttl/3)
	del, get := []clientv3.Op{clientv3.OpDelete(key)}, []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())}
	if o.mark != nil {
		// The marker's key is this acquisition's alone (see delayMark),
		// and it was written only with the record: it goes either way.
		del, get = append(del, clientv3.OpDelete(o.mark.key)), append(get, clientv3.OpDelete(o.mark.key))
	}
	resp, err := t.etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", o.value)).
		Then(del...).Else(get...).Commit()
	cancel()
	if t.settleOrphan(key, o, resp, err) && t.bg.ctx.Err() == nil {
		t.log.Warn("lease abandoned record left for background cleanup", logattr.Lock(dirName(key)), slog.String("error", err.Error()))
	}
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

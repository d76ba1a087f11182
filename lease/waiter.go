package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lease/internal/lifetime"
	"github.com/fencekit/fencekit/lease/internal/lockorder"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/owner"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
)

// waiter is one acquisition between writing its record and being admitted.
// Its fields below mu are guarded by mu; the records table calls onDelete,
// onPut and resync, under its own lock, as watch events arrive.
//
// A waiter is admitted when fewer than need of the records ahead of it in
// the queue block it (see admission). Records are only ever added behind
// it (creation revisions only grow), so once the queue is read the set of
// blockers can only shrink, one delete at a time. The Client watches only
// the last of them (a semaphore waiter: the whole directory), so that a
// release wakes one waiter and not the whole queue: when that record goes
// and the waiter knows of no other blocker left (the waiter right behind
// the head), it is admitted without reading the queue again; otherwise it
// reads the queue again and watches the new last blocker (see
// Client.awaitAdmission).
//
// Record keys are reused (see session.claimSlot), so the watch may deliver
// events of an earlier record under the same key. Every event is therefore
// judged by its revision against the creation revision of the record in
// question: a delete counts only if it came after that record was created.
type waiter struct {
	key, dir, owner string
	kind            record.Kind
	tok             owner.Token
	sess            *session
	own             *keyWatch     // covers key; set by records.subscribe
	block           *keyWatch     // covers the last blocker (a semaphore's: dir); guarded by records.mu
	wakec           chan struct{} // admitted, or something to look at
	fin             lifetime.End  // ends when the waiter's own record went
	rec             *entry        // the table's entry of its record, which its Lease takes over
	position        int           // records that blocked it when it queued
	queued          time.Time     // when the acquisition started

	mu       lockorder.WaiterMutex
	myRev    int64            // creation revision of the waiter's record; 0 until known
	ownDel   int64            // latest delete of the waiter's key seen before myRev was known
	blockers map[string]int64 // records ahead that block it: key -> creation revision; nil while reading
	readAt   int64            // revision of the read blockers came from
	need     int              // admitted once len(blockers) < need
	seen     map[string]int64 // latest delete revision per key seen while reading the queue
	// headAt is the revision at which a transfer made the waiter's record
	// the head of its queue (see headed), or 0.
	headAt int64
	// ownAt is the latest revision at which the waiter's own record is
	// known to exist (a queue read that found it, or a resync); goneAt the
	// latest revision at which a blocker was seen gone. Each watched key
	// has its own watch, and etcd's events of different watches reach
	// their consumers in no fixed order: a blocker's delete can arrive
	// before an earlier delete of the waiter's own record. So a waiter
	// admitted at a revision past ownAt confirms its record there first
	// (see Client.confirmOwn).
	ownAt, goneAt int64
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
	case w.blockers == nil:
		w.seen[key] = max(w.seen[key], rev)
	default:
		if crev, ok := w.blockers[key]; ok && rev > crev {
			delete(w.blockers, key)
			w.goneAt = max(w.goneAt, rev)
			w.wake() // admitted, or its target may be gone
		}
	}
}

// headed tells the waiter that a Term.Transfer to its record, created at
// rev, applied at revision at: that transaction compared the record's
// creation revision and deleted every record ahead of it. No record
// created before it can appear again, so nothing blocks it from then on,
// and its own record existed at at: it is admitted without a read.
func (w *waiter) headed(rev, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.myRev != rev {
		return // another record under the key, or one not placed yet: the watch admits it
	}
	w.headAt = at
	w.ownAt, w.goneAt = max(w.ownAt, at), max(w.goneAt, at)
	if w.blockers != nil {
		clear(w.blockers)
	}
	w.wake()
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

// resync applies what a read at revision at of the keys covers reports
// found, after a watch missed events: the waiter's own record gone or
// overwritten, blockers gone. It wakes the waiter if that admits it.
func (w *waiter) resync(covers func(string) bool, present map[string]*mvccpb.KeyValue, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.myRev == 0 || w.myRev > at {
		return // not written when read, as far as the waiter knows
	}
	if covers(w.key) {
		kv := present[w.key]
		switch {
		case kv == nil || kv.CreateRevision != w.myRev:
			w.fail(ErrKeyDeleted)
			return
		case !ownedBy(kv.Value, w.owner):
			w.fail(ErrKeyOverwritten)
			return
		}
		w.ownAt = max(w.ownAt, at)
	}
	if w.blockers == nil {
		return
	}
	for key, crev := range w.blockers {
		if b := present[key]; covers(key) && (b == nil || b.CreateRevision != crev) {
			delete(w.blockers, key)
			w.goneAt = max(w.goneAt, at)
		}
	}
	w.wake()
}

// confirm fails the waiter unless kvs (a read of its key) holds its own
// record: the same creation revision and its owner token.
func (w *waiter) confirm(kvs []*mvccpb.KeyValue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var kv *mvccpb.KeyValue
	if len(kvs) == 1 {
		kv = kvs[0]
	}
	switch {
	case kv == nil || kv.CreateRevision != w.myRev:
		w.fail(ErrKeyDeleted)
	case !ownedBy(kv.Value, w.owner):
		w.fail(ErrKeyOverwritten)
	}
}

// ownedBy reports whether a record's value carries the owner token tok.
func ownedBy(val []byte, tok string) bool {
	got, _, ok := record.DecodeValue(val)
	return ok && got == tok
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
	w.fin.End(err)
}

// failure returns why the waiter failed, or nil.
func (w *waiter) failure() error {
	return w.fin.Err()
}

// reading starts a queue read: deletes are remembered until setBlockers.
func (w *waiter) reading() {
	w.mu.Lock()
	w.blockers = nil
	w.seen = map[string]int64{}
	w.mu.Unlock()
}

// setBlockers sets the records that block the waiter, read at revision
// at together with its own record, less those the watch saw deleted
// during the read, and reports whether it is admitted.
func (w *waiter) setBlockers(blockers map[string]int64, need int, at int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, crev := range blockers {
		if gone := w.seen[key]; gone > crev || w.headAt > 0 {
			delete(blockers, key)
			w.goneAt = max(w.goneAt, gone, w.headAt)
		}
	}
	w.blockers, w.need, w.seen, w.readAt = blockers, need, nil, at
	w.ownAt = max(w.ownAt, at)
	return len(blockers) < need
}

// target returns what the waiter watches while it waits: the last record
// that blocks it (the one created last), or for a semaphore its whole
// directory, and the revision of the read it learnt that from.
func (w *waiter) target() (key string, prefix bool, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kind.Limit > 0 {
		return w.dir, true, w.readAt
	}
	var last int64
	for k, r := range w.blockers {
		if r > last {
			key, last = k, r
		}
	}
	return key, false, w.readAt
}

// blocking reports whether key still blocks the waiter, as far as it knows.
func (w *waiter) blocking(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.blockers[key]
	return ok
}

// admitted reports whether fewer than need records block the waiter.
func (w *waiter) admitted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.blockers != nil && len(w.blockers) < w.need
}

// unconfirmed returns the revision at which the waiter's own record must
// be confirmed before it is admitted, or 0 when a read already found it
// there as late as the last blocker was seen gone.
func (w *waiter) unconfirmed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.goneAt > w.ownAt {
		return w.goneAt
	}
	return 0
}

// oldestBlocker returns the first record still blocking the waiter.
func (w *waiter) oldestBlocker() (key string, crev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, r := range w.blockers {
		if crev == 0 || r < crev {
			key, crev = k, r
		}
	}
	return key, crev
}

// errSlotTaken reports that the key an acquisition was to write holds
// someone else's record.
var errSlotTaken = fmt.Errorf("%w: the record key was taken by someone else", ErrKeyOverwritten)

// errNoSession reports that etcd refused to attach a record to the session
// because the session lease no longer exists; the record was not written.
var errNoSession = fmt.Errorf("%w: the session lease no longer exists", ErrSessionExpired)

// pause waits a moment after a failed request while acquiring m, and
// returns nil to try again, or the error that ends the acquisition.
func (m *member) pause(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return errNoSession
	}
	if code, ok := record.ErrCode(err); ok {
		switch code {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.FailedPrecondition,
			codes.ResourceExhausted, codes.OutOfRange:
			return record.RPCError(err)
		}
	}
	t := time.NewTimer(25 * time.Millisecond)
	defer t.Stop()
	_, err = m.wait(ctx, nil, t.C)
	return err
}

// wait waits until ch or tick (nil: never) delivers or closes, and returns
// nil, reporting whether tick did, or the error that ends m's acquisition
// first: its record gone, its session ended, ctx ended, the Client closed.
func (m *member) wait(ctx context.Context, ch <-chan struct{}, tick <-chan time.Time) (ticked bool, err error) {
	w, c := m.w, m.c
	select {
	case <-ch:
		return false, nil
	case <-tick:
		return true, nil
	case <-w.fin.Done():
		return false, w.failure()
	case <-w.sess.fin.Done():
		return false, w.sess.cause()
	case <-ctx.Done():
		return false, context.Cause(ctx)
	case <-c.bg.Context().Done():
		return false, ErrClosed
	}
}

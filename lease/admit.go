package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/lease/internal/record"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// member is one lock of an acquisition's attempt (see acquisition): what
// was asked for, the waiter that follows its record's queue, the value
// its record is written with, and the queue as read when it was written.
type member struct {
	c       *Client
	req     request
	w       *waiter
	val     string
	queue   []*mvccpb.KeyValue // the queue up to the member's record, once known
	readRev int64              // the revision queue was read at
}

// await waits until fewer records than the member's kind allows block it
// in its queue, and returns the held lease. A record deleted by a
// Term.Transfer that passed it over fails with errSkipped.
func (m *member) await(ctx context.Context) (*Lease, error) {
	l, err := m.awaitAdmission(ctx)
	if err != nil && errors.Is(err, ErrKeyDeleted) && m.skipped(ctx) {
		err = errSkipped
	}
	return l, err
}

// awaitAdmission waits until m is admitted and returns the held lease.
//
// While it waits, the Client watches only the last record that blocks m
// (see waiter.target), so that one release wakes the one waiter behind it
// and not the whole queue. When that record goes, m is admitted if no
// other blocker is left as far as it knows; otherwise it reads the queue
// again and watches the new last blocker (see waitBehind).
func (m *member) awaitAdmission(ctx context.Context) (*Lease, error) {
	myRev, admitted, err := m.place()
	if err != nil {
		return nil, err
	}
	if !admitted && m.req.try {
		return nil, ErrHeld
	}
	stuck := time.NewTicker(m.c.cfg.ttl)
	defer stuck.Stop()
	for !admitted {
		if err := m.waitBehind(ctx, stuck.C); err != nil {
			return nil, err
		}
		admitted = m.w.admitted()
	}
	return m.admit(ctx, myRev)
}

// place finds m's record in its queue, read when it was written, and sets
// what blocks it. It returns the record's creation revision, and whether
// m is admitted.
func (m *member) place() (int64, bool, error) {
	w, queue := m.w, m.queue
	pos := record.Position(queue, w.key, 0)
	switch {
	case pos < 0 && m.req.try:
		return 0, false, ErrHeld
	case pos < 0:
		return 0, false, ErrKeyDeleted
	}
	myRev := queue[pos].CreateRevision
	w.setMyRev(myRev)
	if err := w.failure(); err != nil {
		return 0, false, err
	}
	blockers, need, err := record.Admission(w.kind, queue[:pos], myRev)
	if err != nil {
		return 0, false, err
	}
	w.position = len(blockers)
	return myRev, w.setBlockers(blockers, need, m.readRev), nil
}

// waitBehind waits behind m's target (see watchTarget) until that record
// goes or m is admitted, and reads the queue again unless m is admitted
// then. A waiter whose watch started after its read reads at once; one
// stuck behind the same records for a TTL checks for a foreign record.
func (m *member) waitBehind(ctx context.Context, stuck <-chan time.Time) error {
	w := m.w
	target, covered, err := m.watchTarget(ctx)
	if err != nil {
		return err
	}
	for covered && (target == w.dir || w.blocking(target)) && !w.admitted() {
		if err := m.waitEvent(ctx, stuck); err != nil {
			return err
		}
	}
	if w.admitted() {
		return nil
	}
	return m.reread(ctx)
}

// waitEvent waits for m's waiter to be woken (see waiter.wake), or the
// TTL tick stuck, and returns nil, or the error that ends m's acquisition
// first.
func (m *member) waitEvent(ctx context.Context, stuck <-chan time.Time) error {
	ticked, err := m.wait(ctx, m.w.wakec, stuck)
	if ticked {
		// Longer than a TTL behind the same record: say so if it is a
		// record that no session keeps, which never goes by itself.
		if key, crev := m.w.oldestBlocker(); key != "" {
			m.checkForeign(ctx, key, crev)
		}
	}
	return err
}

// admit turns the admitted member into a held lease (see promote), once
// its own record is known to have existed when the last blocker went.
func (m *member) admit(ctx context.Context, myRev int64) (*Lease, error) {
	if at := m.w.unconfirmed(); at != 0 && !m.c.recs.orderedWithOwn(m.w) {
		if err := m.confirmOwn(ctx, at); err != nil {
			return nil, err
		}
	}
	return m.promote(myRev)
}

// confirmOwn reads m's own record as it was at revision at, when a blocker
// was seen gone, and fails m if it was gone or someone else's by then. A
// serializable read at that revision is answered by any member that has
// applied it; one that has not (ErrFutureRev), or a revision compacted
// away, leads to a read of the present instead: a record still there with
// w's creation revision was there at every revision since.
func (m *member) confirmOwn(ctx context.Context, at int64) error {
	w, c := m.w, m.c
	for {
		resp, err := c.etcd.Get(ctx, w.key, clientv3.WithRev(at), clientv3.WithSerializable())
		if errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrCompacted) {
			resp, err = c.etcd.Get(ctx, w.key)
		}
		if err == nil {
			w.confirm(resp.Kvs)
			return w.failure()
		}
		if err := m.pause(ctx, err); err != nil {
			return err
		}
	}
}

// watchTarget makes the Client watch what m waits behind (see
// waiter.target), and returns it. covered reports whether that watch
// delivers every event since w's blockers were read; if not, they must be
// read again. A semaphore waiter's target is its directory, behind which
// it waits until admitted.
func (m *member) watchTarget(ctx context.Context) (target string, covered bool, err error) {
	key, prefix, at := m.w.target()
	if key == "" {
		return "", false, nil
	}
	kw := m.c.recs.watchBehind(m.w, key, prefix)
	if _, err := m.wait(ctx, m.c.recs.watches.Created(kw), nil); err != nil {
		return "", false, err
	}
	if m.c.bg.Context().Err() != nil {
		return "", false, ErrClosed // its watches stopped unconfirmed
	}
	return key, kw.Start() <= at, nil
}

// reread reads the records ahead of m again and sets its blockers.
func (m *member) reread(ctx context.Context) error {
	w := m.w
	opts := record.QueueKeys(clientv3.WithMaxCreateRev(w.myRev))
	for {
		w.reading()
		resp, err := m.c.etcd.Get(ctx, w.dir, opts...)
		if err == nil {
			pos := record.Position(resp.Kvs, w.key, w.myRev)
			if pos < 0 {
				return ErrKeyDeleted
			}
			blockers, need, err := record.Admission(w.kind, resp.Kvs[:pos], w.myRev)
			if err != nil {
				return err
			}
			w.setBlockers(blockers, need, resp.Header.Revision)
			return nil
		}
		if err := m.pause(ctx, err); err != nil {
			return err
		}
	}
}

// checkForeign reports a record in a lock's queue that no session keeps
// alive (written by something other than a fencekit Client, or detached
// from its lease): it blocks the lock until an operator deletes it.
func (m *member) checkForeign(ctx context.Context, key string, crev int64) {
	c := m.c
	resp, err := c.etcd.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != crev {
		return
	}
	kv := resp.Kvs[0]
	_, _, ok := record.DecodeValue(kv.Value)
	if kv.Lease != 0 && ok {
		return
	}
	c.met.Foreign.Inc()
	c.log.Warn("lease queue blocked by a record no session keeps; delete it (etcdctl del, or fencekit release --fence) to unblock the lock",
		logattr.Lock(record.DirName(key)), slog.String("key", key), logattr.Fence(crev),
		slog.Bool("has_lease", kv.Lease != 0), slog.Bool("fencekit_value", ok))
}

// promote turns m's waiter into a held lease, unless its record or
// session went meanwhile (see records.replace).
func (m *member) promote(rev int64) (*Lease, error) {
	c, w, req := m.c, m.w, m.req
	l := &Lease{
		c:        c,
		name:     req.name,
		key:      w.key,
		kind:     w.kind,
		owner:    w.tok,
		acquired: time.Now(),
		rev:      rev,
		sess:     w.sess,
		position: w.position,
		queued:   w.queued,
		rec:      w.rec,
	}
	l.confirm(1, req.payload, rev)
	l.fin.Init()
	if err := c.recs.replace(w, l); err != nil {
		return nil, err
	}
	if req.maxHold > 0 {
		l.capHold(req.maxHold)
	}
	return l, nil
}

// request is one acquisition asked for.
type request struct {
	name    string
	kind    record.Kind
	try     bool          // fail with ErrHeld rather than wait
	payload string        // an election candidate's public value
	op      string        // for errors: "acquire", "lock", ...
	maxHold time.Duration // see WithMaxHold; 0: no cap
	// lockDelay is the delay of WithLockDelay, in whole seconds; 0: none.
	lockDelay time.Duration
	// ttl is the TTL of WithLeaseTTL: the TTL of the session the record
	// goes on; 0: the Client's.
	ttl time.Duration
}

package lease

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencekit/fencekit/lease/internal/lifetime"
	"github.com/fencekit/fencekit/lease/internal/lockorder"
	"github.com/fencekit/fencekit/lease/internal/record"
	"github.com/fencekit/fencekit/lease/internal/watchmux"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// records is the table of every record a Client knows, keyed by record
// key (and so by lock directory): the leases it holds, the acquisitions
// waiting in a queue, and the orphans being deleted. It owns the Client's
// watches and is their one event sink (put, deleted, resync), so a watch
// event, a promotion of a waiter into a holder and the end of a session
// are each judged under one lock, mu, against the same state.
//
// Its operations lock mu themselves; the unexported helpers documented
// "t.mu is held" are their steps. Under mu the table takes a waiter's,
// a session's and a Lease's own locks (see the lock order in doc.go),
// and never calls out of the package: leases end after mu is released.
type records struct {
	etcd   *clientv3.Client
	bg     *lifetime.Group
	log    *slog.Logger
	keeper sessionKeeper
	busy   busyLocks // lock directories found taken lately (see enqueue); its own lock

	mu      lockorder.RecordsMutex
	closed  bool
	watches *watchmux.Set
	held    map[string]*Lease  // record key -> lease
	waiters map[string]*waiter // own record key -> waiter
	byDir   map[string]map[*waiter]struct{}
	orphans map[string]orphan // record key -> record to delete
	// uses counts, per session, its leases in held and its waiters in
	// waiters, so that whether a session is unused is known without a
	// scan (see retireUnused); a session without any has no entry.
	uses map[*session]int
	// swept is when sweep last ran (see sweep); ttl is the Client's TTL.
	swept time.Time
	ttl   time.Duration
}

// sessionKeeper is what the table asks of the Client's session lifecycle.
type sessionKeeper interface {
	// retire ends and revokes s, tainted and unused, in the background.
	retire(s *session)
	// checkGone finds out, in the background, whether s is gone, now that
	// records of s were seen deleted (see session.noteDeleted).
	checkGone(s *session)
}

func newRecords(cli *clientv3.Client, bg *lifetime.Group, log *slog.Logger, cfg config, keeper sessionKeeper, stats watchmux.Stats) *records {
	t := &records{
		etcd:    cli,
		bg:      bg,
		log:     log,
		keeper:  keeper,
		held:    map[string]*Lease{},
		waiters: map[string]*waiter{},
		byDir:   map[string]map[*waiter]struct{}{},
		orphans: map[string]orphan{},
		uses:    map[*session]int{},
		ttl:     cfg.ttl,
	}
	t.watches = watchmux.New(watchmux.Config{Etcd: cli, Context: bg.Context(), Go: bg.Spawn, Sleep: bg.Sleep, Log: log,
		TTL: cfg.ttl, Sink: (*eventSink)(t), Stats: stats, Used: t.used, Mu: &lockorder.StreamMutex{}})
	return t
}

// entry is the table's state of one record this Client wrote, from its
// write until the Client lets it go, whoever follows the record meanwhile
// (its waiter, then its Lease): what the features that attach to a record
// keep, rather than the handles. value, mark and uncertain are set by the
// acquiring goroutine before its waiter becomes a Lease, and not changed
// after; the other fields are guarded by the table's lock.
type entry struct {
	value string       // the value the acquisition wrote: its owner token and hold count 1
	mark  *record.Mark // the lock-delay marker written with the record; nil if none
	// uncertain: a request that wrote the record got no reply, so a copy
	// of the write may still apply after the record is deleted (see
	// orphan.uncertain).
	uncertain bool

	// askRev is the creation revision of the record a request to release
	// named while the record was waited for (see records.ask), or 0;
	// askTo the successor a request to transfer named, or 0. The Lease
	// takes them over when it is admitted (see records.replace).
	askRev, askTo int64
	// Whether a delete of the held record may be its holder's own Release,
	// and whether the watch saw one while it was in flight (see relState).
	rel       relState
	sawDelete bool
}

// ending is a lease to end, and why, once the table's lock is released.
type ending struct {
	l   *Lease
	err error
}

func endAll(es []ending) {
	for _, e := range es {
		e.l.end(e.err)
	}
}

// close stops routing: from now on events change nothing, and Close ends
// every lease and wait.
func (t *records) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
}

// subscribe registers w, whose record is about to be written, and starts
// the watch of its key (and, for a semaphore, of its directory).
func (t *records) subscribe(w *waiter) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if w.sess.failure() != nil {
		return errRetired // ended since this acquisition picked it: try another
	}
	w.reading()
	w.own = t.watches.Own(w.key)
	if w.kind.Limit > 0 {
		w.block = t.watches.Hold(w.dir, true) // a permit may come from any holder
	}
	t.waiters[w.key] = w
	t.uses[w.sess]++
	if t.byDir[w.dir] == nil {
		t.byDir[w.dir] = map[*waiter]struct{}{}
	}
	t.byDir[w.dir][w] = struct{}{}
	return nil
}

// unsubscribe forgets w, which gave up.
func (t *records) unsubscribe(w *waiter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unlink(w)
	t.retireUnused(w.sess)
}

// replace turns w into the holder l, unless w's record or session went
// meanwhile: under the lock the watch delivers under, so no loss is missed.
func (t *records) replace(w *waiter, l *Lease) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unlink(w)
	if err := w.failure(); err != nil {
		return err
	}
	if err := w.sess.failure(); err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		return fmt.Errorf("session ended while acquiring: %w", err)
	}
	t.hold(l)
	if w.rec.askRev == l.rev {
		l.asked.request(w.rec.askTo) // asked while it was being admitted
	}
	return nil
}

// forget stops tracking l, which ended: the watch no longer judges its
// record, and when the record is gone its key may be reused.
func (t *records) forget(l *Lease, recordGone bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.finish(l, recordGone)
}

// watchBehind makes the table watch key (every key under it if prefix)
// for w, which waits behind it, and returns that watch.
func (t *records) watchBehind(w *waiter, key string, prefix bool) *keyWatch {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.block == nil || !w.block.Covers(key) || !t.watches.Current(w.block) {
		// None yet, another target, or a watch stopped since.
		old := w.block
		w.block = t.watches.Hold(key, prefix)
		t.watches.Drop(old)
	}
	return w.block
}

// orderedWithOwn reports whether the watch w waits on also covers w's own
// record, so that it delivered any delete of that record before the
// blocker's later one.
func (t *records) orderedWithOwn(w *waiter) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return w.block != nil && w.block.Covers(w.key) && t.watches.Current(w.block)
}

// retireIfIdle retires s if it is closed to new acquisitions (tainted,
// full or idle too long) and nothing uses it.
func (t *records) retireIfIdle(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retireUnused(s)
}

// dropSession ends s with cause, unless it has ended already, and
// forgets everything of it: its leases end (ErrReleased for one whose last
// Release had an unknown outcome, which the session's end carries out),
// its orphans die with it. It returns how many leases were lost, and
// whether this call ended s.
func (t *records) dropSession(s *session, cause error) (lost int, ended bool) {
	closing := errors.Is(cause, ErrClosed)
	var released, lose []ending
	t.mu.Lock()
	if !s.finish(cause) {
		t.mu.Unlock()
		return 0, false
	}
	for k, l := range t.held {
		if t.uses[s] == 0 {
			break // none of s's left: the scan is over
		}
		if l.sess != s {
			continue
		}
		t.unhold(k)
		switch {
		case !closing && l.rec.rel == relPending:
			released = append(released, ending{l, ErrReleased})
		case closing:
			lose = append(lose, ending{l, cause})
		default:
			lose = append(lose, ending{l, l.lostError(cause)})
		}
	}
	for k, o := range t.orphans {
		if o.sess == s {
			delete(t.orphans, k) // the record dies with the session
		}
	}
	t.mu.Unlock()
	endAll(released)
	endAll(lose)
	return len(lose), true
}

// sweep stops the watches nothing has used for a TTL; it runs after every
// session renewal, and does its work (a scan of every watch) at most once
// per third of the Client's TTL, however many sessions renew.
func (t *records) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now(); now.Sub(t.swept) >= t.ttl/3 {
		t.swept = now
		t.watches.Sweep()
	}
}

// put applies a watch event: key written with kv. Keys are reused, so an
// event may be about an earlier record under the same key: only events
// after a record's creation concern it.
func (t *records) put(kv *mvccpb.KeyValue) {
	key, rev := string(kv.Key), kv.ModRevision
	var ends []ending
	t.mu.Lock()
	if t.closed { // Close ends everything
		t.mu.Unlock()
		return
	}
	tok, _, ok := record.DecodeValue(kv.Value)
	if l := t.held[key]; l != nil && rev > l.rev && l.rec.rel == relNone {
		if kv.CreateRevision != l.rev || !ok || tok != l.owner.Value() {
			t.unhold(key)
			ends = append(ends, ending{l, l.lostError(ErrKeyOverwritten)})
		}
	}
	if w := t.waiters[key]; w != nil {
		w.onPut(rev, ok && tok == w.owner)
	}
	if o, found := t.orphans[key]; found && string(kv.Value) == o.value {
		// A write of a failed acquisition applied late: delete it now
		// rather than at the next renewal.
		t.cleanOrphan(key, o)
	}
	t.mu.Unlock()
	endAll(ends)
}

// deleted applies a watch event: key deleted at rev. It ends a held lease
// whose record it was (see recordGone), and tells the waiters of the lock.
func (t *records) deleted(key string, rev int64) {
	var ends []ending
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if l := t.held[key]; l != nil && rev > l.rev {
		ends = t.recordGone(l, ends)
	}
	for w := range t.byDir[record.DirOf(key)] {
		w.onDelete(key, rev)
	}
	t.mu.Unlock()
	endAll(ends)
}

// resync applies a read at revision at of the keys covers accepts, after
// a watch missed events: held leases whose record is gone, recreated or
// overwritten end, and waiters learn what the missed events could have
// told them.
func (t *records) resync(covers func(string) bool, present map[string]*mvccpb.KeyValue, at int64) bool {
	var ends []ending
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	for k, l := range t.held {
		if !covers(k) || l.rev > at {
			continue // created after the read: the watch covers it
		}
		kv := present[k]
		if kv == nil || kv.CreateRevision != l.rev {
			ends = t.recordGone(l, ends)
			continue
		}
		if l.rec.rel == relNone && !ownedBy(kv.Value, l.owner.Value()) {
			t.unhold(k)
			ends = append(ends, ending{l, l.lostError(ErrKeyOverwritten)})
		}
	}
	for _, w := range t.waiters {
		w.resync(covers, present, at)
	}
	t.mu.Unlock()
	endAll(ends)
	return true
}

// used reports whether the table still needs the events of key, one of
// the Client's record keys. t.mu is held.
func (t *records) used(key string) bool {
	_, held := t.held[key]
	_, waiting := t.waiters[key]
	_, orphan := t.orphans[key]
	return held || waiting || orphan
}

// unlink stops routing watch events to w. t.mu is held.
func (t *records) unlink(w *waiter) {
	t.watches.Drop(w.block)
	w.block = nil
	if t.waiters[w.key] == w {
		delete(t.waiters, w.key)
		t.unuse(w.sess)
	}
	if ws := t.byDir[w.dir]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(t.byDir, w.dir)
		}
	}
}

// ask delivers a request to release the record key created at rev: to
// the lease that holds it, or to the waiter being admitted with it (the
// request can only have been written once the record headed its queue,
// which may be before the waiter became a lease; promote passes it on).
func (t *records) ask(key string, rev, to int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.held[key]; l != nil {
		if l.rev == rev {
			l.asked.request(to)
		}
		return
	}
	if w := t.waiters[key]; w != nil {
		if to != 0 {
			w.rec.askTo = to
		}
		// The newest revision: an older one is a request for an earlier
		// record under the same key, handled late.
		w.rec.askRev = max(w.rec.askRev, rev)
	}
}

// headed tells the waiter whose record key was created at rev that a
// transfer made that record the head of its queue at revision at (see
// waiter.headed).
func (t *records) headed(key string, rev, at int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.waiters[key]; w != nil {
		w.headed(rev, at)
	}
}

// finish stops tracking l: the watch no longer judges its record, and
// when the record is gone (recordGone) its key may be reused. A tainted
// session that l kept alive may retire. t.mu is held.
func (t *records) finish(l *Lease, recordGone bool) {
	if t.held[l.key] == l {
		t.unhold(l.key)
	}
	l.rec.rel = relNone
	if recordGone {
		t.releaseKey(l)
	}
	t.retireUnused(l.sess)
}

// retireUnused retires s if it is tainted or full and nothing held or
// waiting uses it. t.mu is held.
func (t *records) retireUnused(s *session) {
	if t.closed || t.uses[s] > 0 || !s.retirable() {
		return
	}
	t.keeper.retire(s)
}

// hold makes l the holder of its record key. t.mu is held.
func (t *records) hold(l *Lease) {
	if old := t.held[l.key]; old != nil {
		t.unuse(old.sess)
	}
	t.held[l.key] = l
	t.uses[l.sess]++
}

// unhold forgets the holder of key. t.mu is held.
func (t *records) unhold(key string) {
	if l := t.held[key]; l != nil {
		delete(t.held, key)
		t.unuse(l.sess)
	}
}

// unuse counts one lease or waiter of s less. t.mu is held.
func (t *records) unuse(s *session) {
	if t.uses[s]--; t.uses[s] <= 0 {
		delete(t.uses, s)
	}
}

// startRelease marks l's Release of its last hold as in flight and reports
// whether the table still tracks l's record. When it does not, the record
// was already seen gone or the lease has ended: a delete of it cannot be
// this Release's, and an unknown outcome must not be taken for one.
func (t *records) startRelease(l *Lease) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[l.key] != l {
		return false
	}
	l.rec.rel, l.rec.sawDelete = relInFlight, false
	return true
}

// settleRelease sets l's release state after a call: pending while a
// Release of the last hold has an unknown outcome, none otherwise. It
// reports (forgetting it) whether the watch saw the record deleted while
// a Release was in flight.
func (t *records) settleRelease(l *Lease, pending bool) (sawDelete bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l.rec.rel = relNone
	if pending {
		l.rec.rel = relPending
	}
	sawDelete, l.rec.sawDelete = l.rec.sawDelete, false
	return sawDelete
}

// recordGone handles a held lease whose record is gone, and appends to
// ends the lease to end once t.mu is released, if any. A delete while its
// last-hold Release is in flight is left to that Release to judge; a
// delete after it returned with an unknown outcome is that Release taking
// effect; any other delete is a loss, whose cause (ErrSessionExpired or
// ErrKeyDeleted) the Client finds out in the background. t.mu is held,
// and the table is not closed.
func (t *records) recordGone(l *Lease, ends []ending) []ending {
	switch l.rec.rel {
	case relInFlight:
		l.rec.sawDelete = true
		return ends
	case relPending:
		t.finish(l, true)
		return append(ends, ending{l, ErrReleased})
	}
	t.finish(l, true)
	if l.sess.noteDeleted(l) {
		t.keeper.checkGone(l.sess)
	}
	return ends
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
	mu   lockorder.BusyMutex
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

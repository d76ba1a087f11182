package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxSetSize is the most locks one AcquireAll takes: its transaction
// writes each record and reads each queue, two operations per lock, and
// etcd refuses a transaction branch of more than 128 operations unless its
// --max-txn-ops is raised. A server configured below the default refuses
// smaller sets; the error names etcd's limit.
const MaxSetSize = 64

// AcquireAll takes every lock named, all or nothing, and returns them as one
// Set. One etcd transaction writes a record into each lock's queue, so every
// record has the same creation revision: the Set's fencing revision, and
// each lock's usual fencing token (a plain Acquire of one of those locks
// queues with the Set's record in the usual order). The Set is held once
// its record heads every queue (FIFO per lock, as for Acquire).
//
// Waiting for a set cannot deadlock: every acquisition waits only for
// records created before its own, and two sets that share locks were
// written at two different revisions, so the older one is ahead of the
// newer one in every queue they share. Each record has its own owner token;
// while the Set waits, a lock whose record is already at the head is held
// (its record blocks those behind it, as any waiting record does).
//
// Names must be valid lock names (see ValidateName), distinct, and at most
// MaxSetSize; otherwise AcquireAll returns an error matching ErrInvalidSet
// or ErrInvalidName and writes nothing. Errors are otherwise as for
// Acquire: when any lock of the set fails (ctx ends, a record is removed),
// every record is removed again and nothing is held.
func (c *Client) AcquireAll(ctx context.Context, names ...string) (*Set, error) {
	return c.acquireSet(ctx, names, false)
}

// TryAcquireAll takes every lock named if none of them is held or waited
// for, in one transaction, and returns an error matching ErrHeld at once
// otherwise. Names are as for AcquireAll; ctx bounds the requests.
//
// A TryAcquireAll that fails returns only once the records it wrote are
// deleted (one transaction, each delete comparing its record's owner
// token), so that a lock it found free is free again when it returns. A
// delete whose reply is lost is sent again, within ctx and for up to one
// TTL. If it still cannot confirm that the records are gone, it returns a
// *LeftBehindError (matching ErrLeftBehind, and ErrHeld when a lock was
// held) naming the locks whose records may remain; the Client goes on
// deleting them in the background, and they go with their session at the
// latest. As for Acquire, a write whose reply was lost may still be
// applied by etcd after the call: the Client deletes such a record as soon
// as its watch sees it appear.
func (c *Client) TryAcquireAll(ctx context.Context, names ...string) (*Set, error) {
	return c.acquireSet(ctx, names, true)
}

// Set is a group of exclusive locks taken together by AcquireAll: a Lease
// per lock, all with the same fencing revision. It ends when any of them
// ends (Done, Err); Release releases them all.
type Set struct {
	names  []string
	leases []*Lease // in names' order
	rev    int64
	ctx    context.Context // cancelled, with the first member's end, when one ends
	cancel context.CancelCauseFunc

	askOnce  sync.Once
	asked    context.Context // cancelled once a member's release is requested; made by ReleaseRequested
	askedNow context.CancelFunc
}

// Names returns the locks of the set, in the order AcquireAll got them.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Leases returns the set's leases, in the order of Names. Each is a normal
// Lease (Renew, Reenter, Fence, Done); release them through the Set.
func (s *Set) Leases() []*Lease { return slices.Clone(s.leases) }

// Lease returns the set's lease of the lock called name, or nil.
func (s *Set) Lease(name string) *Lease {
	if i := slices.Index(s.names, name); i >= 0 {
		return s.leases[i]
	}
	return nil
}

// Revision returns the set's fencing revision: the creation revision of
// every one of its records.
//
// Deprecated: Use Fences, which every Handle has: each of its tokens has
// this revision.
func (s *Set) Revision() int64 { return s.rev }

// Acquired returns when the set became held: when the last of its leases
// was admitted (the latest of their Acquired).
func (s *Set) Acquired() time.Time {
	var t time.Time
	for _, l := range s.leases {
		if l.acquired.After(t) {
			t = l.acquired
		}
	}
	return t
}

// ValidUntil returns the set's local validity deadline: the earliest of
// its leases' (see Lease.ValidUntil), before which none of its locks can
// pass to anyone else unless someone deletes a record or revokes a
// session. After the set has ended (any lease of it ended) it returns the
// zero Time.
func (s *Set) ValidUntil() time.Time {
	var t time.Time
	for _, l := range s.leases {
		u := l.ValidUntil()
		if u.IsZero() {
			return time.Time{} // l has ended, so the set has
		}
		if t.IsZero() || u.Before(t) {
			t = u
		}
	}
	return t
}

// ReleaseRequested is closed when someone asked the holder of any lock of
// the set to release it (Admin.RequestRelease with the set's revision
// and that lock's name): release the whole set then. It stays open
// otherwise, also after the set ends.
func (s *Set) ReleaseRequested() <-chan struct{} {
	s.askOnce.Do(func() {
		s.asked, s.askedNow = context.WithCancel(context.Background())
		for _, l := range s.leases {
			context.AfterFunc(l.asked.get(), s.askedNow)
		}
	})
	return s.asked.Done()
}

// Fence returns the fencing token of the set's lock called name (its
// revision is Revision), or the zero Token when name is not in the set.
func (s *Set) Fence(name string) fence.Token {
	if l := s.Lease(name); l != nil {
		return l.Fence()
	}
	return fence.Token{}
}

// Fences returns the fencing token of every lock of the set, in the order
// of Names; each has the set's revision.
func (s *Set) Fences() []fence.Token {
	out := make([]fence.Token, len(s.leases))
	for i, l := range s.leases {
		out[i] = l.Fence()
	}
	return out
}

// Renew confirms and extends every lease of the set, concurrently (see
// Lease.Renew), and returns their errors joined. A set has no Reenter:
// take a lock of it again through its Lease (Lease(name).Reenter) when a
// call must reenter one of them.
func (s *Set) Renew(ctx context.Context) error {
	return s.each(func(l *Lease) error { return l.Renew(ctx) })
}

// Done is closed when any lease of the set ends: released, lost, or its
// Client closed. Stop the work the set protects when it closes; Err says
// why (a lost lease's *LostError names its lock).
func (s *Set) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while every lease of the set is held, and afterwards the
// Err of the first one that ended.
func (s *Set) Err() error {
	if s.ctx.Err() == nil {
		// A lease's end reaches s.ctx through a goroutine (see newSet):
		// look at the leases too, so that Err never lags behind them
		// (after Release returns, Err is ErrReleased, as a Lease's is).
		for _, l := range s.leases {
			if err := l.Err(); err != nil {
				s.cancel(err)
				break
			}
		}
		if s.ctx.Err() == nil {
			return nil
		}
	}
	return context.Cause(s.ctx)
}

// Context returns a copy of parent that carries the set's fencing tokens
// (fence.NewTokensContext with Fences, so that guard's Transport and
// grpcguard's client interceptors send them all with each request, and
// each resource checks the token of its own lock), and that is cancelled,
// with Err as its cause, when the set ends. Call the CancelFunc when the
// work is done.
func (s *Set) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(fence.NewTokensContext(parent, s.Fences()...))
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// Release releases every lease of the set. While each is held once (no
// Reenter) it is one transaction that deletes every record, comparing each
// one's owner token and last confirmed mod revision as Lease.Release does.
// Otherwise, or when that transaction's compare fails or its reply is
// lost, each lease is released on its own, concurrently (a lost reply then
// resolved as Lease.Release resolves its own), and their errors are
// returned joined: retry after an error matching ErrOutcomeUnknown; a
// lease released already reports ErrNotFound, a lost one its loss.
func (s *Set) Release(ctx context.Context) error {
	if s.releaseAtOnce(ctx) {
		return nil
	}
	return s.each(func(l *Lease) error { return l.Release(ctx) })
}

// releaseAtOnce deletes every record of the set in one owner-checked
// transaction, and reports whether it did. When it could not (a lease has
// ended or holds more than once, a compare failed, no reply), the leases
// are left for Lease.Release to settle: a delete whose reply was lost is
// recorded as each lease's pending last Release, as Lease.Release records
// its own. Each lease's opMu is taken on its own (the lock order allows no
// two at once): the compares make a call that slips in between harmless.
func (s *Set) releaseAtOnce(ctx context.Context) bool {
	cmps := make([]clientv3.Cmp, 0, 2*len(s.leases))
	dels := make([]clientv3.Op, 0, len(s.leases))
	inFlight := make([]bool, len(s.leases))
	for i, l := range s.leases {
		l.opMu.Lock()
		ok := l.Err() == nil && l.count == 1 && len(l.pending) == 0
		if ok {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(l.key), "=", l.modRev),
				clientv3.Compare(clientv3.Value(l.key), "=", encodeValue(l.owner.Value(), l.count, l.payload)))
			dels = append(dels, clientv3.OpDelete(l.key))
			inFlight[i] = l.c.recs.startRelease(l)
		}
		l.opMu.Unlock()
		if !ok {
			s.settle(inFlight[:i], false, nil)
			return false
		}
	}
	resp, err := s.leases[0].c.etcd.Txn(ctx).If(cmps...).Then(dels...).Commit()
	done := err == nil && resp.Succeeded
	s.settle(inFlight, done, err)
	return done
}

// settle ends releaseAtOnce for the leases whose Release it started
// (inFlight): released when the transaction applied (done), a pending
// last Release when its reply was lost (err), nothing otherwise.
func (s *Set) settle(inFlight []bool, done bool, err error) {
	lost := err != nil && !errors.Is(rpcError(err), ErrPermissionDenied)
	for i, started := range inFlight {
		l := s.leases[i]
		l.opMu.Lock()
		switch {
		case done:
			l.pending = nil
			l.released()
			l.logResult(opRelease, "done", nil)
		case lost && started:
			l.pending = append(l.pending, pendingCall{op: opRelease, count: 0, payload: l.payload})
			l.settleReleasing()
		default:
			l.settleReleasing()
		}
		l.opMu.Unlock()
	}
}

// each calls op on every lease of the set, concurrently, and joins the
// errors.
func (s *Set) each(op func(*Lease) error) error {
	errs := make([]error, len(s.leases))
	var wg sync.WaitGroup
	for i, l := range s.leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = op(l)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newSet groups leases, all created at revision rev.
func newSet(names []string, leases []*Lease, rev int64) *Set {
	s := &Set{names: names, leases: leases, rev: rev}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	for _, l := range leases {
		context.AfterFunc(l.fin.ctx, func() { s.cancel(l.Err()) })
	}
	return s
}

func (c *Client) acquireSet(ctx context.Context, names []string, try bool) (*Set, error) {
	names = slices.Clone(names)
	if err := validateSet(names); err != nil {
		return nil, err
	}
	ctx, span := c.tracer.Start(ctx, "fencekit.lease.acquire_all")
	start := time.Now()
	set, err := c.acquireSetOnce(ctx, names, try)
	for range 3 {
		if !tryAgain(err) || ctx.Err() != nil {
			break
		}
		set, err = c.acquireSetOnce(ctx, names, try) // as acquireWithRetries does
	}
	if tryAgain(err) && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	endSpan(span, err)
	if err != nil {
		c.countFailure(ctx, err)
		err = opErr("acquire all", setLabel(names), err)
		if ctx.Err() == nil && !permanent(err) {
			err = retryable(err)
		}
		return nil, err
	}
	c.met.acquired(time.Since(start))
	c.log.Info("lease set acquired", slog.Int("locks", len(names)), logattr.Fence(set.rev),
		slog.Duration("waited", time.Since(start)))
	return set, nil
}

// setLabel names a set in errors: its first lock, and how many others.
func setLabel(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%s and %d more", names[0], len(names)-1)
}

// validateSet checks names before anything is written.
func validateSet(names []string) error {
	switch {
	case len(names) == 0:
		return fmt.Errorf("%w: no lock names", ErrInvalidSet)
	case len(names) > MaxSetSize:
		return fmt.Errorf("%w: %d locks, more than MaxSetSize (%d)", ErrInvalidSet, len(names), MaxSetSize)
	}
	seen := make(map[string]struct{}, len(names))
	for _, name := range names {
		if err := ValidateName(name); err != nil {
			return err
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("%w: %q named twice", ErrInvalidSet, name)
		}
		seen[name] = struct{}{}
	}
	return nil
}

// setMember is one lock of a set being acquired.
type setMember struct {
	w   *waiter
	val string
	req request
}

// acquireSetOnce writes the set's records on the current session in one
// transaction and waits until each is admitted.
func (c *Client) acquireSetOnce(ctx context.Context, names []string, try bool) (*Set, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	callerCtx := ctx // bounds a failed try's deletes (see acquireOnce)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.fin.ctx, func() { cancel(s.cause()) })
	defer stop()
	members := make([]setMember, 0, len(names))
	for _, name := range names {
		m := c.newMember(s, name, try)
		if err := c.recs.subscribe(m.w); err != nil {
			err = c.dropMembers(callerCtx, s, members, nil, false, err)
			s.freeSlot(m.w.key)
			return nil, err
		}
		c.met.waiting.Inc()
		defer c.met.waiting.Dec()
		members = append(members, m)
	}
	queues, readRevs, written, err := c.enqueueSet(ctx, members)
	if err != nil {
		return nil, c.dropMembers(callerCtx, s, members, nil, written, err)
	}
	leases, err := c.admitSet(ctx, members, queues, readRevs)
	if err != nil {
		return nil, c.dropMembers(callerCtx, s, members, leases, true, err)
	}
	return newSet(names, leases, leases[0].rev), nil
}

// newMember prepares the acquisition of one lock of a set on session s.
func (c *Client) newMember(s *session, name string, try bool) setMember {
	tok := c.src.New()
	dir := lockDir(c.cfg.prefix, name)
	key := s.claimSlot(dir, exclusive.suffix())
	w := &waiter{key: key, dir: dir, owner: tok.Value(), kind: exclusive, tok: tok, sess: s,
		wakec: make(chan struct{}, 1), queued: time.Now()}
	w.fin.init()
	return setMember{w: w, val: encodeValue(tok.Value(), 1), req: request{name: name, kind: exclusive, try: try, op: "acquire all"}}
}

// enqueueSet writes every member's record in one transaction, which also
// reads each lock's queue, and returns the queues and the revision of the
// write. A transaction whose reply was lost is sent again: it then finds
// the records written (with this set's owner tokens) and reads the queues.
//
// When every lock looks free to this Client (none found taken lately, see
// enqueue) and the set is not a try, the first transaction compares each
// lock's whole directory with nothing and reads nothing, as enqueue does
// for one lock: each record is then its queue. If a directory is not
// empty that transaction writes nothing, and the set is written the
// queueing way.
func (c *Client) enqueueSet(ctx context.Context, members []setMember) (queues [][]*mvccpb.KeyValue, readRevs []int64, written bool, err error) {
	if c.setLooksFree(members) {
		queues, rev, ok, err := c.enqueueFreeSet(ctx, members)
		switch {
		case err != nil:
			return nil, nil, false, err
		case ok:
			return c.catchUpSet(ctx, members, queues, rev)
		}
	}
	n := len(members)
	cmps := make([]clientv3.Cmp, 0, n)
	ops := make([]clientv3.Op, 0, 2*n)
	for _, m := range members {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.w.key), "=", 0))
		ops = append(ops, clientv3.OpPut(m.w.key, m.val, clientv3.WithLease(m.w.sess.id)))
	}
	for _, m := range members {
		ops = append(ops, clientv3.OpGet(m.w.dir, queueKeys()...))
	}
	for {
		resp, err := c.etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
		switch {
		case err != nil:
			for _, m := range members {
				m.w.uncertain = true
			}
			if err := c.pauseAfter(ctx, members[0].w, err); err != nil {
				return nil, nil, false, err
			}
			continue
		case resp.Succeeded:
			queues = make([][]*mvccpb.KeyValue, n)
			for i, m := range members {
				queues[i] = resp.Responses[n+i].GetResponseRange().Kvs
				c.recs.busy.note(m.w.dir, len(queues[i]) > 1)
			}
			return c.catchUpSet(ctx, members, queues, resp.Header.Revision)
		}
		// A key exists: this set's own records, from a try whose reply
		// was lost, or someone else's record under a key of this session.
		queues, rev, err := c.readSet(ctx, members)
		if err == nil {
			return c.catchUpSet(ctx, members, queues, rev)
		}
		if !errors.Is(err, errRetryRead) {
			return nil, nil, false, err
		}
	}
}

// setLooksFree reports whether a set's records may be written the way of
// a free lock: not a try, and no lock of it found taken lately.
func (c *Client) setLooksFree(members []setMember) bool {
	for _, m := range members {
		if m.req.try || c.recs.busy.has(m.w.dir) {
			return false
		}
	}
	return true
}

// enqueueFreeSet writes every member's record in one transaction if every
// lock's directory is empty, reading nothing. It reports whether it wrote;
// when it did not (a directory was not empty), every lock is noted as
// taken lately, and nothing was written. A transaction whose reply was
// lost is sent again: if the first applied, the second finds the
// directories taken (by this set's own records), writes nothing, and the
// queueing write that follows finds the records (see readSet).
func (c *Client) enqueueFreeSet(ctx context.Context, members []setMember) ([][]*mvccpb.KeyValue, int64, bool, error) {
	cmps := make([]clientv3.Cmp, 0, len(members))
	ops := make([]clientv3.Op, 0, len(members))
	for _, m := range members {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.w.dir).WithPrefix(), "=", 0))
		ops = append(ops, clientv3.OpPut(m.w.key, m.val, clientv3.WithLease(m.w.sess.id)))
	}
	for {
		resp, err := c.etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			for _, m := range members {
				m.w.uncertain = true
			}
			if err := c.pauseAfter(ctx, members[0].w, err); err != nil {
				return nil, 0, false, err
			}
			continue
		}
		if !resp.Succeeded {
			for _, m := range members {
				c.recs.busy.note(m.w.dir, true)
			}
			return nil, 0, false, nil
		}
		rev := resp.Header.Revision
		queues := make([][]*mvccpb.KeyValue, len(members))
		for i, m := range members {
			queues[i] = []*mvccpb.KeyValue{{Key: []byte(m.w.key), CreateRevision: rev, ModRevision: rev}}
		}
		return queues, rev, true, nil
	}
}

// errRetryRead asks enqueueSet to write again: the read found none of the
// set's records (the write it follows did not apply).
var errRetryRead = errors.New("lease: set not written")

// readSet reads the set's records and queues after a write that did not
// apply because a key existed.
func (c *Client) readSet(ctx context.Context, members []setMember) ([][]*mvccpb.KeyValue, int64, error) {
	n := len(members)
	ops := make([]clientv3.Op, 0, 2*n)
	for _, m := range members {
		ops = append(ops, clientv3.OpGet(m.w.dir, queueKeys()...), clientv3.OpGet(m.w.key))
	}
	for {
		resp, err := c.etcd.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			if err := c.pauseAfter(ctx, members[0].w, err); err != nil {
				return nil, 0, err
			}
			continue
		}
		queues := make([][]*mvccpb.KeyValue, n)
		found := 0
		for i, m := range members {
			queues[i] = resp.Responses[2*i].GetResponseRange().Kvs
			own := resp.Responses[2*i+1].GetResponseRange().Kvs
			switch {
			case len(own) > 0 && string(own[0].Value) != m.val:
				return nil, 0, errSlotTaken
			case len(own) > 0:
				found++
			}
		}
		if found == 0 {
			return nil, 0, errRetryRead
		}
		return queues, resp.Header.Revision, nil
	}
}

// catchUpSet makes each member's watch current with the queue read at
// readRev (see catchUp) and returns each member's queue and the revision
// it was read at.
func (c *Client) catchUpSet(ctx context.Context, members []setMember, queues [][]*mvccpb.KeyValue, readRev int64) ([][]*mvccpb.KeyValue, []int64, bool, error) {
	revs := make([]int64, len(members))
	for i, m := range members {
		q, at, err := c.catchUp(ctx, m.w, m.val, readRev)
		switch {
		case err != nil:
			return nil, nil, true, err
		case q != nil:
			queues[i], revs[i] = q, at
		default:
			revs[i] = readRev
		}
	}
	return queues, revs, true, nil
}

// admitSet waits until every member is admitted, concurrently, and returns
// their leases. If one fails, the others stop waiting, and the first error
// is returned with the leases already admitted (nil where a member was
// not), for dropMembers to give up.
func (c *Client) admitSet(ctx context.Context, members []setMember, queues [][]*mvccpb.KeyValue, readRevs []int64) ([]*Lease, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	leases := make([]*Lease, len(members))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.awaitAdmission(ctx, m.w, queues[i], readRevs[i], m.req)
			if err != nil {
				failed.Store(true)
				cancel(fmt.Errorf("lock %q: %w", m.req.name, err))
				return
			}
			leases[i] = l
		}()
	}
	wg.Wait()
	if !failed.Load() {
		return leases, nil
	}
	return leases, context.Cause(ctx)
}

// dropMembers gives up a set that failed with err, and returns the error
// the set's acquisition returns (see dropRecords). leases are the leases
// already admitted (nil where a member was not; all nil when leases is
// nil). A try ends them unreleased and deletes their records with the
// other members' before it returns (see letGo); otherwise they are
// released (see releaseAdmitted) and the other records are removed in the
// background, as for a failed Acquire (see giveUp).
func (c *Client) dropMembers(ctx context.Context, s *session, members []setMember, leases []*Lease, written bool, err error) error {
	try := len(members) > 0 && members[0].req.try
	if !try {
		c.releaseAdmitted(leases)
	}
	left := make([]leftRecord, 0, len(members))
	for i, m := range members {
		if leases != nil && leases[i] != nil {
			if try {
				left = append(left, c.letGo(leases[i], m))
			}
			continue
		}
		if r, ok := c.giveUp(s, m.w, m.req.name, m.val, written, err); ok {
			left = append(left, r)
		}
	}
	return c.dropRecords(ctx, s, left, try, err)
}

// letGo ends l, the lease of member m of a try that failed before the set
// was handed out, without touching its record, and returns that record
// for dropRecords to delete with the others: l was never anyone's, so
// nothing of a Release (hold count, unknown outcomes) applies to it.
func (c *Client) letGo(l *Lease, m setMember) leftRecord {
	c.recs.forget(l, false)
	l.end(ErrReleased)
	return leftRecord{name: m.req.name, key: l.key, value: m.val, mark: l.mark, uncertain: l.uncertain}
}

// releaseAdmitted releases the leases of a set that failed as a whole.
func (c *Client) releaseAdmitted(leases []*Lease) {
	for _, l := range leases {
		if l == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(c.bg.ctx, l.sess.ttl)
		if err := l.Release(ctx); err != nil {
			c.log.Warn("lease set: release of an admitted lock failed; it ends with its session",
				logattr.Lock(l.name), slog.String("error", err.Error()))
		}
		cancel()
	}
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/record"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxSetSize is the most locks one AcquireAll takes: its transaction
// writes each record and reads each queue, two operations per lock, and
// etcd refuses a transaction branch of more than 128 operations unless its
// --max-txn-ops is raised. A server configured below the default refuses
// smaller sets; the error names etcd's limit.
const MaxSetSize = 64

// MaxDelayedSetSize is the most locks one AcquireAll WithLockDelay takes:
// each lock's lock-delay marker is one more operation in the transaction
// that writes the records.
const MaxDelayedSetSize = maxTxnOps / 3

// maxTxnOps is etcd's default bound on the operations of a transaction
// branch (--max-txn-ops).
const maxTxnOps = 128

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
// the set to release it (admin.Admin.RequestRelease with the set's revision
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
	dels := make([]clientv3.Op, 0, 2*len(s.leases))
	inFlight := make([]bool, len(s.leases))
	for i, l := range s.leases {
		l.opMu.Lock()
		ok := l.Err() == nil && l.count == 1 && len(l.pending) == 0
		if ok {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(l.key), "=", l.modRev),
				clientv3.Compare(clientv3.Value(l.key), "=", record.EncodeValue(l.owner.Value(), l.count, l.payload)))
			dels = append(dels, clientv3.OpDelete(l.key))
			if l.rec.mark != nil {
				dels = append(dels, clientv3.OpDelete(l.rec.mark.Key)) // a clean release: no delay
			}
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
	lost := err != nil && !errors.Is(record.RPCError(err), ErrPermissionDenied)
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
		context.AfterFunc(l.fin.Context(), func() { s.cancel(l.Err()) })
	}
	return s
}

// newSetRequests is the requests of an AcquireAll of names with opts, one
// per lock, checked before anything is written.
func newSetRequests(names []string, try bool, opts []AcquireOption) ([]request, error) {
	req, err := newRequest("", try, opts)
	if err != nil {
		return nil, err
	}
	req.op = "acquire all"
	limit := MaxSetSize
	if req.lockDelay > 0 {
		limit = MaxDelayedSetSize
	}
	if err := validateSet(names, limit); err != nil {
		return nil, err
	}
	reqs := make([]request, len(names))
	for i, name := range names {
		reqs[i] = req
		reqs[i].name = name
	}
	return reqs, nil
}

// validateSet checks names, at most limit of them, before anything is
// written.
func validateSet(names []string, limit int) error {
	switch {
	case len(names) == 0:
		return fmt.Errorf("%w: no lock names", ErrInvalidSet)
	case len(names) > limit:
		return fmt.Errorf("%w: %d locks, more than %d (MaxSetSize, or MaxDelayedSetSize with a lock-delay)", ErrInvalidSet, len(names), limit)
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

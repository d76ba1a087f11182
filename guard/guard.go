package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/observe"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrInvalidTarget reports a Target with an empty resource name, or a
	// lock name that fence.ValidateName refuses (errors for those also
	// match fence.ErrInvalidName).
	ErrInvalidTarget = errors.New("guard: invalid target")
	// ErrUnavailable reports that a Guard could not decide because its
	// Store or Verifier failed, or gave no answer within the check budget
	// (WithCheckTimeout), while the caller's ctx was still live: nothing
	// was admitted and the mark did not move (outcome fence.Failed). It is
	// safe to retry (HTTP 503, gRPC Unavailable). A decision cut short by
	// the caller's own ctx returns an error matching ctx.Err() instead,
	// never ErrUnavailable.
	ErrUnavailable = errors.New("guard: fencing check unavailable")
)

// DefaultCheckTimeout is the check budget of a Guard made without
// WithCheckTimeout.
const DefaultCheckTimeout = 5 * time.Second

// The advice that a stale refusal carries in its Err: without a verifier
// a Guard cannot tell a superseded holder from a mark ahead of the lock
// service (fence.MarkAhead), with one it can.
var (
	errAheadUnconfirmed = errors.New("if this is the lock's current holder, the mark is ahead of the lock service" +
		" (a new etcd cluster starts revisions again): reset it with Guard.ResetMark")
	errAhead = errors.New("a new etcd cluster starts revisions again, and so does one restored without --bump-revision:" +
		" stop the writers of the old cluster, then set the mark back with Guard.ResetMark")
)

// Target names a protected resource and the lock whose holders may write it.
type Target struct {
	// Resource names the resource; its mark is kept under this name.
	Resource string
	// Lock is the name of the lock bound to the resource. A token for any
	// other lock is refused, whatever its revision.
	Lock string
}

func (t Target) validate() error {
	if t.Resource == "" {
		return fmt.Errorf("%w: empty resource name", ErrInvalidTarget)
	}
	if err := fence.ValidateName(t.Lock); err != nil {
		return fmt.Errorf("%w: resource %q: %w", ErrInvalidTarget, t.Resource, err)
	}
	return nil
}

// event is one decision, for the Guard's Observer.
type event = observe.Decision

// Option configures a Guard.
type Option interface {
	apply(*config) error
}

type config struct {
	obs           observe.Options
	resourceLabel bool
	verifier      Verifier
	checkTimeout  time.Duration
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithLogger makes the Guard log every decision to l: rejections,
// unverified, missing and malformed tokens at Warn, store and verifier
// failures at Error, acceptances at Debug. Records carry the fields of
// package lease's records, so that a rejection joins to the acquisition
// or loss of the token it refused:
//
//   - "outcome": the Outcome's name;
//   - "resource": the resource name;
//   - "lock": a hash of the Target's lock name (see LockHash), the same
//     value as the "lock" of lease records for that lock;
//   - "fence": the received token's revision, when one parsed; equal to
//     the "fence" of the lease records of the acquisition that issued it;
//   - "fence_lock": a hash of the token's lock name, only when it differs
//     from the Target's (outcome wrong_lock);
//   - "mark": the revision of the resource's mark, when known;
//   - "error": the reason, for outcomes failed, unverified and
//     mark_ahead, with lock names replaced by their hashes (LockHash).
//
// Never an owner token: those never reach this package. By default nothing
// is logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error { return observe.Set(&c.obs.Logger, l, errors.New("guard: nil logger")) })
}

// WithMetrics registers the Guard's Prometheus metrics on reg (nothing is
// registered globally): fencekit_guard_decisions_total{outcome} counts
// decisions by fence.Outcome ("accepted", "stale", "wrong_lock",
// "mark_ahead", "unverified", "missing", "malformed", "failed"). Label
// values are fixed words, never lock names or tokens, unless
// WithResourceLabel adds the resource name. Guards
// registering on the same reg share the counter, so they must agree on
// WithResourceLabel: New fails otherwise.
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Registerer, reg, errors.New("guard: nil metrics registerer"))
	})
}

// WithResourceLabel adds a "resource" label, the resource name, to the
// metrics of WithMetrics, which it requires. Every resource name becomes a
// time series that lives as long as the registry: use it only when the
// resources are a small fixed set, never when they come from requests
// (user ids, paths with ids).
func WithResourceLabel() Option {
	return optionFunc(func(c *config) error {
		c.resourceLabel = true
		return nil
	})
}

// WithCheckTimeout sets the check budget d (default DefaultCheckTimeout):
// each call a Guard makes to its Store or Verifier while deciding a token
// (reading the mark, verifying, advancing it) gets at most d, and never
// more than nine tenths of the time left before the caller's ctx deadline,
// if it has one, so that the refusal reaches the caller before its own
// deadline passes. (A MemoryStore, which never waits, is called with the
// caller's ctx as it is.) A call that fails or runs out of budget while the
// caller's ctx is live makes the decision fail with an error matching
// ErrUnavailable (HTTP 503, gRPC Unavailable), with nothing admitted; the
// answer comes without the caller bounding its ctx. The wait for the
// resource (behind another request's write) and the write itself are
// bounded only by the caller's ctx. New returns an error for d <= 0.
func WithCheckTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("guard: check timeout %v, not positive", d)
		}
		c.checkTimeout = d
		return nil
	})
}

// Guard enforces the fencing rule for a set of resources whose marks are
// kept in one Store. For each resource it serialises the check of a token
// and the write that token admits, so that the writes a Guard admits for a
// resource run one at a time and never go backwards in token.
//
// A Guard is safe for concurrent use.
type Guard struct {
	store  Store
	ver    Verifier // nil without WithVerifier
	obs    *observe.Observer
	budget time.Duration

	mu    sync.Mutex
	locks map[string]*resLock
}

// resLock is a per-resource mutex that a waiter can abandon when its
// context ends. refs counts holders and waiters; the entry is dropped when
// it reaches zero.
type resLock struct {
	ch   chan struct{}
	refs int
}

// New returns a Guard keeping marks in store.
func New(store Store, opts ...Option) (*Guard, error) {
	if store == nil {
		return nil, errors.New("guard: nil store")
	}
	cfg := config{checkTimeout: DefaultCheckTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("guard: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.resourceLabel && cfg.obs.Registerer == nil {
		return nil, errors.New("guard: WithResourceLabel without WithMetrics")
	}
	obs, err := observe.New(spec(cfg.resourceLabel), cfg.obs)
	if err != nil {
		return nil, err
	}
	return &Guard{store: store, ver: cfg.verifier, obs: obs, budget: cfg.checkTimeout, locks: map[string]*resLock{}}, nil
}

// Do runs write if t may write the Target's resource, and returns its
// error. t may write when it is valid, names the Target's lock, and is
// equal to or newer than the resource's mark; the mark is then raised to t
// before write runs. The check and write are one step for this Guard: no
// other Do or Claim of the resource by this Guard runs until write returns.
// write receives ctx carrying t (fence.NewContext), and must finish its
// effects before it returns.
//
// Otherwise Do does not call write. A refused t gets a *fence.RefusedError
// naming the resource, the token and the mark, whose Outcome says why:
// fence.Stale, fence.WrongLock, fence.Malformed (t invalid, for example a
// revision <= 0), fence.Unverified (see WithVerifier) or fence.MarkAhead
// (matching fence.ErrStale, fence.ErrWrongLock, fence.ErrInvalid,
// fence.ErrUnverified, fence.ErrMarkAhead). Failing to decide returns an
// error matching ErrInvalidTarget, ErrUnavailable when the store or
// verifier failed or ran out of the check budget (WithCheckTimeout), or
// ctx.Err() when ctx ended first. When
// write fails the mark stays advanced: the holder of t remains entitled
// to the resource.
//
// Do panics if write is nil.
func (g *Guard) Do(ctx context.Context, tgt Target, t fence.Token, write func(ctx context.Context) error) error {
	if write == nil {
		panic("guard: Do with nil write")
	}
	_, err := g.do(ctx, opDo, tgt, t, write)
	return err
}

// Serve is Do for transports that read the token from a request: package
// grpcguard's interceptors, and a service's own transport (a queue
// consumer, say) that carries tokens in its messages; the HTTP middleware
// uses it too. tokErr is the error of reading it (see TokenFromValues),
// nil when t was read: a non-nil tokErr is reported to metrics, the log
// and the span (WithTracerProvider) as outcome fence.Missing (when it
// matches fence.ErrMissing) or fence.Malformed, and returned as a
// *fence.RefusedError naming the Target, without calling write.
// Otherwise Serve is Do. ran reports whether write ran, so that a
// transport can pass write's errors on unchanged and translate the
// Guard's refusals for its clients.
//
// Serve panics if write is nil.
func (g *Guard) Serve(ctx context.Context, tgt Target, t fence.Token, tokErr error, write func(ctx context.Context) error) (ran bool, err error) {
	if write == nil {
		panic("guard: Serve with nil write")
	}
	if tokErr != nil {
		ev := event{Op: opServe, Outcome: fence.Malformed, Resource: tgt.Resource, Lock: tgt.Lock}
		if errors.Is(tokErr, fence.ErrMissing) {
			ev.Outcome = fence.Missing
		}
		sctx, span := g.obs.Start(ctx, ev)
		ev.Err = unreadable(ev, tokErr)
		g.obs.Observe(sctx, span, ev)
		return false, ev.Err
	}
	return g.do(ctx, opServe, tgt, t, write)
}

// unreadable is the refusal of a token that could not be read (ev's
// outcome missing or malformed) with error err: err's own
// *fence.RefusedError, as TokenFromValues returns, named for ev's Target.
func unreadable(ev event, err error) *fence.RefusedError {
	var r *fence.RefusedError
	if !errors.As(err, &r) {
		return refusal(ev, ev.Outcome, err)
	}
	named := *r
	named.Outcome, named.Resource, named.Lock = ev.Outcome, ev.Resource, ev.Lock
	return &named
}

// storeRefusal is the refusal of outcome o for the decision ev, from the
// store's error err: err itself when it is fence.Check's fresh
// *fence.RefusedError for ev's token (the Store contract), named here for
// ev's resource without another allocation; a new one otherwise.
func storeRefusal(ev event, o fence.Outcome, err error) *fence.RefusedError {
	r, ok := err.(*fence.RefusedError)
	if !ok || r.Outcome != o || r.Resource != "" || r.Token != ev.Token || r.Err != nil {
		return refusal(ev, o, nil)
	}
	r.Resource, r.Lock, r.Mark = ev.Resource, ev.Lock, ev.Mark
	return r
}

// refusal is the *fence.RefusedError of outcome o for the decision ev,
// with detail err.
func refusal(ev event, o fence.Outcome, err error) *fence.RefusedError {
	return &fence.RefusedError{Outcome: o, Resource: ev.Resource, Lock: ev.Lock, Token: ev.Token, Mark: ev.Mark, Err: err}
}

// do is Do, reporting whether write ran, so that callers can tell write's
// errors from the Guard's. op names the decision's span.
func (g *Guard) do(ctx context.Context, op string, tgt Target, t fence.Token, write func(context.Context) error) (ran bool, err error) {
	sctx, span := g.obs.Start(ctx, event{Op: op, Resource: tgt.Resource, Lock: tgt.Lock})
	unlock, ev := g.check(sctx, tgt, t)
	ev.Op = op
	g.obs.Observe(sctx, span, ev)
	if unlock == nil {
		return false, ev.Err
	}
	defer unlock()
	return true, write(fence.NewContext(ctx, t))
}

// check decides t for tgt. When t is accepted it returns the unlock of the
// resource, which the caller holds until its write returns; otherwise it
// returns nil and the resource is not held.
func (g *Guard) check(ctx context.Context, tgt Target, t fence.Token) (unlock func(), ev event) {
	ev = event{Resource: tgt.Resource, Lock: tgt.Lock, Token: t}
	if !g.precheck(tgt, t, &ev) {
		return nil, ev
	}
	unlock, err := g.lock(ctx, tgt.Resource)
	if err != nil {
		ev.Outcome, ev.Err = fence.Failed, err
		return nil, ev
	}
	if vs, ok := g.store.(VerifyingStore); ok && g.ver != nil {
		mark, err := g.bounded(ctx, false, func(bctx context.Context) (fence.Token, error) {
			return vs.AdvanceVerified(bctx, tgt.Resource, t, g.ver)
		})
		ev.Mark = mark
		g.decideVerified(ctx, &ev, err)
	} else {
		unlock = g.advance(ctx, tgt, t, &ev, unlock)
	}
	if ev.Outcome == fence.Accepted {
		return unlock, ev
	}
	if unlock != nil {
		unlock()
	}
	if ev.Outcome == fence.Stale {
		g.diagnoseStale(ctx, &ev)
	}
	return nil, ev
}

// precheck decides what needs no mark: an invalid Target or token, or a
// token of another lock. It reports whether t is still to be decided.
func (g *Guard) precheck(tgt Target, t fence.Token, ev *event) bool {
	if err := tgt.validate(); err != nil {
		ev.Outcome, ev.Err = fence.Failed, err
		return false
	}
	if err := t.Validate(); err != nil {
		ev.Outcome, ev.Err = fence.Malformed, refusal(*ev, fence.Malformed, err)
		return false
	}
	if t.Lock != tgt.Lock {
		ev.Outcome, ev.Err = fence.WrongLock, refusal(*ev, fence.WrongLock, nil)
		return false
	}
	return true
}

// Claim advances the marks of resources to t, all bound to t's lock,
// before the holder of t reads them: the promise step of HDFS's newEpoch.
// Once Claim returns nil, this Guard has no write in progress under an
// older token for any of the resources, and will admit none; so state the
// holder reads afterwards cannot be overwritten by an earlier holder
// through this Guard. See the package documentation for replicas sharing
// an etcdstore.Store.
//
// Resources are claimed one at a time, in sorted order. Claim stops at the
// first failure and returns its error (as Do would); resources claimed
// before it stay claimed.
func (g *Guard) Claim(ctx context.Context, t fence.Token, resources ...string) error {
	rs := slices.Clone(resources)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	for _, r := range rs {
		tgt := Target{Resource: r, Lock: t.Lock}
		if _, err := g.do(ctx, opClaim, tgt, t, func(context.Context) error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

// Mark returns the resource's mark: the highest token accepted for it.
// When none was, it returns an error matching fence.ErrNoMark (as
// sqlguard's Mark returns its ErrNotFound), never a zero Token; other
// errors come from the store.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Token, error) {
	mark, err := g.store.Mark(ctx, resource)
	if err == nil && mark.IsZero() { // a Store written before ErrNoMark
		err = noMark("guard", resource)
	}
	return mark, err
}

// noMark returns the error for a resource without a mark, with the
// package prefix of the store that found none.
func noMark(pkg, resource string) error {
	return fmt.Errorf("%s: resource %q: %w", pkg, resource, fence.ErrNoMark)
}

// advance decides a valid token of the Target's lock with the store's
// Advance, verifying first a token that would raise the mark when the
// Guard has a Verifier, and records the outcome in ev. The caller holds
// the resource (unlock); advance returns the unlock of the resource as
// held on return, nil if it is not. While the Verifier works the resource
// is not held, so requests that need no verification (a token equal to
// the mark) are not held up by an unreachable lock service; Advance, a
// compare-and-advance under the resource taken again, then refuses t if
// the mark passed it meanwhile.
func (g *Guard) advance(ctx context.Context, tgt Target, t fence.Token, ev *event, unlock func()) func() {
	if g.ver != nil {
		mark, raise := g.readMark(ctx, tgt, t, ev)
		if !raise {
			return unlock
		}
		unlock()
		if !g.verify(ctx, tgt, t, mark, ev) {
			return nil
		}
		var err error
		if unlock, err = g.lock(ctx, tgt.Resource); err != nil {
			ev.Outcome, ev.Err = fence.Failed, err
			return nil
		}
	}
	mark, err := g.bounded(ctx, true, func(bctx context.Context) (fence.Token, error) {
		return g.store.Advance(bctx, tgt.Resource, t)
	})
	ev.Mark = mark
	g.decide(ctx, ev, err)
	return unlock
}

// diagnoseStale tells the two causes of a stale token apart: a holder
// that was superseded (the usual case), and a mark ahead of the lock
// service (outcome fence.MarkAhead), which the verifier reveals by
// confirming the token as the current holder's. Without a verifier it
// cannot tell, and the error says what to do if the mark is ahead. It
// costs one Verify per stale refusal.
func (g *Guard) diagnoseStale(ctx context.Context, ev *event) {
	var rej *fence.RefusedError
	if !errors.As(ev.Err, &rej) {
		return
	}
	if g.ver == nil {
		rej.Err = errAheadUnconfirmed
		return
	}
	bctx, cancel := g.budgetFor(ctx)
	defer cancel()
	if g.ver.Verify(bctx, ev.Token) == nil {
		rej.Outcome, rej.Err = fence.MarkAhead, errAhead
		ev.Outcome = fence.MarkAhead
	}
}

// decide sets ev's outcome and error from the error of a store's Advance
// (or the check of a mark read from it).
func (g *Guard) decide(ctx context.Context, ev *event, err error) {
	switch {
	case err == nil:
		ev.Outcome = fence.Accepted
	case errors.Is(err, fence.ErrStale):
		ev.Outcome, ev.Err = fence.Stale, storeRefusal(*ev, fence.Stale, err)
	case errors.Is(err, fence.ErrWrongLock):
		ev.Outcome, ev.Err = fence.WrongLock, storeRefusal(*ev, fence.WrongLock, err)
	default:
		ev.Outcome, ev.Err = fence.Failed, g.failure(ctx, fmt.Sprintf("advance mark of %q", ev.Resource), err)
	}
}

// decideVerified is decide for a VerifyingStore's AdvanceVerified, whose
// error may also be the Verifier's.
func (g *Guard) decideVerified(ctx context.Context, ev *event, err error) {
	if errors.Is(err, fence.ErrUnverified) {
		ev.Outcome, ev.Err = fence.Unverified, unverified(*ev, err)
		return
	}
	g.decide(ctx, ev, err)
}

// readMark reads the resource's mark and decides t from it alone when it
// can: a token equal to the mark is accepted and a stale one refused,
// without the Verifier. It reports raise, with the mark, when t is newer
// and must be verified; otherwise ev holds the decision.
func (g *Guard) readMark(ctx context.Context, tgt Target, t fence.Token, ev *event) (mark fence.Token, raise bool) {
	mark, err := g.bounded(ctx, true, func(bctx context.Context) (fence.Token, error) {
		return g.store.Mark(bctx, tgt.Resource)
	})
	if errors.Is(err, fence.ErrNoMark) {
		mark, err = fence.Token{}, nil
	}
	if err != nil {
		ev.Outcome, ev.Err = fence.Failed, g.failure(ctx, fmt.Sprintf("read mark of %q", tgt.Resource), err)
		return mark, false
	}
	ev.Mark = mark
	if err := fence.Check(mark, t); err != nil || mark == t {
		g.decide(ctx, ev, err)
		return mark, false
	}
	return mark, true
}

// verify asks the Verifier about t, newer than mark. It reports whether t
// was confirmed; otherwise ev holds the refusal or failure.
func (g *Guard) verify(ctx context.Context, tgt Target, t, mark fence.Token, ev *event) bool {
	_, err := g.bounded(ctx, false, func(bctx context.Context) (fence.Token, error) {
		return fence.Token{}, g.ver.Verify(bctx, t)
	})
	switch {
	case err == nil:
		return true
	case errors.Is(err, fence.ErrUnverified):
		ev.Mark = mark
		ev.Outcome, ev.Err = fence.Unverified, unverified(*ev, err)
	default:
		ev.Outcome, ev.Err = fence.Failed, g.failure(ctx, fmt.Sprintf("verify token for %q", tgt.Resource), err)
	}
	return false
}

// unverified is the refusal of the decision ev for the Verifier's answer
// err, matching fence.ErrUnverified: the verifier's *fence.RefusedError
// (lease.Verifier's) named for ev's resource, or a new one around err.
func unverified(ev event, err error) *fence.RefusedError {
	var r *fence.RefusedError
	if !errors.As(err, &r) || r.Outcome != fence.Unverified {
		return refusal(ev, fence.Unverified, err)
	}
	named := *r
	named.Resource, named.Lock, named.Token, named.Mark = ev.Resource, ev.Lock, ev.Token, ev.Mark
	return &named
}

// bounded calls f with ctx bounded by the check budget (budgetFor), or
// as it is when f is a call to a MemoryStore (store), which never waits.
func (g *Guard) bounded(ctx context.Context, store bool, f func(context.Context) (fence.Token, error)) (fence.Token, error) {
	if _, mem := g.store.(*MemoryStore); mem && store {
		return f(ctx)
	}
	bctx, cancel := g.budgetFor(ctx)
	defer cancel()
	return f(bctx)
}

// budgetFor returns ctx bounded by the check budget: at most g.budget,
// and at most nine tenths of the time left before ctx's deadline.
func (g *Guard) budgetFor(ctx context.Context) (context.Context, context.CancelFunc) {
	d := g.budget
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)*9/10)
	}
	return context.WithTimeout(ctx, d)
}

// failure is the error of a store or Verifier call (what) that failed with
// err. When the caller's ctx has ended, that is the reason, and the error
// matches ctx.Err(). Otherwise the store or verifier failed, or ran out of
// the check budget, and the error matches ErrUnavailable; a lapsed budget
// is then not reported as a ctx error, which would read as the caller's.
func (g *Guard) failure(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if !errors.Is(err, cerr) {
			err = errors.Join(err, cerr)
		}
		return fmt.Errorf("guard: %s: %w", what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %s: no answer within the check budget: %v", ErrUnavailable, what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}

// lock takes the resource's in-process mutex, giving up when ctx ends.
func (g *Guard) lock(ctx context.Context, resource string) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	l := g.locks[resource]
	if l == nil {
		l = &resLock{ch: make(chan struct{}, 1)}
		g.locks[resource] = l
	}
	l.refs++
	g.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
		return func() {
			<-l.ch
			g.release(resource, l)
		}, nil
	case <-ctx.Done():
		g.release(resource, l)
		return nil, ctx.Err()
	}
}

func (g *Guard) release(resource string, l *resLock) {
	g.mu.Lock()
	l.refs--
	if l.refs == 0 {
		delete(g.locks, resource)
	}
	g.mu.Unlock()
}

// LockHash returns the digest of a lock name that logs carry instead of
// the name, in the "lock" field of guard's records and of package lease's:
// the first 16 hex digits of its SHA-256. Use it to find the records of a
// lock by name.
func LockHash(lock string) string { return logattr.Hash(lock) }

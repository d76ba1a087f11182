package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrMissing reports a fenced request that carried no fencing token.
	ErrMissing = errors.New("guard: missing fencing token")
	// ErrMalformed reports a fencing token that cannot be used: text that
	// is not a token's canonical form, more than one token in one request,
	// or a token no acquisition can have made (revision <= 0, empty lock
	// name). Errors matching it also match fence.ErrSyntax or
	// fence.ErrInvalid.
	ErrMalformed = errors.New("guard: malformed fencing token")
	// ErrRejected reports a token that a resource refused: older than the
	// resource's mark, or for a different lock. Errors matching it are
	// *RejectedError and also match fence.ErrStale or fence.ErrWrongLock.
	ErrRejected = errors.New("guard: fencing token rejected")
	// ErrInvalidTarget reports a Target with an empty resource or lock
	// name, or a lock name longer than fence.MaxNameLen.
	ErrInvalidTarget = errors.New("guard: invalid target")
	// ErrUnverified reports a token newer than a resource's mark that the
	// Guard's Verifier (WithVerifier) did not confirm as its lock's current
	// holder's. Errors matching it are *UnverifiedError and also match
	// fence.ErrUnverified.
	ErrUnverified = errors.New("guard: fencing token not verified")
	// ErrMarkChanged reports a ResetMark whose expected old mark is not
	// the resource's mark. Errors matching it are *MarkChangedError.
	ErrMarkChanged = errors.New("guard: mark changed")
)

// RejectedError is the error for a token that a resource refused.
type RejectedError struct {
	// Resource is the resource that refused the token.
	Resource string
	// Token is the token that was refused.
	Token fence.Token
	// Mark is the resource's mark when the token was refused: the highest
	// token it had accepted. It is zero when the token was refused for
	// naming another lock than the Target's before the mark was read.
	Mark fence.Token
	// Err says why: a *fence.StaleError or a *fence.WrongLockError.
	Err error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("guard: resource %q refused token: %v", e.Resource, e.Err)
}

// Is reports whether target is ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Unwrap returns e.Err, so errors.Is(err, fence.ErrStale) and
// errors.Is(err, fence.ErrWrongLock) tell the two reasons apart.
func (e *RejectedError) Unwrap() error { return e.Err }

// Target names a protected resource and the lock whose holders may write it.
type Target struct {
	// Resource names the resource; its mark is kept under this name.
	Resource string
	// Lock is the name of the lock bound to the resource. A token for any
	// other lock is refused, whatever its revision.
	Lock string
}

func (t Target) validate() error {
	switch {
	case t.Resource == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalidTarget)
	case t.Lock == "":
		return fmt.Errorf("%w: resource %q: empty lock name", ErrInvalidTarget, t.Resource)
	case len(t.Lock) > fence.MaxNameLen:
		return fmt.Errorf("%w: resource %q: lock name longer than %d bytes", ErrInvalidTarget, t.Resource, fence.MaxNameLen)
	}
	return nil
}

// Outcome is what a Guard decided about one token.
type Outcome int

// The outcomes reported to hooks and logs.
const (
	// Accepted: the token was equal to or newer than the mark.
	Accepted Outcome = iota + 1
	// Stale: the token was older than the mark.
	Stale
	// WrongLock: the token was for another lock than the resource's.
	WrongLock
	// Missing: a fenced request carried no token.
	Missing
	// Malformed: the token could not be parsed or was invalid.
	Malformed
	// Failed: no decision was made; the store or the Verifier failed,
	// the Target was invalid, or the context ended while waiting for the
	// resource.
	Failed
	// Unverified: the token was newer than the mark, and the Verifier
	// (WithVerifier) did not confirm it.
	Unverified
)

// String returns the outcome's name as used in logs: "accepted", "stale",
// "wrong_lock", "missing", "malformed", "failed" or "unverified".
func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Stale:
		return "stale"
	case WrongLock:
		return "wrong_lock"
	case Missing:
		return "missing"
	case Malformed:
		return "malformed"
	case Failed:
		return "failed"
	case Unverified:
		return "unverified"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Event describes one decision, for hooks (see WithHook).
type Event struct {
	// Outcome is the decision.
	Outcome Outcome
	// Resource and Lock are the Target the token was checked against.
	Resource, Lock string
	// Token is the token received; zero when it was missing or could not
	// be parsed.
	Token fence.Token
	// Mark is the resource's mark after the decision, when known.
	Mark fence.Token
	// Err is nil when the token was accepted and says why otherwise.
	Err error
}

// Option configures a Guard.
type Option interface {
	apply(*config) error
}

type config struct {
	logger        *slog.Logger
	hooks         []func(context.Context, Event)
	registerer    prometheus.Registerer
	resourceLabel bool
	verifier      Verifier
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
//   - "error": the reason, for outcomes failed and unverified.
//
// Never an owner token: those never reach this package. By default nothing
// is logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("guard: nil logger")
		}
		c.logger = l
		return nil
	})
}

// WithHook makes the Guard call f with every decision, for metrics. f is
// called synchronously, before an accepted write runs and while the
// resource is held, so it must be quick and must not call the Guard. The
// option may be given more than once; hooks run in order.
func WithHook(f func(ctx context.Context, e Event)) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return errors.New("guard: nil hook")
		}
		c.hooks = append(c.hooks, f)
		return nil
	})
}

// WithMetrics registers the Guard's Prometheus metrics on reg (nothing is
// registered globally): fencekit_guard_decisions_total{outcome} counts
// decisions by Outcome ("accepted", "stale", "wrong_lock", "missing",
// "malformed", "failed", "unverified"). Label values are fixed words,
// never lock names or tokens, unless WithResourceLabel adds the resource name. Guards
// registering on the same reg share the counter, so they must agree on
// WithResourceLabel: New fails otherwise. It runs alongside any hooks
// (WithHook).
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		if reg == nil {
			return errors.New("guard: nil metrics registerer")
		}
		c.registerer = reg
		return nil
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

// Guard enforces the fencing rule for a set of resources whose marks are
// kept in one Store. For each resource it serialises the check of a token
// and the write that token admits, so that the writes a Guard admits for a
// resource run one at a time and never go backwards in token.
//
// A Guard is safe for concurrent use.
type Guard struct {
	store Store
	ver   Verifier // nil without WithVerifier
	log   *slog.Logger
	hooks []func(context.Context, Event)
	met   *metrics // nil without WithMetrics

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
	var cfg config
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("guard: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	var met *metrics
	switch {
	case cfg.registerer != nil:
		met = newMetrics(cfg.resourceLabel)
		if err := met.register(cfg.registerer); err != nil {
			return nil, err
		}
	case cfg.resourceLabel:
		return nil, errors.New("guard: WithResourceLabel without WithMetrics")
	}
	return &Guard{store: store, ver: cfg.verifier, log: cfg.logger, hooks: cfg.hooks, met: met, locks: map[string]*resLock{}}, nil
}

// Do runs write if t may write the Target's resource, and returns its
// error. t may write when it is valid, names the Target's lock, and is
// equal to or newer than the resource's mark; the mark is then raised to t
// before write runs. The check and write are one step for this Guard: no
// other Do or Claim of the resource by this Guard runs until write returns.
// write receives ctx carrying t (fence.NewContext), and must finish its
// effects before it returns.
//
// Otherwise Do does not call write and returns an error matching
// ErrRejected (stale or wrong lock), ErrMalformed (t invalid, for example
// a revision <= 0), ErrInvalidTarget, ctx.Err() when ctx ends while
// waiting for the resource, or a store error. When write fails the mark
// stays advanced: the holder of t remains entitled to the resource.
//
// Do panics if write is nil.
func (g *Guard) Do(ctx context.Context, tgt Target, t fence.Token, write func(ctx context.Context) error) error {
	if write == nil {
		panic("guard: Do with nil write")
	}
	_, err := g.do(ctx, tgt, t, write)
	return err
}

// Serve is Do for transports that read the token from a request (the HTTP
// middleware, package grpcguard's interceptors). tokErr is the error of
// reading it (see TokenFromValues), nil when t was read: a non-nil tokErr
// is reported to hooks, metrics and the log as outcome missing (when it
// matches ErrMissing) or malformed, and returned without calling write.
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
		ev := Event{Outcome: Malformed, Resource: tgt.Resource, Lock: tgt.Lock, Err: tokErr}
		if errors.Is(tokErr, ErrMissing) {
			ev.Outcome = Missing
		}
		g.observe(ctx, ev)
		return false, tokErr
	}
	return g.do(ctx, tgt, t, write)
}

// do is Do, reporting whether write ran, so that callers can tell write's
// errors from the Guard's.
func (g *Guard) do(ctx context.Context, tgt Target, t fence.Token, write func(context.Context) error) (ran bool, err error) {
	if err := tgt.validate(); err != nil {
		g.observe(ctx, Event{Outcome: Failed, Resource: tgt.Resource, Lock: tgt.Lock, Token: t, Err: err})
		return false, err
	}
	unlock, err := g.lock(ctx, tgt.Resource)
	if err != nil {
		g.observe(ctx, Event{Outcome: Failed, Resource: tgt.Resource, Lock: tgt.Lock, Token: t, Err: err})
		return false, err
	}
	defer unlock()
	if err := g.admit(ctx, tgt, t); err != nil {
		return false, err
	}
	return true, write(fence.NewContext(ctx, t))
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
		if _, err := g.do(ctx, tgt, t, func(context.Context) error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

// Mark returns the resource's mark: the highest token accepted for it, or
// the zero Token when none was.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Token, error) {
	return g.store.Mark(ctx, resource)
}

// admit checks t against tgt and the store, advancing the mark, and
// reports the outcome. The caller holds the resource.
func (g *Guard) admit(ctx context.Context, tgt Target, t fence.Token) error {
	ev := Event{Resource: tgt.Resource, Lock: tgt.Lock, Token: t}
	if err := t.Validate(); err != nil {
		ev.Outcome, ev.Err = Malformed, fmt.Errorf("%w: %w", ErrMalformed, err)
		g.observe(ctx, ev)
		return ev.Err
	}
	if t.Lock != tgt.Lock {
		ev.Outcome = WrongLock
		ev.Err = &RejectedError{Resource: tgt.Resource, Token: t, Err: &fence.WrongLockError{Token: t, Want: tgt.Lock}}
		g.observe(ctx, ev)
		return ev.Err
	}
	if vs, ok := g.store.(VerifyingStore); ok && g.ver != nil {
		mark, err := vs.AdvanceVerified(ctx, tgt.Resource, t, g.ver)
		ev.Mark = mark
		if errors.Is(err, fence.ErrUnverified) {
			ev.Outcome, ev.Err = Unverified, &UnverifiedError{Resource: tgt.Resource, Token: t, Mark: mark, Err: err}
		} else {
			g.decide(&ev, err)
		}
		g.observe(ctx, ev)
		return ev.Err
	}
	if g.ver != nil {
		done, err := g.verify(ctx, tgt, t, &ev)
		if done {
			g.observe(ctx, ev)
			return err
		}
	}
	mark, err := g.store.Advance(ctx, tgt.Resource, t)
	ev.Mark = mark
	g.decide(&ev, err)
	g.observe(ctx, ev)
	return ev.Err
}

// decide sets ev's outcome and error from the error of a store's Advance
// (or the check of a mark read from it).
func (g *Guard) decide(ev *Event, err error) {
	switch {
	case err == nil:
		ev.Outcome = Accepted
	case errors.Is(err, fence.ErrStale):
		ev.Outcome, ev.Err = Stale, &RejectedError{Resource: ev.Resource, Token: ev.Token, Mark: ev.Mark, Err: err}
	case errors.Is(err, fence.ErrWrongLock):
		ev.Outcome, ev.Err = WrongLock, &RejectedError{Resource: ev.Resource, Token: ev.Token, Mark: ev.Mark, Err: err}
	default:
		ev.Outcome, ev.Err = Failed, fmt.Errorf("guard: advance mark of %q: %w", ev.Resource, err)
	}
}

// verify decides t without the store's Advance when it can: a token equal
// to the mark is accepted and a stale or wrong-lock one refused, without
// calling the Verifier; a newer one is verified. It reports done when ev
// holds the decision, and otherwise leaves the advance to the caller. The
// caller holds the resource, so the mark read here is the mark Advance
// sees, unless another Guard sharing the store raises it in between;
// Advance then refuses t as stale.
func (g *Guard) verify(ctx context.Context, tgt Target, t fence.Token, ev *Event) (done bool, err error) {
	mark, err := g.store.Mark(ctx, tgt.Resource)
	if err != nil {
		ev.Outcome, ev.Err = Failed, fmt.Errorf("guard: read mark of %q: %w", tgt.Resource, err)
		return true, ev.Err
	}
	ev.Mark = mark
	if err := fence.Check(mark, t); err != nil || mark == t {
		g.decide(ev, err)
		return true, ev.Err
	}
	if err := g.ver.Verify(ctx, t); err != nil {
		if errors.Is(err, fence.ErrUnverified) {
			ev.Outcome, ev.Err = Unverified, &UnverifiedError{Resource: tgt.Resource, Token: t, Mark: mark, Err: err}
		} else {
			ev.Outcome, ev.Err = Failed, fmt.Errorf("guard: verify token for %q: %w", tgt.Resource, err)
		}
		return true, ev.Err
	}
	return false, nil
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

func (g *Guard) observe(ctx context.Context, e Event) {
	for _, h := range g.hooks {
		h(ctx, e)
	}
	if g.met != nil {
		g.met.observe(e)
	}
	level, msg := slog.LevelWarn, "guard: fencing token refused"
	switch e.Outcome {
	case Accepted:
		level, msg = slog.LevelDebug, "guard: fencing token accepted"
	case Missing:
		msg = "guard: fencing token missing"
	case Failed:
		level, msg = slog.LevelError, "guard: fencing check failed"
	}
	if !g.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs,
		logattr.Outcome(e.Outcome.String()),
		slog.String("resource", e.Resource),
		logattr.Lock(e.Lock))
	if !e.Token.IsZero() {
		attrs = append(attrs, logattr.Fence(e.Token.Revision))
		if e.Token.Lock != e.Lock {
			attrs = append(attrs, slog.String("fence_lock", LockHash(e.Token.Lock)))
		}
	}
	if !e.Mark.IsZero() {
		attrs = append(attrs, slog.Int64("mark", e.Mark.Revision))
	}
	if (e.Outcome == Failed || e.Outcome == Unverified) && e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	g.log.LogAttrs(ctx, level, msg, attrs...)
}

package fencelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lock is a client-go resourcelock.Interface whose leader is elected by
// a fencekit lease.Election in etcd. One Lock is one candidate: it owns a
// lease.Client (one etcd session) of its own. Use it through Config or
// NewLeaderElector (client-go) or package ctrlfence (controller-runtime).
//
// A Lock is safe for concurrent use, but serves one elector at a time.
type Lock struct {
	name, identity, prefix string
	ttl, margin, window    time.Duration
	locks                  *lease.Client
	elec                   *lease.Election
	log                    *slog.Logger
	cfg                    config

	opMu sync.Mutex // serialises Create and Update

	mu         sync.Mutex
	lead       *leadership
	confirmed  time.Time // when the last confirmation that succeeded was sent
	validUntil time.Time // confirmed + TTL - margin
	stopWithin time.Duration
	onStop     func() // the OnStoppedLeading that Config wrapped
	armAtStart bool   // a Composite's: onStop is armed when the leader starts, not at the campaign
	bound      map[*leaderContext]context.CancelCauseFunc
	closed     bool
	wg         sync.WaitGroup
}

// leadership is one term as the elector sees it, from the Update that
// won it to the end of the elector's Run.
type leadership struct {
	term    *lease.Term
	fctx    context.Context // carries the term's token, for leaderContext
	tctx    context.Context // cancelled when the term ends
	tcancel context.CancelFunc
	unwatch func() bool

	mu      sync.Mutex
	stopped bool
	cancel  context.CancelCauseFunc // the ctx handed to OnStartedLeading
	onStop  func()
	stopRan bool // onStop ran
	once    sync.Once
}

var errRunEnded = errors.New("fencelock: the elector's Run ended")

// New returns the candidate identity (its public value in the election,
// for example the Pod name; at most lease.MaxValueLen bytes of UTF-8) for
// the election called name, with a lease.Client of its own on cli. It does
// no I/O. Close the Lock when done (before cli).
func New(cli *clientv3.Client, name, identity string, opts ...Option) (*Lock, error) {
	cfg := config{ttl: lease.DefaultTTL, prefix: lease.DefaultPrefix, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	switch {
	case cli == nil:
		return nil, errors.New("fencelock: nil etcd client")
	case identity == "" || len(identity) > lease.MaxValueLen || !utf8.ValidString(identity):
		return nil, fmt.Errorf("%w: identity must be 1 to %d bytes of UTF-8", ErrIdentity, lease.MaxValueLen)
	}
	if cfg.margin == 0 {
		cfg.margin = max(cfg.ttl/10, 50*time.Millisecond)
	}
	if cfg.margin*4 >= cfg.ttl {
		return nil, fmt.Errorf("fencelock: safety margin %v not less than a quarter of the TTL %v", cfg.margin, cfg.ttl)
	}
	if cfg.window == 0 {
		cfg.window = 2 * cfg.margin
	}
	if cfg.window >= cfg.ttl {
		return nil, fmt.Errorf("fencelock: health window %v not less than the TTL %v", cfg.window, cfg.ttl)
	}
	lopts := append(append([]lease.Option(nil), cfg.leaseOpts...),
		lease.WithTTL(cfg.ttl), lease.WithSafetyMargin(cfg.margin), lease.WithPrefix(cfg.prefix))
	locks, err := lease.New(cli, lopts...)
	if err != nil {
		return nil, err
	}
	elec, err := locks.Election(name)
	if err != nil {
		_ = locks.Close()
		return nil, err
	}
	return &Lock{
		name: name, identity: identity, prefix: cfg.prefix,
		ttl: cfg.ttl, margin: cfg.margin, window: cfg.window,
		locks: locks, elec: elec, log: cfg.log, cfg: cfg,
		bound: map[*leaderContext]context.CancelCauseFunc{},
	}, nil
}

// Name returns the election's name.
func (l *Lock) Name() string { return l.name }

// Identity returns the candidate's identity.
func (l *Lock) Identity() string { return l.identity }

// Describe names the lock in etcd: "etcd <prefix><name>".
func (l *Lock) Describe() string { return "etcd " + l.prefix + l.name }

// TTL returns the session TTL (whole seconds) and the safety margin.
func (l *Lock) TTL() (ttl, margin time.Duration) { return l.ttl, l.margin }

// RecordEvent logs s, and emits it as a Kubernetes event when
// WithEventRecorder was given.
func (l *Lock) RecordEvent(s string) {
	l.log.Info("fencelock: leader election", slog.String("lock", l.Describe()), slog.String("identity", l.identity), slog.String("event", s))
	if l.cfg.rec != nil {
		l.cfg.rec.Eventf(l.cfg.subject, corev1.EventTypeNormal, "LeaderElection", "%s", l.identity+" "+s)
	}
}

// Get returns who leads now, as etcd says: HolderIdentity is the leader's
// identity (empty when none), AcquireTime when its term began, and
// RenewTime when this Lock last confirmed its own term; for another's
// term, which fencekit does not publish renewals of, RenewTime is
// AcquireTime, so that the record changes only when the term does.
// LeaseDurationSeconds is -1: the record never vouches for its holder by
// an observer's clock, so client-go never waits a lease out; a candidate
// always goes on to Update, which queues it in etcd behind the leader. It
// is one etcd read.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	ldr, err := l.elec.Leader(ctx)
	rec := &resourcelock.LeaderElectionRecord{LeaseDurationSeconds: -1}
	switch {
	case errors.Is(err, lease.ErrNoLeader):
	case err != nil:
		return nil, nil, fmt.Errorf("fencelock: get %s: %w", l.Describe(), err)
	default:
		rec.HolderIdentity = ldr.Value
		rec.AcquireTime = metav1.NewTime(ldr.Since)
		rec.RenewTime = rec.AcquireTime
		l.mu.Lock()
		if l.lead != nil && l.lead.term.Fence() == ldr.Term {
			rec.RenewTime = metav1.NewTime(l.confirmed)
		}
		l.mu.Unlock()
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, nil, fmt.Errorf("fencelock: get: %w", err)
	}
	return rec, raw, nil
}

// Create is Update: there is nothing to create in etcd ahead of a
// campaign.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, ler)
}

// Update acts on the record the elector wants written:
//
//   - HolderIdentity empty (client-go's release): the leadership stops
//     (the ctx handed to the leader is cancelled and OnStoppedLeading runs,
//     see Config), then the term is resigned and the next candidate leads.
//   - this Lock's identity, while it leads no term: it campaigns, blocking
//     in etcd's queue until it leads or ctx ends, then confirms the term.
//   - this Lock's identity, while it leads: it confirms the term (one read
//     and one keep-alive, lease.Term.Renew). It fails at once, with
//     ErrTermEnded, once the term has ended; and with ErrShortValidity when
//     the term has less validity left than the elector may take to notice
//     a loss.
//
// The other fields of the record are ignored: etcd keeps the term.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if ler.HolderIdentity == "" {
		return l.release(ctx)
	}
	if ler.HolderIdentity != l.identity {
		return fmt.Errorf("%w: record for %q, Lock is %q", ErrIdentity, ler.HolderIdentity, l.identity)
	}
	l.mu.Lock()
	ld, closed := l.lead, l.closed
	l.mu.Unlock()
	var err error
	switch {
	case closed:
		return ErrClosed
	case ld == nil:
		err = l.campaign(ctx)
	default:
		err = l.confirm(ctx, ld)
	}
	if err != nil {
		l.log.Debug("fencelock: update failed", slog.String("lock", l.Describe()), slog.String("identity", l.identity), slog.String("error", err.Error()))
	}
	return err
}

// campaign waits to lead, confirms the term, and makes it the Lock's.
func (l *Lock) campaign(ctx context.Context) error {
	t, err := l.elec.Campaign(ctx, l.identity)
	if err != nil {
		return fmt.Errorf("fencelock: campaign %s: %w", l.Describe(), err)
	}
	ld := &leadership{term: t, fctx: fence.NewContext(context.Background(), t.Fence())}
	ld.tctx, ld.tcancel = t.Context(context.Background())
	if err := l.confirm(ctx, ld); err != nil {
		// Not handed to the elector: give the term up rather than hold
		// it for nobody.
		l.resignLater(ld)
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.resignLater(ld)
		return ErrClosed
	}
	if !l.armAtStart {
		ld.onStop = l.onStop
	}
	ld.unwatch = context.AfterFunc(ld.tctx, func() { l.stop(ld, context.Cause(ld.tctx)) })
	l.lead = ld
	l.mu.Unlock()
	l.log.Info("fencelock: leading", slog.String("lock", l.Describe()), slog.String("term", t.String()))
	return nil
}

// confirm renews ld's term and records how long it stays valid.
func (l *Lock) confirm(ctx context.Context, ld *leadership) error {
	if ld.isStopped() {
		return fmt.Errorf("%w: %w", ErrTermEnded, cmpErr(ld.term.Err(), errRunEnded))
	}
	if err := ld.term.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrTermEnded, err)
	}
	sent := time.Now()
	if err := ld.term.Renew(ctx); err != nil {
		if ld.term.Err() != nil {
			return fmt.Errorf("%w: %w", ErrTermEnded, err)
		}
		return fmt.Errorf("fencelock: confirm %s: %w", l.Describe(), err)
	}
	until := sent.Add(l.ttl - l.margin)
	l.mu.Lock()
	if ld == l.lead || l.lead == nil {
		l.confirmed, l.validUntil = sent, until
	}
	within := l.stopWithin
	l.mu.Unlock()
	if left := time.Until(until); within > 0 && left < within {
		return fmt.Errorf("%w: %v left, the elector may take %v to notice a loss", ErrShortValidity, left.Round(time.Millisecond), within)
	}
	return nil
}

// release stops the leadership, then resigns its term.
func (l *Lock) release(ctx context.Context) error {
	l.mu.Lock()
	ld := l.lead
	l.mu.Unlock()
	if ld == nil {
		return nil
	}
	l.stop(ld, lease.ErrReleased)
	return l.resign(ctx, ld)
}

// stop ends ld once: it cancels the ctx handed to the leader and the
// leader contexts, then runs OnStoppedLeading (when Config wrapped it).
// Every caller returns after that has finished.
func (l *Lock) stop(ld *leadership, cause error) {
	ld.once.Do(func() {
		ld.mu.Lock()
		ld.stopped = true
		cancel, onStop := ld.cancel, ld.onStop
		ld.stopRan = onStop != nil
		ld.mu.Unlock()
		if cancel != nil {
			cancel(cause)
		}
		l.mu.Lock()
		bound := l.bound
		if bound != nil { // nil once closed
			l.bound = map[*leaderContext]context.CancelCauseFunc{}
		}
		l.mu.Unlock()
		for _, c := range bound {
			c(cause)
		}
		l.log.Info("fencelock: stopped leading", slog.String("lock", l.Describe()), slog.String("term", ld.term.String()), slog.Any("cause", cause))
		if onStop != nil {
			onStop()
		}
	})
}

// resign ends ld's term in etcd; when that fails while the term lasts, it
// keeps trying in the background until the term ends.
func (l *Lock) resign(ctx context.Context, ld *leadership) error {
	if ld.term.Err() != nil {
		return nil
	}
	err := ld.term.Release(ctx)
	if err == nil || ld.term.Err() != nil {
		return nil
	}
	l.resignLater(ld)
	return fmt.Errorf("fencelock: resign %s: %w", l.Describe(), err)
}

func (l *Lock) resignLater(ld *leadership) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for ld.term.Err() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), l.ttl)
			err := ld.term.Release(ctx)
			cancel()
			if err == nil {
				return
			}
			l.log.Warn("fencelock: resign failed; retrying until the term ends", slog.String("lock", l.Describe()), slog.String("error", err.Error()))
			select {
			case <-ld.term.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

func (ld *leadership) isStopped() bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.stopped
}

// Fence returns the fencing token of the term the Lock leads, or an error
// matching ErrNotLeading. It is for code that does not run under the ctx
// handed to the leader (which carries the token: fence.FromContext).
func (l *Lock) Fence() (fence.Token, error) {
	l.mu.Lock()
	ld := l.lead
	l.mu.Unlock()
	if ld == nil || ld.isStopped() || ld.term.Err() != nil {
		return fence.Token{}, ErrNotLeading
	}
	return ld.term.Fence(), nil
}

// Check is a health check (controller-runtime's healthz.Checker, or any
// func(*http.Request) error): it fails once the term this Lock leads has
// less validity left than the health window (WithHealthWindow), as last
// confirmed, so before the term's Done closes, and after the term ended
// while the elector still runs. A candidate that does not lead is
// healthy. It does no I/O.
func (l *Lock) Check(*http.Request) error {
	l.mu.Lock()
	ld, until := l.lead, l.validUntil
	l.mu.Unlock()
	if ld == nil {
		return nil
	}
	if err := ld.term.Err(); err != nil || ld.isStopped() {
		return fmt.Errorf("%w: %s: %w", ErrTermEnded, l.Describe(), cmpErr(err, errRunEnded))
	}
	if left := time.Until(until); left < l.window {
		return fmt.Errorf("%w: %s: %v of validity left", ErrExpiring, l.Describe(), left.Round(time.Millisecond))
	}
	return nil
}

// Close stops the leadership, if any, resigns its term and closes the
// Lock's lease.Client. Further Updates return ErrClosed.
func (l *Lock) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	ld := l.lead
	l.mu.Unlock()
	if ld != nil {
		l.stop(ld, ErrClosed)
	}
	l.mu.Lock()
	for _, c := range l.bound {
		c(ErrClosed)
	}
	l.bound = nil
	l.mu.Unlock()
	err := l.locks.Close() // resigns every term
	l.wg.Wait()
	if ld != nil {
		ld.unwatch()
		ld.tcancel()
	}
	return err
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

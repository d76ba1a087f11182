package fencelock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Durations returns elector durations that keep the timing rule with the
// Lock's TTL: LeaseDuration = TTL, and RenewDeadline and RetryPeriod five
// sixths and one sixth of TTL - 2*margin (to the millisecond). For a 15 s TTL (margin 1.5 s)
// they are client-go's and controller-runtime's defaults: 15 s, 10 s, 2 s.
func (l *Lock) Durations() (leaseDuration, renewDeadline, retryPeriod time.Duration) {
	budget := l.ttl - 2*l.margin
	retryPeriod = (budget / 6).Round(time.Millisecond)
	return l.ttl, budget - retryPeriod, retryPeriod
}

// SetDurations checks the elector's durations against the Lock's TTL and
// safety margin (the timing rule, see the package doc) and, when they keep
// it, makes Update refuse a confirmation that leaves the term less than
// RenewDeadline + RetryPeriod of validity. Otherwise it returns a
// *DurationError (matching ErrDurations) naming the durations to change,
// and changes nothing. Config and package ctrlfence call it.
func (l *Lock) SetDurations(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	e := &DurationError{TTL: l.ttl, Margin: l.margin, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
	broke := func(rule string, change ...string) {
		e.Rules = append(e.Rules, rule)
		for _, c := range change {
			if !slices.Contains(e.Change, c) {
				e.Change = append(e.Change, c)
			}
		}
	}
	if leaseDuration <= 0 || renewDeadline <= 0 || retryPeriod <= 0 {
		broke("every duration must be positive", "LeaseDuration", "RenewDeadline", "RetryPeriod")
	}
	if budget := l.ttl - 2*l.margin; renewDeadline+retryPeriod > budget {
		broke(fmt.Sprintf("RenewDeadline + RetryPeriod (%v) must be at most TTL - 2*margin (%v)", renewDeadline+retryPeriod, budget),
			"RenewDeadline", "RetryPeriod", "TTL")
	}
	if leaseDuration > l.ttl {
		broke(fmt.Sprintf("LeaseDuration must be at most the TTL (%v)", l.ttl), "LeaseDuration", "TTL")
	}
	if leaseDuration <= renewDeadline {
		broke("LeaseDuration must be greater than RenewDeadline (client-go)", "LeaseDuration", "RenewDeadline")
	}
	if float64(renewDeadline) <= leaderelection.JitterFactor*float64(retryPeriod) {
		broke(fmt.Sprintf("RenewDeadline must be greater than %.1f*RetryPeriod (client-go)", leaderelection.JitterFactor), "RenewDeadline", "RetryPeriod")
	}
	if len(e.Rules) > 0 {
		return e
	}
	l.mu.Lock()
	l.stopWithin = renewDeadline + retryPeriod
	l.mu.Unlock()
	return nil
}

// Config returns cfg made to elect through l, or an error: *DurationError
// for durations that break the timing rule, ErrConfig for a Lock other
// than l, Coordinated election or a missing callback. Zero durations
// (all three) are set to Durations. It sets:
//
//   - Lock to l, Name to l's name when empty, and ReleaseOnCancel (a Run
//     that ends always resigns the term: otherwise the Lock's session
//     would keep it).
//   - OnStartedLeading to run yours with a ctx that carries the term's
//     fencing token (fence.FromContext) and is cancelled, with the reason
//     (context.Cause), as soon as the term ends, the elector's ctx is
//     cancelled or the elector releases. It is not run at all if the
//     term ended before it could start.
//   - OnStoppedLeading to run yours once per Run, as soon as the ctx
//     above is cancelled, so before etcd can admit another leader (and
//     the term is resigned only after it returned); or, if the Run never
//     led, when the Run ends, as client-go does.
//
// Use one Config at a time per Lock. Callbacks run on client-go's and
// the Lock's goroutines; keep OnStoppedLeading short (shorter than the
// safety margin) when the term is lost: it runs a margin before etcd can
// expire it.
func (l *Lock) Config(cfg leaderelection.LeaderElectionConfig) (leaderelection.LeaderElectionConfig, error) {
	switch {
	case cfg.Lock != nil && cfg.Lock != resourcelock.Interface(l):
		return cfg, fmt.Errorf("%w: Lock is another resourcelock", ErrConfig)
	case l.armAtStart:
		return cfg, fmt.Errorf("%w: the Lock is part of a Composite: use the Composite's Config", ErrConfig)
	}
	return l.configure(cfg, l)
}

// configure is Config for the resourcelock rl, l or the Composite that
// holds l.
func (l *Lock) configure(cfg leaderelection.LeaderElectionConfig, rl resourcelock.Interface) (leaderelection.LeaderElectionConfig, error) {
	switch {
	case cfg.Coordinated:
		return cfg, fmt.Errorf("%w: Coordinated election decides by Kubernetes objects", ErrConfig)
	case cfg.Callbacks.OnStartedLeading == nil || cfg.Callbacks.OnStoppedLeading == nil:
		return cfg, fmt.Errorf("%w: OnStartedLeading and OnStoppedLeading are required", ErrConfig)
	}
	if cfg.LeaseDuration == 0 && cfg.RenewDeadline == 0 && cfg.RetryPeriod == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = l.Durations()
	}
	if err := l.SetDurations(cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod); err != nil {
		return cfg, err
	}
	user := cfg.Callbacks
	l.mu.Lock()
	l.onStop = user.OnStoppedLeading
	l.mu.Unlock()
	cfg.Lock = rl
	cfg.ReleaseOnCancel = true
	if cfg.Name == "" {
		cfg.Name = l.name
	}
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context) { l.started(ctx, user.OnStartedLeading) }
	cfg.Callbacks.OnStoppedLeading = func() { l.runEnded(user.OnStoppedLeading) }
	return cfg, nil
}

// NewLeaderElector is leaderelection.NewLeaderElector of Config(cfg).
func (l *Lock) NewLeaderElector(cfg leaderelection.LeaderElectionConfig) (*leaderelection.LeaderElector, error) {
	cfg, err := l.Config(cfg)
	if err != nil {
		return nil, err
	}
	return leaderelection.NewLeaderElector(cfg)
}

// started runs the user's OnStartedLeading for the current leadership,
// unless it has already stopped.
func (l *Lock) started(ctx context.Context, start func(context.Context)) {
	l.mu.Lock()
	ld, onStop := l.lead, l.onStop
	l.mu.Unlock()
	if ld == nil {
		return
	}
	uctx, cancel := context.WithCancelCause(ctx)
	tctx, tcancel := ld.term.Context(uctx)
	ld.mu.Lock()
	if ld.stopped {
		ld.mu.Unlock()
		tcancel()
		cancel(nil)
		return
	}
	ld.cancel = func(cause error) { cancel(cause); tcancel() }
	if l.armAtStart {
		ld.onStop = onStop
	}
	ld.mu.Unlock()
	// client-go cancels ctx when the Run's ctx ends and when its renewals
	// fail: stop then, before it releases.
	context.AfterFunc(ctx, func() { l.stop(ld, context.Cause(ctx)) })
	start(tctx)
}

// runEnded runs when client-go's Run ends: it stops the leadership (which
// runs the user's OnStoppedLeading) if it has not stopped yet, resigns the
// term, and lets the next Run campaign again.
func (l *Lock) runEnded(userStop func()) {
	l.mu.Lock()
	ld := l.lead
	l.mu.Unlock()
	if ld == nil {
		userStop()
		return
	}
	l.drop(ld, errRunEnded)
	ld.mu.Lock()
	ran := ld.stopRan
	ld.mu.Unlock()
	if !ran { // a Composite's term that ended before its leader started
		userStop()
	}
}

// drop stops ld, resigns its term and forgets it, so that the next Update
// campaigns again.
func (l *Lock) drop(ld *leadership, cause error) {
	l.mu.Lock()
	if l.lead == ld {
		l.lead = nil
	}
	l.mu.Unlock()
	l.stop(ld, cause)
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl)
	_ = l.resign(ctx, ld)
	cancel()
	ld.unwatch()
	ld.tcancel()
}

// Context returns a copy of parent for work that must stop when this Lock
// stops leading. It carries the fencing token of the term the Lock leads
// at the time of each lookup (fence.FromContext; none while it does not
// lead), and is cancelled, with the reason, when parent is, when the
// leadership that is current when Context is called (or, if none, the next
// one) stops, or when the Lock closes. It is made for controller-runtime's
// Options.BaseContext (see package ctrlfence), whose manager leads once.
func (l *Lock) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	lc := &leaderContext{Context: ctx, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bound == nil {
		cancel(ErrClosed)
		return lc
	}
	if l.lead != nil && l.lead.isStopped() {
		cancel(ErrTermEnded)
		return lc
	}
	l.bound[lc] = cancel
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		delete(l.bound, lc)
		l.mu.Unlock()
	})
	return lc
}

// leaderContext looks the fencing token up in the Lock at each Value.
type leaderContext struct {
	context.Context
	l *Lock
}

func (c *leaderContext) Value(key any) any {
	c.l.mu.Lock()
	ld := c.l.lead
	c.l.mu.Unlock()
	if ld != nil && !ld.isStopped() {
		if v := ld.fctx.Value(key); v != nil {
			return v
		}
	}
	return c.Context.Value(key)
}

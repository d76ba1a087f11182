package ctrlfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/k8s/fencelock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// TermsLock is what a TermRunner leads through: a *fencelock.Lock or a
// *fencelock.Composite.
type TermsLock interface {
	RunTerms(ctx context.Context, t fencelock.Terms) error
}

// TermRunner makes a controller-runtime manager stay up across lost terms.
// controller-runtime's own leader election leads once (a lost term stops
// the manager), and a controller cannot be started twice; so instead:
//
//   - the manager does not elect (LeaderElection false; do not use Options),
//     and keeps its caches, informers, webhooks, metrics and probes
//     running across terms;
//   - the TermRunner, added to it with mgr.Add, campaigns through the lock
//     (fencelock.Lock.RunTerms) and, each term, runs the runnables Terms.New
//     makes for that term (controllers made with controller.NewUnmanaged on
//     the manager's cache, with SkipNameValidation, or any Runnable) with
//     the term's ctx, which carries its token;
//   - when the term ends their ctx is cancelled, the TermRunner waits until
//     every one returned (at most Terms.StopTimeout), and campaigns again
//     with a strictly higher token. If some did not return, Start returns
//     a *fencelock.StragglerError naming them and the manager stops: end
//     the process.
//
// It needs no leader election itself (NeedLeaderElection is false).
type TermRunner struct {
	lock  TermsLock
	terms fencelock.Terms
}

// NewTermRunner returns the TermRunner of lock and t (see
// fencelock.Terms; t.New is required).
func NewTermRunner(lock TermsLock, t fencelock.Terms) (*TermRunner, error) {
	if lock == nil || t.New == nil {
		return nil, errors.New("ctrlfence: a TermRunner needs a lock and Terms.New")
	}
	return &TermRunner{lock: lock, terms: t}, nil
}

// Start leads term after term until ctx ends (see fencelock.Lock.RunTerms).
func (r *TermRunner) Start(ctx context.Context) error {
	if err := r.lock.RunTerms(ctx, r.terms); err != nil {
		return fmt.Errorf("ctrlfence: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: the TermRunner elects for itself.
func (r *TermRunner) NeedLeaderElection() bool { return false }

// Runnable adapts a manager.Runnable (a controller, for example) to a
// fencelock.Runnable called name.
func Runnable(name string, r manager.Runnable) fencelock.Runnable {
	return fencelock.Runnable{Name: name, Run: r.Start}
}

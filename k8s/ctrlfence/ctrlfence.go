package ctrlfence

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/k8s/fencelock"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Options returns opts with the fields set that make a controller-runtime
// manager elect through lock:
//
//   - LeaderElection, LeaderElectionResourceLockInterface (lock),
//     LeaderElectionID (lock's name, when empty; controller-runtime uses
//     it in client-go's metrics) and LeaderElectionReleaseOnCancel (the
//     manager resigns after its runnables stopped).
//   - LeaseDuration, RenewDeadline and RetryPeriod: those left nil are
//     taken from lock.Durations(); all three are checked with
//     lock.SetDurations, and a *fencelock.DurationError (matching
//     fencelock.ErrDurations) is returned, with opts unchanged, when they
//     cannot keep the timing rule.
//   - BaseContext: the base context of every runnable becomes
//     lock.Context of the one opts had (or of context.Background()): it
//     carries the term's fencing token (fence.FromContext) once the manager
//     leads, and is cancelled as soon as the term ends, a safety margin
//     before etcd can admit the next leader, rather than when client-go
//     notices, after RenewDeadline. controller-runtime then stops the
//     manager ("leader election lost"), as it does on any loss.
//
// Reconcilers get their controller's context, so they find the token with
// fence.FromContext(ctx) and can hand ctx to guard.Transport, grpcguard or
// sqlguard.
func Options(lock *fencelock.Lock, opts manager.Options) (manager.Options, error) {
	if lock == nil {
		return opts, errors.New("ctrlfence: nil Lock")
	}
	ld, rd, rp := lock.Durations()
	pick := func(p *time.Duration, d time.Duration) *time.Duration {
		if p != nil {
			d = *p
		}
		return &d
	}
	leaseDuration, renewDeadline, retryPeriod := pick(opts.LeaseDuration, ld), pick(opts.RenewDeadline, rd), pick(opts.RetryPeriod, rp)
	if err := lock.SetDurations(*leaseDuration, *renewDeadline, *retryPeriod); err != nil {
		return opts, err
	}
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = leaseDuration, renewDeadline, retryPeriod
	opts.LeaderElection = true
	opts.LeaderElectionResourceLockInterface = lock
	opts.LeaderElectionReleaseOnCancel = true
	if opts.LeaderElectionID == "" {
		opts.LeaderElectionID = lock.Name()
	}
	base := opts.BaseContext
	opts.BaseContext = func() context.Context {
		parent := context.Background()
		if base != nil {
			parent = base()
		}
		return lock.Context(parent)
	}
	return opts, nil
}

// HealthCheck returns lock.Check as a healthz.Checker, for
// manager.AddHealthzCheck or AddReadyzCheck: it fails when the term the
// manager leads is about to end, before the term's Done closes.
func HealthCheck(lock *fencelock.Lock) healthz.Checker { return lock.Check }

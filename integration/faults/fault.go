package faults

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoTarget reports that a fault found nothing to act on when injected:
// no process, no lock holder, no leader. Nothing was changed, and the
// injection should not be counted.
var ErrNoTarget = errors.New("faults: nothing to inject into")

// The kinds of the faults in this package, as Fault.Kind returns them.
const (
	KindPause       = "pause"        // a holder process stopped with SIGSTOP
	KindPartition   = "partition"    // a client's link to etcd swallows every byte
	KindLostReplies = "lost-replies" // requests reach etcd, replies are dropped
	KindDelay       = "delay"        // a client's link to etcd is slow
	KindRevoke      = "revoke"       // the holder's etcd lease is revoked
	KindDeleteKey   = "delete-key"   // the holder's lock record is deleted
	KindMemberCrash = "member-crash" // an etcd member stops, and restarts on heal
	KindLeaderKill  = "leader-kill"  // the etcd leader stops, and restarts on heal
	KindSlowWriter  = "slow-writer"  // a holder's writes arrive late
	// KindMemberRestart: an etcd member stops and starts again at once
	// from its data dir, while holders renew.
	KindMemberRestart = "member-restart"
	// KindMemberSwitch: a client's links to every member but one are cut
	// and it reconnects to that one.
	KindMemberSwitch = "member-switch"
	// KindCompactedWatch: a holder is partitioned, its record deleted and
	// the history compacted past its watch before the partition heals.
	KindCompactedWatch = "compacted-watch"
)

// A Fault is one named, reusable disruption. Inject starts it; Heal undoes
// what can be undone (a revoked lease stays revoked: Heal of such one-shot
// faults does nothing). Inject returns ErrNoTarget when there was nothing to
// disrupt.
//
// A Fault may be injected again after Heal. Inject and Heal of one Fault
// must not run concurrently with each other.
type Fault interface {
	// Kind names the fault, for example "pause" (see the Kind constants).
	Kind() string
	// Inject starts the fault. ctx bounds the injection, not the fault.
	Inject(ctx context.Context) error
	// Heal ends the fault. Heal of a fault that is not injected is a no-op.
	Heal(ctx context.Context) error
}

// Apply injects f, keeps it for hold (or until ctx ends), and heals it. Heal
// runs even when ctx has ended, with a context of its own bounded by
// healTimeout. It returns the errors of Inject and Heal joined; when Inject
// fails, f is not held and Heal is not called.
func Apply(ctx context.Context, f Fault, hold time.Duration) error {
	if err := f.Inject(ctx); err != nil {
		return fmt.Errorf("%s: inject: %w", f.Kind(), err)
	}
	t := time.NewTimer(hold)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healTimeout)
	defer cancel()
	if err := f.Heal(hctx); err != nil {
		return fmt.Errorf("%s: heal: %w", f.Kind(), err)
	}
	return nil
}

// healTimeout bounds the Heal that Apply runs.
const healTimeout = 30 * time.Second

// funcFault is a Fault made of two functions.
type funcFault struct {
	kind         string
	inject, heal func(ctx context.Context) error
}

func (f *funcFault) Kind() string                     { return f.kind }
func (f *funcFault) Inject(ctx context.Context) error { return f.inject(ctx) }
func (f *funcFault) Heal(ctx context.Context) error {
	if f.heal == nil {
		return nil
	}
	return f.heal(ctx)
}

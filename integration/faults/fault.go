package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNoTarget reports that a fault found nothing to act on when injected:
// no process, no lock holder, no leader. Nothing was changed, and the
// injection should not be counted.
var ErrNoTarget = errors.New("faults: nothing to inject into")

// ErrPartial reports that a fault's injection failed after it had taken
// effect in part: what it did stands (a record deleted, links cut), the
// fault counts as injected, and Heal must still be called to undo what can
// be undone. CompactedWatch returns it when the holder's record is gone
// but the compaction failed.
var ErrPartial = errors.New("faults: injected in part")

// ErrOutcomeUnknown reports that a fault's injection failed in a way that
// leaves its effect unknown: a delete or revoke whose reply never came
// may have applied. It should not be counted, but whoever judges what
// happened meanwhile must allow that it took effect. Heal may be called.
var ErrOutcomeUnknown = errors.New("faults: injection's outcome unknown")

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
// fails, f is not held and Heal is not called, unless the error matches
// ErrPartial: the fault took effect, and is held and healed as usual.
func Apply(ctx context.Context, f Fault, hold time.Duration) error {
	ierr := f.Inject(ctx)
	if ierr != nil && !errors.Is(ierr, ErrPartial) {
		return fmt.Errorf("%s: inject: %w", f.Kind(), ierr)
	}
	if ierr != nil {
		ierr = fmt.Errorf("%s: inject: %w", f.Kind(), ierr)
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
		return errors.Join(ierr, fmt.Errorf("%s: heal: %w", f.Kind(), err))
	}
	return ierr
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

// A Taker is a fault that takes lock records away behind their holders'
// backs (DeleteHolder, RevokeHolder, CompactedWatch). Taken names the
// records its last Inject deleted, or may have deleted (an outcome
// unknown), by their creation revisions (the fencing tokens of the
// acquisitions they belonged to); nil before any Inject or when it
// deleted nothing. It lets a check tell the hand-overs a fault explains
// from the rest, whenever the holders' calls returned.
type Taker interface {
	Fault
	Taken() []int64
}

// takeFault is a Taker made of two functions; inject reports the records
// it took (or may have), whatever its error.
type takeFault struct {
	kind   string
	inject func(ctx context.Context) ([]int64, error)
	heal   func(ctx context.Context) error

	mu    sync.Mutex
	taken []int64
}

func (f *takeFault) Kind() string { return f.kind }

func (f *takeFault) Inject(ctx context.Context) error {
	taken, err := f.inject(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taken = taken
	return err
}

func (f *takeFault) Heal(ctx context.Context) error {
	if f.heal == nil {
		return nil
	}
	return f.heal(ctx)
}

// Taken returns the creation revisions of the records the last Inject
// took away, or may have.
func (f *takeFault) Taken() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.taken...)
}

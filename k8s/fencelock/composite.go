package fencelock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Composite is the resourcelock.Interface of the rollout from client-go's
// LeaseLock to fencekit: it holds the coordination.k8s.io Lease, through
// client-go's own *resourcelock.LeaseLock (so unmodified LeaseLock
// candidates see an ordinary holder, and a Composite waits a LeaseLock
// holder out exactly as they do), and the Lock's fencekit term, and leads
// only while it holds both. The fencing token is the term's.
//
// Acquiring goes term first, then Lease: Get queues in etcd until the
// Lock leads a term, then reads the Lease; client-go writes the Lease
// (a compare-and-swap on its resourceVersion) only once the record it
// read is free or expired, and the write confirms the term first. Losing
// either ends the leadership: the term's end (a safety margin before etcd
// can expire it) stops the leader at once and then releases the Lease;
// a Lease that cannot be renewed stops it after RenewDeadline, as with a
// LeaseLock, and the term is resigned after that. See the package doc
// ("Adopting fencekit in a running controller") for why two leaders
// cannot overlap in either mixed phase of a rollout.
//
// One Composite is one candidate; use it through Config or
// NewLeaderElector. Its Lock must not be used on its own any more.
type Composite struct {
	fk    *Lock
	lease *resourcelock.LeaseLock

	mu   sync.Mutex  // serialises the elector's calls and the release after a loss
	won  *leadership // the term under which this candidate last wrote the Lease as its holder
	held *leadership // won, while the Lease is not released yet
	last resourcelock.LeaderElectionRecord
	// holder is the Lease's holder as last read or written: a release
	// never writes a Lease that another candidate took meanwhile
	// (client-go's release decides by the record it last observed).
	holder string
	wg     sync.WaitGroup
}

// NewComposite returns the Composite of leaseLock (client-go's LeaseLock
// of the Lease the running controller elects through today) and lock;
// both must have the same identity. It does no I/O.
func NewComposite(leaseLock *resourcelock.LeaseLock, lock *Lock) (*Composite, error) {
	switch {
	case leaseLock == nil || lock == nil:
		return nil, fmt.Errorf("%w: nil LeaseLock or Lock", ErrConfig)
	case leaseLock.Identity() != lock.Identity():
		return nil, fmt.Errorf("%w: LeaseLock %q, Lock %q", ErrIdentity, leaseLock.Identity(), lock.Identity())
	}
	lock.mu.Lock()
	defer lock.mu.Unlock()
	if lock.armAtStart || lock.lead != nil || lock.closed {
		return nil, fmt.Errorf("%w: the Lock is in use (leading, closed or part of another Composite)", ErrConfig)
	}
	lock.armAtStart = true
	return &Composite{fk: lock, lease: leaseLock}, nil
}

// Lock returns the fencekit Lock: its Fence, Check and Context serve the
// Composite's leader too.
func (c *Composite) Lock() *Lock { return c.fk }

// Identity returns the candidate's identity.
func (c *Composite) Identity() string { return c.fk.identity }

// Describe names both locks.
func (c *Composite) Describe() string { return c.lease.Describe() + " + " + c.fk.Describe() }

// RecordEvent records s as both locks do (an event about the Lease when
// its LeaseLock has a recorder, and the Lock's log and recorder).
func (c *Composite) RecordEvent(s string) {
	c.lease.RecordEvent(s)
	c.fk.RecordEvent(s)
}

// Get waits until the Lock leads a fencekit term (queueing in etcd, as the
// Lock's Update does; at once when it does), then returns the Lease's
// record, as LeaseLock.Get does, for client-go to decide by its clock
// whether the Lease is free. A term that ended before this candidate won
// the Lease under it is resigned and queued for again.
func (c *Composite) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.term(ctx); err != nil {
		return nil, nil, err
	}
	rec, raw, err := c.lease.Get(ctx)
	if err == nil {
		c.holder = rec.HolderIdentity
	}
	return rec, raw, err
}

// Create is Update through LeaseLock.Create: the Lease does not exist
// yet.
func (c *Composite) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.write(ctx, ler, c.lease.Create)
}

// Update acts on the record the elector wants written:
//
//   - HolderIdentity empty (client-go's release): the leadership stops
//     (the leader's ctx is cancelled and OnStoppedLeading runs), then the
//     Lease is released and the term resigned.
//   - this candidate's identity: the term is confirmed (ErrTermEnded once
//     it ended, ErrShortValidity as for a Lock), and only then the Lease
//     written (LeaseLock.Update: a compare-and-swap on the resourceVersion
//     last read, so it fails if anyone wrote the Lease since).
func (c *Composite) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ler.HolderIdentity == "" {
		return c.release(ctx, ler)
	}
	return c.write(ctx, ler, c.lease.Update)
}

// Fence returns the fencing token of the term the Composite leads under,
// as Lock.Fence.
func (c *Composite) Fence() (fence.Token, error) { return c.fk.Fence() }

// Config returns cfg made to elect through c, as Lock.Config does for a
// Lock (the callbacks, ReleaseOnCancel, zero durations set to the Lock's
// Durations, the timing rule checked), and one rule more: LeaseDuration
// must be whole seconds, because the Lease records it in seconds and the
// LeaseLock candidates wait the recorded value out. Give it the durations
// the LeaseLock candidates use.
func (c *Composite) Config(cfg leaderelection.LeaderElectionConfig) (leaderelection.LeaderElectionConfig, error) {
	switch {
	case cfg.Lock != nil && cfg.Lock != resourcelock.Interface(c):
		return cfg, fmt.Errorf("%w: Lock is another resourcelock", ErrConfig)
	case cfg.LeaseDuration%time.Second != 0:
		return cfg, &DurationError{TTL: c.fk.ttl, Margin: c.fk.margin, LeaseDuration: cfg.LeaseDuration,
			RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod, Change: []string{"LeaseDuration"},
			Rules: []string{"LeaseDuration must be whole seconds (the Lease records seconds)"}}
	}
	return c.fk.configure(cfg, c)
}

// NewLeaderElector is leaderelection.NewLeaderElector of Config(cfg).
func (c *Composite) NewLeaderElector(cfg leaderelection.LeaderElectionConfig) (*leaderelection.LeaderElector, error) {
	cfg, err := c.Config(cfg)
	if err != nil {
		return nil, err
	}
	return leaderelection.NewLeaderElector(cfg)
}

// Close closes the Lock (stopping the leadership and resigning the term)
// and waits for a release of the Lease after a lost term to finish. It
// does not release a Lease the elector holds: cancel the elector's Run
// first, which does.
func (c *Composite) Close() error {
	err := c.fk.Close()
	c.wg.Wait()
	return err
}

// term makes sure the Lock leads a term, campaigning when it leads none
// and when the one it led ended before the Lease was won under it. It
// reports whether it campaigned (and so confirmed the term).
func (c *Composite) term(ctx context.Context) (campaigned bool, err error) {
	l := c.fk
	l.mu.Lock()
	ld := l.lead
	l.mu.Unlock()
	if ld != nil && ld.isStopped() && c.won != ld {
		l.drop(ld, ErrTermEnded)
		ld = nil
	}
	if ld != nil {
		return false, nil
	}
	c.won, c.held = nil, nil
	return true, l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: l.identity})
}

// write confirms the term, then writes ler to the Lease with op.
func (c *Composite) write(ctx context.Context, ler resourcelock.LeaderElectionRecord, op func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	l := c.fk
	if ler.HolderIdentity != l.identity {
		return fmt.Errorf("%w: record for %q, Composite is %q", ErrIdentity, ler.HolderIdentity, l.identity)
	}
	campaigned, err := c.term(ctx)
	if err != nil {
		return err
	}
	if !campaigned {
		if err := l.Update(ctx, ler); err != nil { // confirms the term
			return err
		}
	}
	l.mu.Lock()
	ld := l.lead
	l.mu.Unlock()
	if ld == nil { // closed meanwhile
		return ErrClosed
	}
	if err := op(ctx, ler); err != nil {
		return err
	}
	c.last, c.holder = ler, ler.HolderIdentity
	if c.won != ld {
		c.won = ld
		c.wg.Add(1)
		context.AfterFunc(ld.tctx, func() { c.releaseAfterLoss(ld) })
	}
	c.held = ld
	return nil
}

// release is client-go's release: stop, release the Lease, resign.
func (c *Composite) release(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l := c.fk
	l.mu.Lock()
	ld := l.lead
	l.mu.Unlock()
	if ld != nil {
		l.stop(ld, lease.ErrReleased)
	}
	if c.held != nil && c.holder == l.identity {
		if err := c.lease.Update(ctx, ler); err != nil {
			return err // client-go retries a conflict
		}
		c.holder = ""
	}
	c.held = nil
	if ld == nil {
		return nil
	}
	return l.resign(ctx, ld)
}

// releaseAfterLoss runs when ld's term ends (or is let go): once the
// leader has stopped, it releases the Lease if it still holds it under
// ld, so that the next candidate need not wait for client-go to notice.
// The write is a compare-and-swap: it changes nothing if anyone wrote the
// Lease since.
func (c *Composite) releaseAfterLoss(ld *leadership) {
	defer c.wg.Done()
	c.fk.stop(ld, cmpErr(context.Cause(ld.tctx), ErrTermEnded))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != ld || c.holder != c.fk.identity {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.fk.ttl)
	defer cancel()
	now := metav1.NewTime(time.Now())
	err := c.lease.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: c.last.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	})
	if err != nil {
		c.fk.log.Warn("fencelock: release of the Lease after a lost term failed; it expires by LeaseDuration",
			slog.String("lock", c.Describe()), slog.String("error", err.Error()))
		return
	}
	c.held, c.holder = nil, ""
}

var _ resourcelock.Interface = (*Composite)(nil)

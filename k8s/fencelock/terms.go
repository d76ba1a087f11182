package fencelock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"k8s.io/client-go/tools/leaderelection"
)

// ErrStragglers reports runnables of an ended term that had not returned
// within Terms.StopTimeout; the error is a *StragglerError.
var ErrStragglers = errors.New("fencelock: runnables of an ended term did not return")

// errTermOver cancels a Run whose term ended, so that client-go releases
// at once instead of after RenewDeadline of failed renewals.
var errTermOver = errors.New("fencelock: the term ended")

// Runnable is one piece of a term's work, run by RunTerms with the term's
// ctx.
type Runnable struct {
	// Name names it in a *StragglerError; unique within a term.
	Name string
	// Run works until ctx ends. An error it returns while the term lasts
	// ends the term, and RunTerms returns it.
	Run func(ctx context.Context) error
}

// Terms configures RunTerms: leading again, in the same process, after
// every lost term.
type Terms struct {
	// Elector is the elector's configuration, as for Config; its
	// OnStartedLeading must be nil (the runnables are the leader's work).
	// OnStoppedLeading and OnNewLeader are optional.
	Elector leaderelection.LeaderElectionConfig
	// New returns the runnables of a term, called with the term's ctx
	// (which carries its token) when the term starts, so that work that
	// runs once (a controller-runtime controller) is made anew each term.
	New func(ctx context.Context) ([]Runnable, error)
	// StopTimeout bounds how long the runnables of an ended term get to
	// return after their ctx was cancelled; zero means the Lock's TTL.
	StopTimeout time.Duration
}

// StragglerError names the runnables of a term that had not returned
// StopTimeout after the term's ctx was cancelled. They may still run:
// end the process; their writes carry the ended term's token, which a
// fenced resource refuses once a successor has written.
type StragglerError struct {
	// Term is the ended term's token.
	Term fence.Token
	// Names are the runnables still running.
	Names []string
	// Waited is how long RunTerms waited for them.
	Waited time.Duration
}

// Error names the stragglers.
func (e *StragglerError) Error() string {
	return fmt.Sprintf("fencelock: term %d ended %v ago and runnables %s have not returned",
		e.Term.Revision, e.Waited.Round(time.Millisecond), strings.Join(e.Names, ", "))
}

// Is reports whether target is ErrStragglers.
func (e *StragglerError) Is(target error) bool { return target == ErrStragglers }

// RunTerms leads through l again and again until ctx ends: each term runs
// the runnables t.New returns with the term's ctx (fence.FromContext gives
// its token); when the term ends (lost in etcd, released, a runnable's
// error) their ctx is cancelled, RunTerms waits until every one returned,
// at most t.StopTimeout, and only then campaigns again, so every term of
// this process starts after every runnable of its previous term returned,
// with a strictly higher token (each campaign is a new record in etcd).
// It returns nil when ctx ends, a *StragglerError (ErrStragglers) when
// runnables did not return in time, a runnable's or New's error, or
// Config's error for a bad t.Elector.
func (l *Lock) RunTerms(ctx context.Context, t Terms) error {
	return runTerms(ctx, t, l.ttl, func(cfg leaderelection.LeaderElectionConfig) (leaderelection.LeaderElectionConfig, error) {
		return l.Config(cfg)
	})
}

// RunTerms is Lock.RunTerms through the Composite.
func (c *Composite) RunTerms(ctx context.Context, t Terms) error {
	return runTerms(ctx, t, c.fk.ttl, c.Config)
}

func runTerms(ctx context.Context, t Terms, ttl time.Duration, config func(leaderelection.LeaderElectionConfig) (leaderelection.LeaderElectionConfig, error)) error {
	switch {
	case t.New == nil:
		return fmt.Errorf("%w: Terms.New is required", ErrConfig)
	case t.Elector.Callbacks.OnStartedLeading != nil:
		return fmt.Errorf("%w: Terms.Elector.Callbacks.OnStartedLeading must be nil: the runnables are the leader's work", ErrConfig)
	case t.StopTimeout < 0:
		return fmt.Errorf("%w: negative StopTimeout", ErrConfig)
	}
	if t.StopTimeout == 0 {
		t.StopTimeout = ttl
	}
	for ctx.Err() == nil {
		if err := runTerm(ctx, t, config); err != nil {
			return err
		}
	}
	return nil
}

// runTerm runs one elector Run: at most one term.
func runTerm(ctx context.Context, t Terms, config func(leaderelection.LeaderElectionConfig) (leaderelection.LeaderElectionConfig, error)) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g := &termGroup{fail: cancel}
	cfg := t.Elector
	userStop := cfg.Callbacks.OnStoppedLeading
	cfg.Callbacks.OnStartedLeading = func(lctx context.Context) {
		context.AfterFunc(lctx, func() { cancel(errTermOver) })
		g.start(lctx, t.New)
	}
	cfg.Callbacks.OnStoppedLeading = func() {
		if userStop != nil {
			userStop()
		}
	}
	cfg, err := config(cfg)
	if err != nil {
		return err
	}
	le, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	le.Run(rctx)
	cancel(errTermOver)
	return g.wait(t.StopTimeout)
}

// termGroup is the runnables of one term.
type termGroup struct {
	fail context.CancelCauseFunc // ends the term

	mu      sync.Mutex
	closed  bool // wait began: start no more
	tok     fence.Token
	running map[string]bool
	err     error // the first runnable's (or New's) error while the term lasted
	wg      sync.WaitGroup
}

// start runs the term's runnables, unless the term is already over.
func (g *termGroup) start(ctx context.Context, newRunnables func(context.Context) ([]Runnable, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || ctx.Err() != nil {
		return
	}
	g.tok, _ = fence.FromContext(ctx)
	rs, err := newRunnables(ctx)
	if err == nil {
		err = checkRunnables(rs)
	}
	if err != nil {
		g.err = err
		g.fail(err)
		return
	}
	g.running = make(map[string]bool, len(rs))
	for _, r := range rs {
		g.running[r.Name] = true
		g.wg.Add(1)
		go g.run(ctx, r)
	}
}

func (g *termGroup) run(ctx context.Context, r Runnable) {
	defer g.wg.Done()
	err := r.Run(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.running, r.Name)
	if err != nil && ctx.Err() == nil && g.err == nil {
		g.err = fmt.Errorf("fencelock: runnable %s: %w", r.Name, err)
		g.fail(g.err)
	}
}

// wait waits for the runnables to return, at most d.
func (g *termGroup) wait(d time.Duration) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.err
	case <-timer.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, 0, len(g.running))
	for n := range g.running {
		names = append(names, n)
	}
	slices.Sort(names)
	return &StragglerError{Term: g.tok, Names: names, Waited: d}
}

func checkRunnables(rs []Runnable) error {
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Name == "" || r.Run == nil || seen[r.Name] {
			return fmt.Errorf("%w: a runnable needs a unique name and a Run func (%q)", ErrConfig, r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}

package lifetime

import (
	"context"
	"sync"
	"time"

	"github.com/fencekit/fencekit/lease/internal/resend"
)

// Group is a Client's background work: goroutines bounded by the Client's
// lifetime (ctx, cancelled by Close), which Close waits for.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewGroup returns a Group whose lifetime has begun.
func NewGroup() *Group {
	ctx, cancel := context.WithCancel(context.Background())
	return &Group{ctx: ctx, cancel: cancel}
}

// Spawn runs f in a goroutine of the group.
func (g *Group) Spawn(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

// Stop cancels the group's ctx and waits for its goroutines.
func (g *Group) Stop() {
	g.cancel()
	g.wg.Wait()
}

// Sleep waits d, and reports false if the group stopped first.
func (g *Group) Sleep(d time.Duration) bool { return resend.Sleep(g.ctx, nil, d) }

// Context is the group's lifetime: cancelled by Stop.
func (g *Group) Context() context.Context { return g.ctx }

package lease

import (
	"context"
	"sync"
	"time"

	"github.com/fencekit/fencekit/lease/internal/resend"
)

// group is a Client's background work: goroutines bounded by the Client's
// lifetime (ctx, cancelled by Close), which Close waits for.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newGroup() *group {
	ctx, cancel := context.WithCancel(context.Background())
	return &group{ctx: ctx, cancel: cancel}
}

// spawn runs f in a goroutine of the group.
func (g *group) spawn(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

// stop cancels the group's ctx and waits for its goroutines.
func (g *group) stop() {
	g.cancel()
	g.wg.Wait()
}

// sleep waits d, and reports false if the group stopped first.
func (g *group) sleep(d time.Duration) bool { return resend.Sleep(g.ctx, nil, d) }

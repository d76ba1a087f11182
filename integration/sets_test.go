//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Lock sets taken in crossing orders under contention and network faults:
// 8 Clients, each behind its own fault proxy, repeatedly take a random set
// of 2 to 4 of 6 locks (in random name order) and write their fence to each
// lock's resource through a guard. Partitions and paused links take some
// Clients away meanwhile. Checked: no deadlock (every AcquireAll returns
// within its own deadline, and every Client keeps making progress), no
// two live holders of one lock at once (a holder admitted while another
// holder of one of its locks had not seen its lease end), and no stale
// write accepted by a resource. FENCEKIT_SETS_DURATION sets the length (20 s
// by default; the soak is 60 s).
func TestSetsUnderFaults(t *testing.T) {
	duration := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FENCEKIT_SETS_DURATION")); err == nil {
		duration = d
	}
	cl := etcdtest.Start(t)
	locks := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	book := &setBook{holder: map[string]*lease.Lease{}, releasing: map[*lease.Lease]bool{}, accepted: map[string]int64{}}

	const clients = 8
	proxies := make([]*faults.Proxy, clients)
	sets := make([]*lease.Client, clients)
	for i := range clients {
		p, err := cl.NewProxy(cl.Members()[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies[i] = p
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		c, err := lease.New(cli, lease.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sets[i] = c
	}

	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	var wg sync.WaitGroup
	done := make([]int, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done[i] = setWorker(ctx, t, sets[i], g, book, locks, uint64(i))
		}()
	}
	faultCount := injectSetFaults(ctx, t, proxies)
	wg.Wait()

	t.Logf("%v, %d faults: sets completed per client %v; writes accepted %d, refused stale %d",
		duration, faultCount, done, book.writes, book.stale)
	for i, n := range done {
		if n == 0 {
			t.Errorf("client %d completed no set: stuck?", i)
		}
	}
	if len(book.violations) > 0 {
		t.Fatalf("%d violations, first: %s", len(book.violations), book.violations[0])
	}
}

// setBook is what the workers saw: the live holder of each lock, and the
// problems found.
type setBook struct {
	mu         sync.Mutex
	holder     map[string]*lease.Lease
	releasing  map[*lease.Lease]bool // Release called: etcd may hand the lock on before it returns
	accepted   map[string]int64      // per resource: the last revision a write was accepted with
	writes     int
	stale      int
	violations []string
}

// admit records l as the holder of its lock; a holder before it whose
// lease has not ended yet is a violation.
func (b *setBook) admit(l *lease.Lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if prev := b.holder[l.Name()]; prev != nil && !b.releasing[prev] && prev.Err() == nil {
		b.violations = append(b.violations, fmt.Sprintf("%s: %v admitted while %v still held it", l.Name(), l.Fence(), prev.Fence()))
	}
	if prev := b.holder[l.Name()]; prev != nil {
		delete(b.releasing, prev)
	}
	b.holder[l.Name()] = l
}

// release records that the holder of leases is releasing them.
func (b *setBook) release(leases []*lease.Lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range leases {
		b.releasing[l] = true
	}
}

// wrote records the outcome of a write with t.
func (b *setBook) wrote(t fence.Token, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err == nil:
		if last := b.accepted[t.Lock]; t.Revision < last {
			b.violations = append(b.violations, fmt.Sprintf("%s: write with %d accepted after %d", t.Lock, t.Revision, last))
		}
		b.accepted[t.Lock] = t.Revision
		b.writes++
	case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrWrongLock):
		b.stale++
	}
}

// setWorker takes sets until ctx ends, and returns how many it completed.
func setWorker(ctx context.Context, t *testing.T, c *lease.Client, g *guard.Guard, book *setBook, locks []string, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 30))
	completed := 0
	for ctx.Err() == nil {
		names := append([]string(nil), locks...)
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:2+rng.IntN(3)]
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		set, err := c.AcquireAll(actx, names...)
		cancel()
		if took := time.Since(start); took > 6*time.Second {
			t.Errorf("AcquireAll returned %v after its 5 s deadline", took)
		}
		if err != nil {
			continue // timed out, or lost to a fault: try another set
		}
		for _, l := range set.Leases() {
			book.admit(l)
		}
		wctx, done := set.Context(ctx)
		for _, name := range names {
			tok := set.Fence(name)
			err := g.Do(wctx, guard.Target{Resource: name, Lock: name}, tok, func(context.Context) error {
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				return nil
			})
			book.wrote(tok, err)
		}
		done()
		book.release(set.Leases())
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if set.Release(rctx) == nil {
			completed++
		}
		cancel()
	}
	return completed
}

// injectSetFaults partitions or pauses a random client's link, one at a
// time, until ctx ends, and returns how many faults it injected.
func injectSetFaults(ctx context.Context, t *testing.T, proxies []*faults.Proxy) int {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(time.Duration(300+rng.IntN(700)) * time.Millisecond):
		}
		p := proxies[rng.IntN(len(proxies))]
		f := faults.Partition(p)
		hold := partitionHold
		if rng.IntN(2) == 0 {
			f, hold = faults.SlowLink(linkDelay, p), slowHold
		}
		if err := faults.Apply(ctx, f, hold); err != nil && ctx.Err() == nil {
			t.Errorf("fault: %v", err)
		}
		n++
	}
}

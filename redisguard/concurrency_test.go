package redisguard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/redisguard"
)

// TestConcurrentWritersNeverApplyStale: 8 writers make 10,000 fenced
// writes between them, each with either the newest token issued so far
// or a random older one, while new tokens keep being issued. Each
// accepted write appends its token's revision to a history list in the
// same script, so the list is the order in which writes were applied: it
// must never go down (no write older than an applied one was applied
// after it). Every refusal must be stale against a newer mark, a sampler
// must see the mark only rise, and the counter must equal the history.
func TestConcurrentWritersNeverApplyStale(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 1)
	const writers, writes = 8, 10000
	var issued atomic.Int64
	issued.Store(1)
	hist, count := f.key("history"), f.key("count")

	var accepted, refused atomic.Int64
	errs := make(chan error, writers+1)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		var last int64
		for {
			select {
			case <-stop:
				return
			default:
			}
			m, err := f.g.Mark(ctx, f.res)
			if err != nil {
				errs <- err
				return
			}
			if m.Revision < last {
				errs <- errors.New("the mark went down from " + strconv.FormatInt(last, 10) + " to " + m.String())
				return
			}
			last = m.Revision
		}
	})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range writes / writers {
				if r.IntN(20) == 0 {
					issued.Add(1) // a new acquisition
				}
				rev := issued.Load()
				if r.IntN(2) == 0 && rev > 1 {
					rev = 1 + r.Int64N(rev-1) // an older holder's token
				}
				t := fence.Token{Lock: "orders", Revision: rev}
				_, err := f.g.Exec(ctx, f.tgt, t,
					redisguard.Command("RPUSH", hist, strconv.FormatInt(rev, 10)),
					redisguard.IncrBy(count, 1))
				var stale *fence.RefusedError
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.As(err, &stale) && stale.Mark.Revision > rev:
					refused.Add(1)
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	list, err := f.cli.LRange(ctx, hist, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var prev int64
	for i, s := range list {
		rev, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if rev < prev {
			t.Fatalf("write %d of the history has revision %d after %d: a stale write was applied", i, rev, prev)
		}
		prev = rev
	}
	n, _ := f.cli.Get(ctx, count).Int64()
	if int64(len(list)) != accepted.Load() || n != accepted.Load() {
		t.Errorf("history %d, counter %d, accepted %d: they must agree", len(list), n, accepted.Load())
	}
	if accepted.Load()+refused.Load() != writes {
		t.Errorf("accepted %d + refused %d != %d", accepted.Load(), refused.Load(), writes)
	}
	if m, err := f.g.Mark(ctx, f.res); err != nil || m.Revision != prev {
		t.Errorf("final mark %v, %v; the history ends at %d", m, err, prev)
	}
	if refused.Load() == 0 || accepted.Load() == 0 {
		t.Errorf("accepted %d, refused %d: the test must exercise both", accepted.Load(), refused.Load())
	}
	t.Logf("%d writes: %d applied, %d refused as stale; final mark %d", writes, accepted.Load(), refused.Load(), prev)
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fencekit/lease"
)

// doSteps runs up to n steps of work under h, whatever h holds: each step
// under h's Context (cancelled the moment h ends, and carrying its fencing
// tokens for guard.Transport), and only while h is held, nobody asked for
// it back, and its validity leaves time for one more step. Then it
// releases h. It returns the steps done.
func doSteps(ctx context.Context, h lease.Handle, n int, step time.Duration, work func(context.Context) error) (int, error) {
	wctx, cancel := h.Context(ctx)
	defer cancel()
	done := 0
	for ; done < n; done++ {
		select {
		case <-h.Done():
			return done, h.Err() // lost: stop at once, nothing to release
		case <-h.ReleaseRequested():
			return done, h.Release(ctx)
		default:
		}
		if time.Until(h.ValidUntil()) < step {
			break // renewals are late: do not start what may outlive the lock
		}
		if err := work(wctx); err != nil {
			return done, errors.Join(err, h.Release(ctx))
		}
	}
	return done, h.Release(ctx)
}

// One function serves a Lease, a Permit, a Set and a Term: each is a
// Handle.
func ExampleHandle() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	var held []lease.Handle
	l, err := locks.Acquire(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	held = append(held, l)
	sem, err := locks.Semaphore("pool", 2)
	if err != nil {
		log.Fatal(err)
	}
	p, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	held = append(held, p)
	set, err := locks.AcquireAll(ctx, []string{"account-17", "account-42"})
	if err != nil {
		log.Fatal(err)
	}
	held = append(held, set)
	election, err := locks.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	term, err := election.Campaign(ctx, "pod-a")
	if err != nil {
		log.Fatal(err)
	}
	held = append(held, term)

	for _, h := range held {
		n, err := doSteps(ctx, h, 3, time.Second, func(context.Context) error { return nil })
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v: %d steps, %d fencing token(s), released: %v\n",
			h.Names(), n, len(h.Fences()), errors.Is(h.Err(), lease.ErrReleased))
	}
	// Output:
	// [orders]: 3 steps, 1 fencing token(s), released: true
	// [pool]: 3 steps, 0 fencing token(s), released: true
	// [account-17 account-42]: 3 steps, 2 fencing token(s), released: true
	// [scheduler]: 3 steps, 1 fencing token(s), released: true
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fencekit/lease"
)

// At most two migrations run at once, across every process that uses the
// semaphore "migrations" with size 2.
func ExampleClient_Semaphore() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	sem, err := locks.Semaphore("migrations", 2)
	if err != nil {
		log.Fatal(err)
	}
	a, err := sem.Acquire(ctx) // a *lease.Permit: Release, Renew, Done, Err; no fence
	if err != nil {
		log.Fatal(err)
	}
	b, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx)
	fmt.Println("third permit while two are held:", errors.Is(err, lease.ErrHeld))

	// A semaphore of another size under the same name is refused.
	other, err := locks.Semaphore("migrations", 3)
	if err != nil {
		log.Fatal(err)
	}
	_, err = other.TryAcquire(ctx)
	fmt.Println("size mismatch:", errors.Is(err, lease.ErrMismatch))

	for _, p := range []*lease.Permit{a, b} {
		if err := p.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// third permit while two are held: true
	// size mismatch: true
}

// Readers share the lock; the writer's Lease carries a fencing token.
func ExampleClient_RWMutex() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	rw, err := locks.RWMutex("catalog")
	if err != nil {
		log.Fatal(err)
	}
	r1, err := rw.RLock(ctx) // readers share: *lease.Permit
	if err != nil {
		log.Fatal(err)
	}
	r2, err := rw.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = rw.TryLock(ctx)
	fmt.Println("writer while reading:", errors.Is(err, lease.ErrHeld))
	r1.Release(ctx)
	r2.Release(ctx)

	w, err := rw.Lock(ctx) // one writer: a fenced *lease.Lease
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer's token is newer than the reads:", w.Fence().Revision > r2.Revision())
	if err := w.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// writer while reading: true
	// writer's token is newer than the reads: true
}

// One replica leads and publishes its address; everyone can ask who leads.
func ExampleClient_Election() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	election, err := locks.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	err = election.Run(ctx, "10.0.0.7:8080", func(ctx context.Context, term *lease.Term) error {
		ldr, err := election.Leader(ctx) // who leads, its term (a fence) and since when
		if err != nil {
			return err
		}
		fmt.Println("leader:", ldr.Value)
		fmt.Println("its term is our fence:", ldr.Term == term.Fence())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = election.Leader(ctx)
	fmt.Println("after resigning:", errors.Is(err, lease.ErrNoLeader))
	// Output:
	// leader: 10.0.0.7:8080
	// its term is our fence: true
	// after resigning: true
}

// Observe yields the current leader, then every change.
func ExampleElection_Observe() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	election, err := locks.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	term, err := election.Campaign(ctx, "a")
	if err != nil {
		log.Fatal(err)
	}

	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	for ldr := range election.Observe(octx) {
		switch {
		case ldr.IsZero():
			fmt.Println("no leader")
			stopObserving()
		case ldr.Value == "a" && ldr.Since.IsZero():
			// The term's start is published right after it is won.
		case ldr.Value == "a":
			fmt.Println("leader a")
			if err := term.Proclaim(ctx, "b"); err != nil {
				log.Fatal(err)
			}
		case ldr.Value == "b":
			fmt.Println("leader now publishes b")
			if err := term.Resign(ctx); err != nil {
				log.Fatal(err)
			}
		}
	}
	// Output:
	// leader a
	// leader now publishes b
	// no leader
}

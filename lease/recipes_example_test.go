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
			if err := term.Release(ctx); err != nil {
				log.Fatal(err)
			}
		}
	}
	// Output:
	// leader a
	// leader now publishes b
	// no leader
}

// A rolling deploy hands leadership to a chosen replica: the leader's term
// ends and the chosen candidate leads, in one etcd transaction, with a
// higher term. The candidate queued ahead of it is passed over and queues
// again by itself.
func ExampleTerm_Transfer() {
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
	term, err := election.Campaign(ctx, "pod-a")
	if err != nil {
		log.Fatal(err)
	}
	// Two more replicas campaign, pod-b first (each would have its own
	// Client, in its own process).
	terms := make(chan *lease.Term, 2)
	for i, value := range []string{"pod-b", "pod-c"} {
		go func() {
			t, err := election.Campaign(ctx, value)
			if err != nil {
				log.Fatal(err)
			}
			terms <- t
		}()
		waitCandidates(ctx, election, i+1)
	}

	cands, err := election.Candidates(ctx) // waiting, in the order they would lead
	if err != nil {
		log.Fatal(err)
	}
	to := cands[1] // pod-c
	if err := term.Transfer(ctx, to); err != nil {
		log.Fatal(err)
	}
	fmt.Println("old term transferred:", errors.Is(term.Err(), lease.ErrTransferred))
	next := <-terms
	fmt.Println("leads:", next.Value(), "with a higher term:", next.Fence().Revision > term.Fence().Revision)
	waitCandidates(ctx, election, 1)
	cands, err = election.Candidates(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting:", cands[0].Value, "queued again with a higher term:", cands[0].Term.Revision > next.Fence().Revision)

	err = term.Transfer(ctx, cands[0])
	fmt.Println("a term that ended cannot transfer:", errors.Is(err, lease.ErrTransferred))
	if err := next.Release(ctx); err != nil {
		log.Fatal(err)
	}
	last := <-terms
	if err := last.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// old term transferred: true
	// leads: pod-c with a higher term: true
	// waiting: pod-b queued again with a higher term: true
	// a term that ended cannot transfer: true
}

// waitCandidates waits until n candidates wait in e.
func waitCandidates(ctx context.Context, e *lease.Election, n int) {
	for {
		cands, err := e.Candidates(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if len(cands) == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

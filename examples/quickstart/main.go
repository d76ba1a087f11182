// Command quickstart runs the fencekit story end to end on an embedded etcd
// in a temporary directory: two workers take turns holding a lease on an
// account; the first pauses past its TTL; the second takes over; when the
// first wakes, its release is refused (not owner) and its late write is
// refused by the account's guard (stale token). It prints what happened,
// exits 0, and leaves nothing behind.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/embedetcd"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/lease"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// account is the protected resource: a balance that only the current
// lease holder may change.
type account struct {
	mu      sync.Mutex
	balance int
	history []string
}

func (a *account) add(who string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.balance += n
	a.history = append(a.history, fmt.Sprintf("%s%+d", who, n))
}

func run() error {
	dir, err := os.MkdirTemp("", "fencekit-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir})
	if err != nil {
		return err
	}
	defer etcd.Close()
	fmt.Println("embedded etcd up at", etcd.Members[0].ClientURL)

	// Worker A reaches etcd through a proxy we can pause, to play a
	// process frozen by a long GC pause or a stopped VM.
	proxy, err := faultproxy.New(strings.TrimPrefix(etcd.Members[0].ClientURL, "http://"))
	if err != nil {
		return err
	}
	defer proxy.Close()
	cliA, err := etcd.Client(proxy.URL())
	if err != nil {
		return err
	}
	defer cliA.Close()
	cliB, err := etcd.Client()
	if err != nil {
		return err
	}
	defer cliB.Close()

	workerA, err := lease.New(cliA, lease.WithTTL(time.Second), lease.WithInstanceID("worker-a"))
	if err != nil {
		return err
	}
	defer workerA.Close()
	workerB, err := lease.New(cliB, lease.WithTTL(time.Second), lease.WithInstanceID("worker-b"))
	if err != nil {
		return err
	}
	defer workerB.Close()

	// The account keeps the highest fencing token it accepted and refuses
	// older ones.
	acct := &account{}
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		return err
	}
	target := guard.Target{Resource: "account-42", Lock: "account-42"}
	write := func(who string, tok fence.Token, n int) error {
		return g.Do(ctx, target, tok, func(context.Context) error {
			acct.add(who, n)
			return nil
		})
	}

	// 1. A takes the lease and writes.
	a, err := workerA.Acquire(ctx, "account-42")
	if err != nil {
		return err
	}
	fmt.Printf("A acquired %s with fencing token %d\n", a.Name(), a.Fence().Revision)
	if err := write("A", a.Fence(), 100); err != nil {
		return err
	}
	fmt.Println("A wrote +100: accepted")

	// 2. A freezes: no more renewals reach etcd.
	proxy.Pause()
	fmt.Println("A pauses (no renewals reach etcd)")
	<-a.Done()
	aLost := time.Now()
	fmt.Println("A's Done closed:", errors.Is(a.Err(), lease.ErrDeadline), "(validity deadline passed)")

	// 3. B acquires once the server expires A's session.
	b, err := workerB.Acquire(ctx, "account-42")
	if err != nil {
		return err
	}
	fmt.Printf("B acquired %s with fencing token %d (A's Done closed %v earlier)\n",
		b.Name(), b.Fence().Revision, time.Since(aLost).Round(10*time.Millisecond))
	if err := write("B", b.Fence(), 50); err != nil {
		return err
	}
	fmt.Println("B wrote +50: accepted")

	// 4. A wakes up and carries on as if nothing happened.
	proxy.Resume()
	err = write("A", a.Fence(), -100)
	var rej *guard.RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("A's late write was not refused as stale: %v", err)
	}
	fmt.Printf("A's late write -100 refused: token %d is older than the account's mark %d\n",
		rej.Token.Revision, rej.Mark.Revision)

	err = retryUnknown(ctx, a.Release)
	if !errors.Is(err, lease.ErrNotOwner) {
		return fmt.Errorf("A's stale release: want not owner, got %v", err)
	}
	fmt.Println("A's release: not owner (B holds the lock; nothing of B's was touched)")

	// 5. B finishes; now nobody holds it.
	if err := b.Release(ctx); err != nil {
		return err
	}
	fmt.Println("B released")
	if err := retryUnknown(ctx, a.Release); !errors.Is(err, lease.ErrNotFound) {
		return fmt.Errorf("A's release after B: want not found, got %v", err)
	}
	fmt.Println("A's release again: not found (nobody holds it)")

	acct.mu.Lock()
	defer acct.mu.Unlock()
	fmt.Printf("account balance %d, writes applied: %s\n", acct.balance, strings.Join(acct.history, " "))
	if acct.balance != 150 {
		return fmt.Errorf("balance %d, want 150", acct.balance)
	}
	return nil
}

// retryUnknown retries op while its outcome is unknown (A's connection is
// recovering from the pause), which the lease API documents as safe.
func retryUnknown(ctx context.Context, op func(context.Context) error) error {
	for {
		err := op(ctx)
		if err == nil || errors.Is(err, lease.ErrNotOwner) || errors.Is(err, lease.ErrNotFound) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/admin"
)

func Example() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()

	locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	first, err := locks.Acquire(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", first.Name())
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}

	second, err := locks.Acquire(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("newer token:", second.Fence().Revision > first.Fence().Revision)

	// The first holder's handle can no longer touch the lock.
	err = first.Release(ctx)
	fmt.Println("stale release is not owner:", errors.Is(err, lease.ErrNotOwner))
	if err := second.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding orders
	// newer token: true
	// stale release is not owner: true
}

func ExampleClient_Do() {
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	err = locks.Do(context.Background(), "nightly-report", func(ctx context.Context, l *lease.Lease) error {
		// ctx is cancelled, with l.Err() as its cause, if the lease is lost.
		fmt.Println("running as holder of", l.Name())
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// running as holder of nightly-report
	// done: <nil>
}

func ExampleClient_TryAcquire() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	a, _ := lease.New(cli)
	defer a.Close()
	b, _ := lease.New(cli)
	defer b.Close()

	l, err := a.TryAcquire(ctx, "singleton")
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, "singleton")
	fmt.Println("held elsewhere:", errors.Is(err, lease.ErrHeld))
	_ = l.Release(ctx)
	// Output:
	// held elsewhere: true
}

func ExampleLease_Reenter() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	locks, _ := lease.New(cli)
	defer locks.Close()

	l, err := locks.Acquire(ctx, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	// Nested code reenters explicitly through the context, never by
	// acquiring again (which would wait for itself).
	inner := func(ctx context.Context) error {
		l, ok := lease.FromContext(ctx, "ledger")
		if !ok {
			return errors.New("not holding ledger")
		}
		if err := l.Reenter(ctx); err != nil {
			return err
		}
		fmt.Println("holds:", l.Holds())
		return l.Release(ctx)
	}
	if err := inner(lease.NewContext(ctx, l)); err != nil {
		log.Fatal(err)
	}
	fmt.Println("holds:", l.Holds())
	fmt.Println("release:", l.Release(ctx))
	// Output:
	// holds: 2
	// holds: 1
	// release: <nil>
}

// writeOrders stands for a write to a fenced resource: the ctx of a lease
// carries its fencing token, which guard.Transport sends as a header.
func writeOrders(ctx context.Context) error {
	tok, ok := fence.FromContext(ctx)
	if !ok {
		return errors.New("no fencing token")
	}
	fmt.Println("writing orders with a token of lock", tok.Lock)
	return nil
}

// The shape of a critical section, by hand and in one call.
func Example_orders() {
	etcdClient, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()

	locks, err := lease.New(etcdClient, lease.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	l, err := locks.Acquire(ctx, "orders") // ctx bounds the wait only
	if err != nil {
		log.Fatal(err)
	}
	work, cancel := l.Context(ctx) // cancelled the moment l is lost
	err = writeOrders(work)        // the write carries the fencing token
	cancel()
	if err := l.Release(ctx); err != nil { // check it: see Results
		log.Fatal(err)
	}

	// The same in one call:
	err = locks.Do(ctx, "orders", func(ctx context.Context, l *lease.Lease) error {
		// ctx is cancelled, with the reason, the moment the lease is lost,
		// and carries the fencing token that guard.Transport sends.
		return writeOrders(ctx)
	})
	fmt.Println("done:", err)
	// Output:
	// writing orders with a token of lock orders
	// writing orders with a token of lock orders
	// done: <nil>
}

// ValidUntil tells work that must finish under the lock whether it still
// has the time: the lock cannot pass to anyone else before it (short of
// an operator deleting the record), and Done closes at it if no renewal
// moves it.
func ExampleLease_ValidUntil() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	l, err := locks.Acquire(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	const step = time.Second // the longest a step of the work takes
	if time.Until(l.ValidUntil()) > step {
		fmt.Println("time for one more step")
	}
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released, valid until:", l.ValidUntil())
	// Output:
	// time for one more step
	// released, valid until: 0001-01-01 00:00:00 +0000 UTC
}

// A readiness probe that fails before the Client's leases could end: a
// Kubernetes readinessProbe on /readyz moves traffic away from a holder
// whose renewals stopped being confirmed, about minHeadroom before Done
// closes.
func ExampleClient_ProbeHandler() {
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli, lease.WithTTL(6*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	l, err := locks.Acquire(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	// Below the headroom right before a regular renewal (6 s less the
	// margin less 2 s), so only unconfirmed renewals make it fail.
	mux := http.NewServeMux()
	mux.Handle("/readyz", locks.ProbeHandler(2*time.Second))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())

	left, _ := locks.Headroom()
	fmt.Println("more than 2 s of validity left:", left > 2*time.Second)
	// Output:
	// 200 ok
	// more than 2 s of validity left: true
}

// A transfer between two accounts takes both locks at once: one etcd
// transaction writes both records, so both carry the same fencing revision,
// and two transfers that share an account can never deadlock, whatever the
// order of their names.
func ExampleClient_AcquireAll() {
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	set, err := locks.AcquireAll(ctx, []string{"account-17", "account-42"})
	if err != nil {
		log.Fatal(err)
	}
	from, to := set.Fence("account-17"), set.Fence("account-42")
	fmt.Println("one revision:", from.Revision == to.Revision)
	fmt.Println("tokens:", from.Lock, to.Lock)

	// Stop the transfer if either lock is lost.
	work, cancel := set.Context(ctx)
	defer cancel()
	_ = work

	if err := set.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// one revision: true
	// tokens: account-17 account-42
}

// A set takes Acquire's options, for every lock of it: here a note for
// operators stored with each record, a cap on how long the set may be
// held, and a lock-delay, so that if the holder vanishes without a
// Release, neither account passes to anyone else for a second.
func ExampleClient_AcquireAll_options() {
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	set, err := locks.AcquireAll(ctx, []string{"account-17", "account-42"},
		lease.WithMetadata("transfer 9001"),
		lease.WithMaxHold(time.Minute),
		lease.WithLockDelay(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range set.Leases() {
		fmt.Println(l.Name(), l.Metadata())
	}
	// A Release hands over at once: the lock-delay applies only to a set
	// that vanished otherwise.
	if err := set.Release(ctx); err != nil {
		log.Fatal(err)
	}
	free, err := locks.TryAcquire(ctx, "account-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("free again:", free.Name())
	if err := free.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// account-17 transfer 9001
	// account-42 transfer 9001
	// free again: account-42
}

// A nightly job notes what it does in its record, for whoever inspects the
// lock, and caps how long it may hold it: a job that wedges gives the lock
// up after an hour even though its process keeps renewing.
func ExampleWithMaxHold() {
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	ops, err := admin.New(cli, lease.DefaultPrefix) // the operator's tools
	if err != nil {
		log.Fatal(err)
	}

	l, err := locks.Acquire(ctx, "reindex",
		lease.WithMetadata("nightly reindex, run 2026-12-04"),
		lease.WithMaxHold(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	state, err := ops.Inspect(ctx, "reindex")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held for:", state.Holder.Value)
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}

	_, err = locks.Acquire(ctx, "reindex", lease.WithMaxHold(0))
	fmt.Println("invalid:", errors.Is(err, lease.ErrInvalidOption))
	// Output:
	// held for: nightly reindex, run 2026-12-04
	// invalid: true
}

// A job writes to a store that cannot check fencing tokens. With a
// lock-delay, a holder that vanishes without releasing (here: an operator
// force releases it) leaves the lock delayed, so that a late write of the
// lost holder lands before the next holder starts; a Release hands over at
// once.
func ExampleWithLockDelay() {
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	ops, err := admin.New(cli, lease.DefaultPrefix) // the operator's tools
	if err != nil {
		log.Fatal(err)
	}

	l, err := locks.Acquire(ctx, "exporter", lease.WithLockDelay(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	released := time.Now() // no later than the record's delete
	if _, err := ops.ForceRelease(ctx, "exporter", l.Fence().Revision); err != nil {
		log.Fatal(err)
	}
	<-l.Done()
	state, err := ops.Inspect(ctx, "exporter")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holder:", state.Holder, "delayed:", !state.DelayedUntil.IsZero())
	_, err = locks.TryAcquire(ctx, "exporter")
	fmt.Println("held during the delay:", errors.Is(err, lease.ErrHeld))

	next, err := locks.Acquire(ctx, "exporter") // waits out the delay
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("admitted 2s or more after the release:", time.Since(released) >= 2*time.Second)
	if err := next.Release(ctx); err != nil {
		log.Fatal(err)
	}

	_, err = locks.Acquire(ctx, "exporter", lease.WithLockDelay(2*time.Hour))
	fmt.Println("invalid:", errors.Is(err, lease.ErrInvalidOption))
	// Output:
	// holder: <nil> delayed: true
	// held during the delay: true
	// admitted 2s or more after the release: true
	// invalid: true
}

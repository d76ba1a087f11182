package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/admin"
)

func ExampleAdmin_Inspect() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()

	locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	l, err := locks.Acquire(ctx, "reports")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	// The operator's tools, over the records of the Client's prefix.
	ops, err := admin.New(cli, locks.Prefix())
	if err != nil {
		log.Fatal(err)
	}
	st, err := ops.Inspect(ctx, "reports")
	if err != nil {
		log.Fatal(err)
	}
	h := st.Holder
	fmt.Println("held by this lease:", h.Fence == l.Fence() && h.OwnerDigest == l.OwnerDigest())
	fmt.Println("holds:", h.Holds, "waiters:", len(st.Waiters))
	// Output:
	// held by this lease: true
	// holds: 1 waiters: 0
}

func ExampleAdmin_ForceRelease() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()

	locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	l, err := locks.Acquire(ctx, "reports")
	if err != nil {
		log.Fatal(err)
	}

	// An operator's tool needs no Client: an Admin of the same prefix.
	ops, err := admin.New(cli, lease.DefaultPrefix)
	if err != nil {
		log.Fatal(err)
	}
	// A revision that is not the holder's is refused, and nothing changes.
	_, err = ops.ForceRelease(ctx, "reports", l.Fence().Revision+1)
	fmt.Println("wrong revision refused:", errors.Is(err, lease.ErrNotOwner))

	r, err := ops.ForceRelease(ctx, "reports", l.Fence().Revision)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted the holder's record:", r.Fence == l.Fence())
	<-l.Done()
	fmt.Println("holder lost it:", errors.Is(l.Err(), lease.ErrKeyDeleted))
	// Output:
	// wrong revision refused: true
	// deleted the holder's record: true
	// holder lost it: true
}

func ExampleAdmin_InspectAll() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()

	locks, err := lease.New(cli, lease.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	for _, name := range []string{"billing", "archive"} {
		l, err := locks.Acquire(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		defer l.Release(ctx)
	}

	ops, err := admin.New(cli, lease.DefaultPrefix)
	if err != nil {
		log.Fatal(err)
	}
	all, err := ops.InspectAll(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, st := range all {
		fmt.Println(st.Name, "held:", st.Holder != nil, "waiters:", len(st.Waiters))
	}
	// Output:
	// archive held: true waiters: 0
	// billing held: true waiters: 0
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

func ExampleVerifier() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	// A resource server needs no Client: a Verifier of the same prefix.
	v, err := lease.NewVerifier(cli, lease.DefaultPrefix)
	if err != nil {
		log.Fatal(err)
	}
	l, err := locks.Acquire(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holder's token:", v.Verify(ctx, l.Fence()))
	forged := fence.Token{Lock: "orders", Revision: l.Fence().Revision + 100}
	fmt.Println("made-up token refused:", errors.Is(v.Verify(ctx, forged), fence.ErrUnverified))
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released token refused:", errors.Is(v.Verify(ctx, l.Fence()), fence.ErrUnverified))
	// Output:
	// holder's token: <nil>
	// made-up token refused: true
	// released token refused: true
}

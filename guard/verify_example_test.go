package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/lease"
)

func ExampleWithVerifier() {
	// An embedded etcd stands in for the lock service's cluster.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	// The resource server verifies new tokens against the lock records.
	verifier, err := lease.NewVerifier(cli, lease.DefaultPrefix)
	if err != nil {
		log.Fatal(err)
	}
	g, err := guard.New(guard.NewMemoryStore(), guard.WithVerifier(verifier))
	if err != nil {
		log.Fatal(err)
	}
	tgt := guard.Target{Resource: "orders/1", Lock: "orders"}
	write := func(who string, t fence.Token) {
		err := g.Do(ctx, tgt, t, func(context.Context) error { return nil })
		switch {
		case err == nil:
			fmt.Println(who, "wrote")
		case errors.Is(err, fence.ErrUnverified):
			fmt.Println(who, "refused: not the holder's token")
		case errors.As(err, new(*fence.RefusedError)):
			fmt.Println(who, "refused: stale")
		default:
			log.Fatal(err)
		}
	}

	holder, err := locks.Acquire(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	write("forger", fence.Token{Lock: "orders", Revision: 1 << 40})
	write("holder", holder.Fence())
	write("holder", holder.Fence()) // equal to the mark: no etcd read
	mark, _ := g.Mark(ctx, tgt.Resource)
	fmt.Println("mark is the holder's:", mark == holder.Fence())
	// Output:
	// forger refused: not the holder's token
	// holder wrote
	// holder wrote
	// mark is the holder's: true
}

package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/guard/etcdstore"
)

func ExampleNew() {
	// An embedded etcd stands in for the cluster the replicas share.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, stop := exampleEtcd()
	defer stop()

	// Two replicas of one service, each with its own Guard, share marks.
	replica := func() *guard.Guard {
		store, err := etcdstore.New(cli, "/service/marks/")
		if err != nil {
			log.Fatal(err)
		}
		g, err := guard.New(store)
		if err != nil {
			log.Fatal(err)
		}
		return g
	}
	a, b := replica(), replica()
	tgt := guard.Target{Resource: "report", Lock: "reports"}
	write := func(g *guard.Guard, rev int64) {
		err := g.Do(ctx, tgt, fence.Token{Lock: "reports", Revision: rev}, func(context.Context) error { return nil })
		switch {
		case err == nil:
			fmt.Println(rev, "written")
		case errors.Is(err, fence.ErrStale):
			fmt.Println(rev, "refused: stale")
		default:
			log.Fatal(err)
		}
	}
	write(a, 10)
	write(b, 12)
	write(a, 10)
	// Output:
	// 10 written
	// 12 written
	// 10 refused: stale
}

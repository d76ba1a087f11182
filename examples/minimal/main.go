// Command minimal is the README's first program: a lease from the etcd at
// $ETCDCTL_ENDPOINTS (default 127.0.0.1:2379), and a guard refusing its token.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoints := strings.Split(cmp.Or(os.Getenv("ETCDCTL_ENDPOINTS"), "127.0.0.1:2379"), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	check(err)
	defer cli.Close()
	locks, err := lease.New(cli) // 10 s TTL
	check(err)
	defer locks.Close()

	// The resource keeps the highest token it accepted (an HTTP service
	// would use g.Middleware; a database, sqlguard).
	g, err := guard.New(guard.NewMemoryStore())
	check(err)
	report := guard.Target{Resource: "report/q3", Lock: "reports"}
	write := func(ctx context.Context) error { return nil } // the protected write

	a, err := locks.Acquire(ctx, "reports") // A holds the lock
	check(err)
	fmt.Println("A writes:", g.Do(ctx, report, a.Fence(), write))
	check(a.Release(ctx)) // as if A paused past its TTL

	b, err := locks.Acquire(ctx, "reports") // B holds it next: a newer token
	check(err)
	defer b.Release(ctx)
	fmt.Println("B writes:", g.Do(ctx, report, b.Fence(), write))
	err = g.Do(ctx, report, a.Fence(), write) // A again, late
	fmt.Println("A, late, refused as stale:", errors.Is(err, fence.ErrStale))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

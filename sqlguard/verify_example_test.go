package sqlguard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
)

// A verified Guard: a made-up token far above any real one cannot poison
// the mark, and the holder's transactions cost one etcd read in all.
func ExampleWithVerifier() {
	db, done := openExampleDB()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	g, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithVerifier(locks.Verifier()))
	if err != nil {
		panic(err)
	}
	if err := g.Migrate(ctx, db); err != nil {
		panic(err)
	}
	holder, err := locks.Acquire(ctx, "accounts")
	if err != nil {
		panic(err)
	}
	forged := fence.Token{Lock: "accounts", Revision: 1 << 40}
	err = g.Claim(ctx, db, forged, "account/alice")
	fmt.Println("forged token refused:", errors.Is(err, fence.ErrUnverified))
	for range 3 {
		if err := g.RunTx(ctx, db, nil, holder.Fence(), []string{"account/alice"}, nil); err != nil {
			panic(err)
		}
	}
	m, err := g.Mark(ctx, db, "account/alice")
	if err != nil {
		panic(err)
	}
	fmt.Println("mark is the holder's:", m.Token == holder.Fence())
	// Output:
	// forged token refused: true
	// mark is the holder's: true
}

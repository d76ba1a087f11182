package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
)

// A transfer between two accounts, each protected by a lock of its own:
// the transfer takes both locks at once (lease.Client.AcquireAll) and
// fences both rows in one transaction, each with the token of its own lock.
// When a newer holder of either lock has written, the old set's transfer is
// refused as a whole and neither balance moves.
func ExampleGuard_RunTxAll() {
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

	g, err := sqlguard.Open(ctx, db)
	if err != nil {
		panic(err)
	}
	if err := g.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`INSERT INTO accounts VALUES ('alice', 100), ('bob', 100)`); err != nil {
		panic(err)
	}
	for _, id := range []string{"alice", "bob"} { // each row's lock, declared once
		if err := g.Bind(ctx, db, "account/"+id, "account-"+id); err != nil {
			panic(err)
		}
	}

	// transfer moves amount from alice to bob under the tokens of set.
	transfer := func(set *lease.Set, amount int) error {
		fences := map[string]fence.Token{
			"account/alice": set.Fence("account-alice"),
			"account/bob":   set.Fence("account-bob"),
		}
		return g.RunTxAll(ctx, db, nil, fences, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance - ? WHERE id = 'alice'`, amount); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ? WHERE id = 'bob'`, amount)
			return err
		})
	}

	set, err := locks.AcquireAll(ctx, []string{"account-alice", "account-bob"})
	if err != nil {
		panic(err)
	}
	fmt.Println("transfer 30:", transfer(set, 30))
	if err := set.Release(ctx); err != nil {
		panic(err)
	}

	// A newer holder of bob's lock alone writes bob's row.
	bob, err := locks.Acquire(ctx, "account-bob")
	if err != nil {
		panic(err)
	}
	if err := g.RunTx(ctx, db, nil, bob.Fence(), []string{"account/bob"}, nil); err != nil {
		panic(err)
	}
	if err := bob.Release(ctx); err != nil {
		panic(err)
	}

	// The old set, late (say it paused past its TTL), tries again.
	err = transfer(set, 50)
	var r *fence.RefusedError
	if errors.As(err, &r) {
		fmt.Printf("late transfer: %s at %s\n", r.Outcome, r.Resource)
	}

	balances, err := db.Query(`SELECT id, balance FROM accounts ORDER BY id`)
	if err != nil {
		panic(err)
	}
	defer balances.Close()
	for balances.Next() {
		var id string
		var balance int
		if err := balances.Scan(&id, &balance); err != nil {
			panic(err)
		}
		fmt.Println(id, balance)
	}
	// Output:
	// transfer 30: <nil>
	// late transfer: stale at account/bob
	// alice 70
	// bob 130
}

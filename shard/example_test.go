package shard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/shard"
	"github.com/fencekit/fencekit/sqlguard"
	_ "modernc.org/sqlite"
)

// A member joins a group of 4 shards and, alone, owns them all. Each
// Gained event's Context carries the shard's fencing token and is
// cancelled when the shard is lost; run the shard's work under it.
func Example() {
	cli, stop := exampleEtcd()
	defer stop()
	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	group, err := shard.NewGroup(locks, cli, "jobs", shard.Count(4))
	if err != nil {
		log.Fatal(err)
	}
	m, err := group.Join(ctx, "worker-1", 1)
	if err != nil {
		log.Fatal(err)
	}
	var owned []string
	for ev := range m.Events() {
		if ev.Kind == shard.Gained {
			tok, _ := fence.FromContext(ev.Context) // what guard.Transport sends
			owned = append(owned, fmt.Sprintf("%s@%s", ev.Shard, tok.Lock))
			// go work(ev.Context, ev.Shard): stop when ev.Context ends.
		}
		if len(owned) == 4 {
			break
		}
	}
	slices.Sort(owned)
	fmt.Println(owned)

	done := make(chan struct{})
	go func() { // keep receiving until the stream closes
		for range m.Events() {
		}
		close(done)
	}()
	if err := m.Leave(ctx); err != nil { // alone: gives the shards up
		log.Fatal(err)
	}
	<-done
	// Output:
	// [0@jobs:0 1@jobs:1 2@jobs:2 3@jobs:3]
}

// Each tenant is a shard, and sqlguard fences its rows with the shard's
// token: when worker-b joins and one tenant moves to it, worker-a's
// context for that tenant ends first, and a late write under worker-a's
// old token is refused by the database once worker-b has written.
func Example_sqlguard() {
	cli, stop := exampleEtcd()
	defer stop()
	dir, err := os.MkdirTemp("", "shard-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	sg, err := sqlguard.Open(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	if err := sg.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE usage (tenant TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	// bump counts one unit of a tenant's usage, fenced by tok: the check
	// and the write are one transaction.
	bump := func(tok fence.Token, tenant string) error {
		return sg.RunTx(ctx, db, nil, tok, []string{"tenant/" + tenant}, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO usage VALUES (?, 1)
				ON CONFLICT (tenant) DO UPDATE SET n = n + 1`, tenant)
			return err
		})
	}

	locks, err := lease.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	group, err := shard.NewGroup(locks, cli, "billing", shard.Named("acme", "globex", "initech"))
	if err != nil {
		log.Fatal(err)
	}
	a, err := group.Join(ctx, "worker-a", 1)
	if err != nil {
		log.Fatal(err)
	}
	tokens := map[string]fence.Token{}
	for len(tokens) < 3 {
		ev := <-a.Events()
		tokens[ev.Shard] = ev.Fence
		if err := bump(ev.Fence, ev.Shard); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("worker-a owns", len(tokens), "tenants")

	b, err := group.Join(ctx, "worker-b", 1)
	if err != nil {
		log.Fatal(err)
	}
	gained := <-b.Events()
	lost := <-a.Events()
	fmt.Println("moved to worker-b:", gained.Shard == lost.Shard)
	fmt.Println("worker-a's context ended:", errors.Is(context.Cause(lost.Context), shard.ErrMoved))
	fmt.Println("worker-b writes:", bump(gained.Fence, gained.Shard))
	err = bump(tokens[lost.Shard], lost.Shard)
	fmt.Println("worker-a's late write refused:", errors.Is(err, fence.ErrStale))

	for _, m := range []*shard.Member{a, b} {
		go func() {
			for range m.Events() {
			}
		}()
		if err := m.Close(); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// worker-a owns 3 tenants
	// moved to worker-b: true
	// worker-a's context ended: true
	// worker-b writes: <nil>
	// worker-a's late write refused: true
}

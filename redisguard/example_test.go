package redisguard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/redisguard"
	"github.com/redis/go-redis/v9"
)

// The Examples that need a Redis server have no Output comment, because
// `go test` would run them without one: TestExamples runs them when Redis
// answers (FENCEKIT_REDIS_ADDR, for example 127.0.0.1:6379) and checks what
// they print; without Redis it skips, or fails when FENCEKIT_REQUIRE_DB=1.

// A superseded holder's late write is refused by Redis itself: the token
// check, the INCRBY and the mark's advance are one Lua script.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	g, err := redisguard.New(rdb) // add redisguard.WithVerifier(locks.Verifier()) in production
	if err != nil {
		panic(err)
	}
	tgt := guard.Target{Resource: "example-orders", Lock: "orders"}
	total := redisguard.Key(tgt.Resource, "total") // "{example-orders}:total": the mark's hash slot
	a := fence.Token{Lock: "orders", Revision: 41} // A's lease: a.Fence()
	b := fence.Token{Lock: "orders", Revision: 42} // B's, after A's lease ended

	// A new holder claims the resource before it reads or writes.
	if err := g.Claim(ctx, a, tgt.Resource); err != nil {
		panic(err)
	}
	n, err := g.IncrBy(ctx, tgt, a, total, 10)
	fmt.Println("A adds 10:", n, err)

	// A pauses past its TTL; B acquires the lock, claims and writes.
	if err := g.Claim(ctx, b, tgt.Resource); err != nil {
		panic(err)
	}
	n, err = g.IncrBy(ctx, tgt, b, total, 5)
	fmt.Println("B adds 5:", n, err)

	// A wakes up and writes late: refused, nothing changed.
	_, err = g.IncrBy(ctx, tgt, a, total, 10)
	var stale *fence.RefusedError
	if errors.As(err, &stale) {
		fmt.Println("A refused: its token", stale.Token.Revision, "is older than the mark", stale.Mark.Revision)
	}
	fmt.Println("total:", rdb.Get(ctx, total).Val())
}

// A batch of commands is one fenced write: all of them run, or none.
func ExampleGuard_Exec() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	g, err := redisguard.New(rdb)
	if err != nil {
		panic(err)
	}
	tgt := guard.Target{Resource: "example-job-7", Lock: "scheduler"}
	t := fence.Token{Lock: "scheduler", Revision: 7}
	if err := g.Claim(ctx, t, tgt.Resource); err != nil {
		panic(err)
	}
	key := func(name string) string { return redisguard.Key(tgt.Resource, name) }
	replies, err := g.Exec(ctx, tgt, t,
		redisguard.HSet(key("state"), "status", "done", "worker", "w1"),
		redisguard.Command("RPUSH", key("log"), "finished"),
		redisguard.Set(key("lease"), "w1", redisguard.PX(30*time.Second), redisguard.XX()))
	fmt.Println(replies, err)

	// A key outside the resource's hash slot is refused before sending.
	_, err = g.Exec(ctx, tgt, t, redisguard.Del("job-7-cache"))
	fmt.Println(errors.Is(err, redisguard.ErrCrossSlot))

	// A command Redis refuses undoes the whole batch.
	_, err = g.Exec(ctx, tgt, t,
		redisguard.Command("RPUSH", key("log"), "again"),
		redisguard.IncrBy(key("state"), 1)) // a hash: WRONGTYPE
	var ce *redisguard.CommandError
	if errors.As(err, &ce) {
		fmt.Println("command", ce.Index, ce.Name, "failed; log length:", rdb.LLen(ctx, key("log")).Val())
	}
}

// Replicas of an HTTP or gRPC service share marks through a Store.
func ExampleStore() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	store, err := redisguard.NewStore(rdb, "example-marks:")
	if err != nil {
		panic(err)
	}
	// With guard.WithVerifier(locks.Verifier()) the Guard claims a
	// resource by itself, once the verifier confirms the token.
	g, err := guard.New(store)
	if err != nil {
		panic(err)
	}
	tgt := guard.Target{Resource: "example-items", Lock: "items"}
	t5 := fence.Token{Lock: "items", Revision: 5}
	t7 := fence.Token{Lock: "items", Revision: 7}
	if err := store.Claim(ctx, t5, tgt.Resource); err != nil {
		panic(err)
	}
	write := func(ctx context.Context) error { return nil }
	fmt.Println(g.Do(ctx, tgt, t7, write))
	err = g.Do(ctx, tgt, t5, write)
	fmt.Println(errors.As(err, new(*fence.RefusedError)), errors.Is(err, fence.ErrStale))
	mark, err := store.Mark(ctx, tgt.Resource)
	fmt.Println(mark, err)
}

func ExampleSlot() {
	fmt.Println(redisguard.Slot("123456789"))
	fmt.Println(redisguard.Slot("{orders}:total") == redisguard.Slot("fencekit:mark:{orders}"))
	// Output:
	// 12739
	// true
}

func ExampleKey() {
	fmt.Println(redisguard.Key("orders", "total"))
	// Output:
	// {orders}:total
}

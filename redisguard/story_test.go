package redisguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/storytest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/redisguard"
)

// TestStory is the quick start's story against Redis, on a real etcd: A
// holds the lock and writes; A's link to etcd is cut past its TTL and
// its lease ends; B acquires and writes; A wakes and its late write is
// refused; B's value is intact. The Guard verifies tokens with a
// lease.Verifier, so A's first write claims the resource.
func TestStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, id := testRedis(t)
	c := etcdtest.Start(t)
	verifier, err := lease.NewVerifier(etcdtest.Client(t, c), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	g, err := redisguard.New(cli, redisguard.WithPrefix(id+":mark:"), redisguard.WithVerifier(verifier))
	if err != nil {
		t.Fatal(err)
	}
	res := id + "-report"
	tgt := guard.Target{Resource: res, Lock: "report"}
	key := redisguard.Key(res, "body")

	st := storytest.Start(ctx, t, c, "report")
	a := st.A
	if _, err := g.Set(ctx, tgt, a.Fence(), key, "draft by A"); err != nil {
		t.Fatalf("A's write while holding: %v", err)
	}

	st.Depose(ctx)
	b := st.B
	if _, err := g.Set(ctx, tgt, b.Fence(), key, "final by B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	st.Wake()
	_, err = g.Set(ctx, tgt, a.Fence(), key, "late by A")
	var stale *fence.RefusedError
	if !errors.As(err, &stale) || stale.Mark != b.Fence() {
		t.Errorf("A's late write = %v, want a *fence.RefusedError with B's token as the mark", err)
	}
	if _, err := g.IncrBy(ctx, tgt, a.Fence(), redisguard.Key(res, "n"), 1); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's late IncrBy = %v, want ErrStale", err)
	}
	// A claim is verified first: A is no longer the holder.
	if err := g.Claim(ctx, a.Fence(), res); !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("A's late Claim = %v, want fence.ErrUnverified", err)
	}
	if got := cli.Get(ctx, key).Val(); got != "final by B" {
		t.Errorf("value %q, want B's", got)
	}
	if n := cli.Exists(ctx, redisguard.Key(res, "n")).Val(); n != 0 {
		t.Error("A's late IncrBy created its key")
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
}

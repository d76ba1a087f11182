package redisguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/redisguard"
)

// TestRestartForgetsMarks restarts a redis-server of the test's own,
// without persistence, after B superseded A: the restarted server has no
// marks, and A's superseded token must still not write. With a verifier
// A is refused as unverified and B's next write re-claims the resource;
// without one, every write is refused until a Claim.
func TestRestartForgetsMarks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startServer(t)
	cli := connect(t, srv.addr())
	c := etcdtest.Start(t)
	etcd := etcdtest.Client(t, c)
	locks, err := lease.New(etcd)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	verified, err := redisguard.New(cli, redisguard.WithVerifier(locks.Verifier()))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := redisguard.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	const res = "jobs"
	tgt := guard.Target{Resource: res, Lock: "jobs"}
	key := redisguard.Key(res, "state")

	a, err := locks.Acquire(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verified.Set(ctx, tgt, a.Fence(), key, "by A"); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := locks.Acquire(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if _, err := verified.Set(ctx, tgt, b.Fence(), key, "by B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if _, err := plain.Set(ctx, tgt, a.Fence(), key, "late by A"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's late write before the restart = %v, want ErrStale", err)
	}

	srv.restart()
	if n := cli.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("the restarted server kept %d keys", n)
	}

	// Without a verifier: nothing is written until a Claim.
	_, err = plain.Set(ctx, tgt, a.Fence(), key, "late by A")
	if !errors.Is(err, redisguard.ErrUnclaimed) {
		t.Errorf("A's write after the restart, no verifier = %v, want ErrUnclaimed", err)
	}
	// With a verifier: A is not the current holder.
	_, err = verified.Set(ctx, tgt, a.Fence(), key, "late by A")
	if !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("A's write after the restart, verified = %v, want ErrUnverified", err)
	}
	if err := verified.Claim(ctx, a.Fence(), res); !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("A's claim after the restart = %v, want ErrUnverified", err)
	}
	if n := cli.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("%d keys after A's refused writes", n)
	}

	// B, the current holder, writes: the Guard verifies B and claims.
	if _, err := verified.Set(ctx, tgt, b.Fence(), key, "by B again"); err != nil {
		t.Fatalf("B's write after the restart: %v", err)
	}
	if m, err := verified.Mark(ctx, res); err != nil || m != b.Fence() {
		t.Errorf("mark after B's write: %v, %v", m, err)
	}
	for _, g := range []*redisguard.Guard{plain, verified} {
		if _, err := g.Set(ctx, tgt, a.Fence(), key, "late by A"); !errors.Is(err, fence.ErrStale) {
			t.Errorf("A's write after B re-claimed = %v, want ErrStale", err)
		}
	}
	if got := cli.Get(ctx, key).Val(); got != "by B again" {
		t.Errorf("value %q, want B's", got)
	}

	// A guard.Guard over a Store with the verifier does the same.
	srv.restart()
	store, err := redisguard.NewStore(cli, redisguard.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	hg, err := guard.New(store, guard.WithVerifier(locks.Verifier()))
	if err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context) error { return nil }
	if err := hg.Do(ctx, tgt, a.Fence(), nop); !errors.Is(err, fence.ErrUnverified) {
		t.Errorf("guard.Do with A's token after a restart = %v, want ErrUnverified", err)
	}
	if err := hg.Do(ctx, tgt, b.Fence(), nop); err != nil {
		t.Errorf("guard.Do with B's token after a restart: %v", err)
	}
	if err := hg.Do(ctx, tgt, a.Fence(), nop); !errors.Is(err, fence.ErrStale) {
		t.Errorf("guard.Do with A's token after B's = %v, want ErrStale", err)
	}
}

// TestMarkOfEarlierLife: a mark restored from an earlier life of the
// server (an RDB or AOF that lost later advances, a promoted replica)
// carries another run_id. It still refuses older tokens, and refuses
// even the mark's own token until the resource is claimed again.
func TestMarkOfEarlierLife(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 5)
	if _, err := f.g.Set(ctx, f.tgt, tok(5), f.key("v"), "by 5"); err != nil {
		t.Fatal(err)
	}
	// What a restore from an older snapshot looks like: the same fields,
	// written by a server with another run_id.
	if err := f.cli.HSet(ctx, f.g.MarkKey(f.res), "life", "0000000000000000000000000000000000000000").Err(); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)
	if _, err := f.g.Set(ctx, f.tgt, tok(5), f.key("v"), "again"); !errors.Is(err, redisguard.ErrUnclaimed) {
		t.Errorf("write with the mark's own token = %v, want ErrUnclaimed", err)
	}
	if _, err := f.g.Set(ctx, f.tgt, tok(6), f.key("v"), "newer"); !errors.Is(err, redisguard.ErrUnclaimed) {
		t.Errorf("write with a newer token = %v, want ErrUnclaimed", err)
	}
	if err := f.g.Claim(ctx, tok(4), f.res); !errors.Is(err, fence.ErrStale) {
		t.Errorf("claim with an older token = %v, want ErrStale", err)
	}
	sameState(t, f.snapshot(t), before)
	if err := f.g.Claim(ctx, tok(6), f.res); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.Set(ctx, f.tgt, tok(6), f.key("v"), "by 6"); err != nil {
		t.Errorf("write after the claim: %v", err)
	}
}

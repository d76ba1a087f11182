package redisguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/redisguard"
	"github.com/redis/go-redis/v9"
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

// TestRestoredSnapshotUnclaims restarts a redis-server of the test's own
// from a snapshot saved before B superseded A: the restored mark is A's,
// stamped with the server's earlier run_id, and the function library
// comes back with the snapshot. The restored library must not carry the
// earlier process's run_id: A's write is refused as unclaimed, not
// accepted against A's own restored mark, until B claims again.
func TestRestoredSnapshotUnclaims(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startServer(t)
	cli := connect(t, srv.addr())
	g, err := redisguard.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	const res = "jobs"
	tgt := guard.Target{Resource: res, Lock: "jobs"}
	key := redisguard.Key(res, "state")
	a, b := fence.Token{Lock: "jobs", Revision: 10}, fence.Token{Lock: "jobs", Revision: 20}

	if err := g.Claim(ctx, a, res); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Set(ctx, tgt, a, key, "by A"); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	if err := cli.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.Claim(ctx, b, res); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Set(ctx, tgt, b, key, "by B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	lifeBefore := serverLife(ctx, t, cli)

	srv.restart() // loads the snapshot: A's mark and value, and the library
	if m, err := g.Mark(ctx, res); err != nil || m != a {
		t.Fatalf("restored mark = %v, %v; want A's %v", m, err, a)
	}
	libs, err := cli.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisguard.LibraryName}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("library %s after the restart: %v, %v; want it restored", redisguard.LibraryName, libs, err)
	}
	if lifeBefore == serverLife(ctx, t, cli) {
		t.Fatal("the restarted server kept its run_id")
	}
	before, err := cli.Get(ctx, key).Result()
	if err != nil || before != "by A" {
		t.Fatalf("restored value %q, %v; want A's", before, err)
	}

	if _, err := g.Set(ctx, tgt, a, key, "late by A"); !errors.Is(err, redisguard.ErrUnclaimed) {
		t.Errorf("A's write against its own restored mark = %v, want ErrUnclaimed", err)
	}
	if got := cli.Get(ctx, key).Val(); got != "by A" {
		t.Errorf("value %q after A's refused write, want the restored one", got)
	}
	if err := g.Claim(ctx, b, res); err != nil {
		t.Fatalf("B's claim after the restore: %v", err)
	}
	if _, err := g.Set(ctx, tgt, a, key, "late by A"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("A's write after B's claim = %v, want ErrStale", err)
	}
	if _, err := g.Set(ctx, tgt, b, key, "by B again"); err != nil {
		t.Errorf("B's write after its claim: %v", err)
	}
}

// TestFunctionFlushReloads: a server whose functions were flushed gets
// the library loaded again by the next write, and its marks stay claimed
// (the same process: the same run_id).
func TestFunctionFlushReloads(t *testing.T) {
	ctx := context.Background()
	srv := startServer(t)
	cli := connect(t, srv.addr())
	g, err := redisguard.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	tgt := guard.Target{Resource: "jobs", Lock: "jobs"}
	key := redisguard.Key("jobs", "state")
	a := fence.Token{Lock: "jobs", Revision: 10}
	if err := g.Claim(ctx, a, "jobs"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := cli.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Set(ctx, tgt, a, key, "by A"); err != nil {
			t.Fatalf("write %d after FUNCTION FLUSH: %v", i, err)
		}
		if _, err := g.Set(ctx, tgt, fence.Token{Lock: "jobs", Revision: 9}, key, "older"); !errors.Is(err, fence.ErrStale) {
			t.Errorf("older token after FUNCTION FLUSH = %v, want ErrStale", err)
		}
	}
	if got := cli.Get(ctx, key).Val(); got != "by A" {
		t.Errorf("value %q, want A's", got)
	}
}

// serverLife returns the server's run_id.
func serverLife(ctx context.Context, t *testing.T, cli *redis.Client) string {
	t.Helper()
	info, err := cli.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(info, "run_id:")
	if !ok || len(after) < 40 {
		t.Fatalf("no run_id in INFO server: %q", info)
	}
	return after[:40]
}

// TestServerWithoutFunctions: a server without FCALL (Redis 6, or the
// command renamed away, as here) fails every fenced write with the
// server's error, wrapped, and nothing is written.
func TestServerWithoutFunctions(t *testing.T) {
	ctx := context.Background()
	srv := startServer(t, "--rename-command", "FCALL", "")
	cli := connect(t, srv.addr())
	g, err := redisguard.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	tgt := guard.Target{Resource: "jobs", Lock: "jobs"}
	a := fence.Token{Lock: "jobs", Revision: 10}
	var serverErr redis.Error
	if err := g.Claim(ctx, a, "jobs"); !errors.As(err, &serverErr) {
		t.Errorf("claim on a server without FCALL = %v, want the server's error", err)
	} else {
		t.Log(err)
	}
	if _, err := g.Set(ctx, tgt, a, redisguard.Key("jobs", "state"), "by A"); !errors.As(err, &serverErr) {
		t.Errorf("write on a server without FCALL = %v, want the server's error", err)
	}
	if n := cli.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys written", n)
	}
}

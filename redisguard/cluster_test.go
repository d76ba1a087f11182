package redisguard_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/redisguard"
	"github.com/redis/go-redis/v9"
)

// TestOneNodeCluster runs fenced writes through a redis.ClusterClient on
// a cluster-enabled redis-server of the test's own that serves every slot
// itself (a cluster of one node): Redis Cluster's own checks apply to
// the script's keys, and a key of another slot, which the server would
// refuse with CROSSSLOT, is refused before sending.
func TestOneNodeCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", t.TempDir()+"/nodes.conf")
	node := connect(t, s.addr())
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := node.ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the one-node cluster did not reach state ok:\n%s", info)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr()}})
	defer cc.Close()

	g, err := redisguard.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	tgt := guard.Target{Resource: "orders", Lock: "orders"}
	if err := g.Claim(ctx, tok(5), "orders"); err != nil {
		t.Fatal(err)
	}
	r, err := g.Exec(ctx, tgt, tok(5),
		redisguard.Set(redisguard.Key("orders", "a"), "1"),
		redisguard.IncrBy(redisguard.Key("orders", "n"), 2))
	if err != nil || len(r) != 2 || r[1] != int64(2) {
		t.Fatalf("Exec on the cluster = %v, %v", r, err)
	}
	if _, err := g.Set(ctx, tgt, tok(4), redisguard.Key("orders", "a"), "old"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("stale Set on the cluster = %v, want ErrStale", err)
	}

	// The server's own refusal of a script whose keys span slots, which
	// the Guard never sends.
	other := "elsewhere"
	if redisguard.Slot(other) == redisguard.Slot("{orders}") {
		t.Fatal("pick another key")
	}
	err = node.Eval(ctx, "return 1", []string{g.MarkKey("orders"), other}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("the server accepted keys of two slots in one script: %v", err)
	}
	if _, err := g.Exec(ctx, tgt, tok(5), redisguard.Set(other, "x")); !errors.Is(err, redisguard.ErrCrossSlot) {
		t.Errorf("Exec with a key of another slot = %v, want ErrCrossSlot", err)
	}
	if n := node.Exists(ctx, other).Val(); n != 0 {
		t.Error("the key of another slot was written")
	}
}

// TestRingLoadsLibrary runs fenced writes through a redis.Ring of two
// redis-servers of the test's own, which start without the function
// library: the first write to each shard loads it there, and the fencing
// holds on both.
func TestRingLoadsLibrary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s1, s2 := startServer(t), startServer(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s1": s1.addr(), "s2": s2.addr()}})
	defer ring.Close()
	g, err := redisguard.New(ring)
	if err != nil {
		t.Fatal(err)
	}
	a, b := fence.Token{Lock: "jobs", Revision: 10}, fence.Token{Lock: "jobs", Revision: 20}
	shards := map[string]bool{}
	for i := 0; len(shards) < 2; i++ {
		if i == 64 {
			t.Fatalf("64 resources all landed on shards %v", shards)
		}
		res := "jobs-" + strconv.Itoa(i)
		tgt := guard.Target{Resource: res, Lock: "jobs"}
		key := redisguard.Key(res, "state")
		if err := g.Claim(ctx, b, res); err != nil {
			t.Fatalf("claim %s: %v", res, err)
		}
		if _, err := g.Set(ctx, tgt, b, key, "by B"); err != nil {
			t.Fatalf("B's write to %s: %v", res, err)
		}
		if _, err := g.Set(ctx, tgt, a, key, "late by A"); !errors.Is(err, fence.ErrStale) {
			t.Errorf("A's write to %s = %v, want ErrStale", res, err)
		}
		for name, s := range map[string]*server{"s1": s1, "s2": s2} {
			if v, _ := connect(t, s.addr()).Get(ctx, key).Result(); v == "by B" {
				shards[name] = true
			}
		}
	}
	for _, s := range []*server{s1, s2} {
		libs, err := connect(t, s.addr()).FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisguard.LibraryName}).Result()
		if err != nil || len(libs) != 1 {
			t.Errorf("library on %s: %v, %v; want it loaded", s, libs, err)
		}
	}
}

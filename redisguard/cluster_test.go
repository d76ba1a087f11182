package redisguard_test

import (
	"context"
	"errors"
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

package redisguard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fencekit/fencekit/redisguard"
)

// TestSlotVectors: slots as Redis Cluster computes them (CLUSTER KEYSLOT
// of Redis 7.0), including the hash-tag rules of the cluster
// specification.
func TestSlotVectors(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            12739, // the CRC16/XMODEM check value 0x31C3, mod 16384
		"foo":                  12182,
		"bar":                  5061,
		"hello":                866,
		"somekey":              11058,
		"{user1000}.following": 3443,
		"foo{}{bar}":           8363, // "{}" is no tag: the whole key
		"foo{{bar}}zap":        4015, // tag "{bar"
		"foo{bar}{zap}":        5061, // tag "bar", the first one
		"{}":                   15257,
		"a{b":                  13340, // no "}": the whole key
		"":                     0,
	} {
		if got := redisguard.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if a, b := redisguard.Slot(redisguard.Key("orders", "total")), redisguard.Slot("{orders}"); a != b {
		t.Errorf("Key's slot %d differs from its tag's %d", a, b)
	}
}

// TestSlotMatchesServer compares Slot with CLUSTER KEYSLOT of a
// cluster-enabled redis-server of the test's own (one node, no slots
// served: no cluster is formed) for random keys with and without tags.
func TestSlotMatchesServer(t *testing.T) {
	s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", t.TempDir()+"/nodes.conf")
	cli := connect(t, s.addr())
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		b := make([]byte, r.IntN(24))
		for j := range b {
			b[j] = "ab{}:x\x00\xff"[r.IntN(8)]
		}
		key := string(b)
		if i%3 == 0 {
			key = fmt.Sprintf("%s{%d}%s", key, r.IntN(1000), key)
		}
		want, err := cli.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisguard.Slot(key); got != int(want) {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, want)
		}
	}
}

package redisguard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/redis/go-redis/v9"
)

// envRedisAddr names the Redis server the tests use, "host:port"
// (default 127.0.0.1:6379). They write only keys that contain a random
// id of their own, and delete them when they end.
const envRedisAddr = "FENCEKIT_REDIS_ADDR"

// redisAddr returns the address of the tests' Redis server.
func redisAddr() string {
	if a := os.Getenv(envRedisAddr); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// connect returns a client of the server at addr, closed when t ends. It
// skips t when the server does not answer PING, or fails t when
// FENCEKIT_REQUIRE_DB is "1".
func connect(t testing.TB, addr string) *redis.Client {
	t.Helper()
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}) // no retries: skip at once
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := probe.Ping(ctx).Err()
	probe.Close()
	if err != nil {
		if os.Getenv(testkit.EnvRequireDB) == "1" {
			t.Fatalf("Redis at %s (%s) does not answer: %v", addr, envRedisAddr, err)
		}
		t.Skipf("Redis at %s does not answer (%v): start one or set %s to run this test", addr, err, envRedisAddr)
	}
	cli := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { cli.Close() })
	return cli
}

// testRedis returns a client of the tests' Redis server and a random id;
// every key whose name contains the id is deleted when t ends.
func testRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	cli := connect(t, redisAddr())
	id := randomID(t)
	t.Cleanup(func() { deleteKeys(t, cli, id) })
	return cli, id
}

// randomID returns 12 random hex digits.
func randomID(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "fktest" + hex.EncodeToString(b[:])
}

// deleteKeys deletes every key whose name contains id.
func deleteKeys(t testing.TB, cli *redis.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := cli.Scan(ctx, 0, "*"+id+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan test keys: %v", err)
		return
	}
	for _, k := range keys {
		if err := cli.Del(ctx, k).Err(); err != nil {
			t.Errorf("delete test key %q: %v", k, err)
		}
	}
}

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

// redisAddr returns the address of the tests' Redis server, "host:port":
// FENCEKIT_REDIS_ADDR's value, "" when it is unset (no test uses a Redis
// that variable does not name, even one on 127.0.0.1:6379; tests that
// need it skip first, see redisOrSkip). The tests write only keys that
// contain a random id of their own, and delete them when they end.
func redisAddr() string { return os.Getenv(testkit.EnvRedisAddr) }

// redisOrSkip returns a client of the server FENCEKIT_REDIS_ADDR names,
// closed when t ends. It skips t when the variable is unset or the server
// does not answer PING ("Redis: ..."), or fails t when FENCEKIT_REQUIRE_DB
// is "1".
func redisOrSkip(t testing.TB) *redis.Client {
	t.Helper()
	addr := testkit.Redis.Value(t)
	if err := ping(addr); err != nil {
		testkit.Redis.Unreachable(t, err)
	}
	return connect(t, addr)
}

// connect returns a client of the server at addr, closed when t ends; it
// fails t when the server does not answer PING.
func connect(t testing.TB, addr string) *redis.Client {
	t.Helper()
	if err := ping(addr); err != nil {
		t.Fatalf("Redis at %s does not answer: %v", addr, err)
	}
	cli := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { cli.Close() })
	return cli
}

// ping sends one PING to addr, without retries.
func ping(addr string) error {
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}) // no retries: skip at once
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return probe.Ping(ctx).Err()
}

// testRedis returns a client of the tests' Redis server and a random id;
// every key whose name contains the id is deleted when t ends.
func testRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	cli := redisOrSkip(t)
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

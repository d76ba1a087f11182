// Package etcdtest gives tests an embedded etcd that is closed on cleanup.
package etcdtest

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/embedetcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Start starts a one-member embedded etcd (10 ms ticks, so 1 s is the
// smallest lease TTL) in a temporary directory and stops it on cleanup.
func Start(t testing.TB) *embedetcd.Cluster {
	t.Helper()
	return StartCluster(t, 1)
}

// StartCluster starts an embedded etcd of n members.
func StartCluster(t testing.TB, n int) *embedetcd.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), Members: n})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Client returns a client of c (all members when no endpoints are given),
// closed on cleanup.
func Client(t testing.TB, c *embedetcd.Cluster, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := c.Client(endpoints...)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// WaitServerConns waits, up to limit, until no connection of a stopped
// embedded etcd server is still being read. etcd serves connections through
// cmux with read deadlines (5 s for peers) that can outlast Close by a few
// seconds after members were crashed and restarted; a leak check run
// before they end would report them.
func WaitServerConns(limit time.Duration) {
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("soheilhy/cmux")) {
			return
		}
	}
}

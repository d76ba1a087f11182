package etcdtest

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/faults"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// StartTimeout bounds how long Start waits for a cluster to be ready.
const StartTimeout = 30 * time.Second

// Start starts a cluster for the test tb: by default one member on
// loopback TCP ports with 10 ms raft ticks (so 1 s lease TTLs work), its
// data in tb.TempDir(), no logs. It returns once the cluster is ready and
// closes it in tb.Cleanup. A bad option or a failed start ends the test
// with tb.Fatal; call Start from the test's goroutine.
func Start(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	cfg := Config{Dir: tb.TempDir()}
	for _, o := range opts {
		if err := o.apply(&cfg); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := StartCluster(ctx, cfg)
	if err != nil {
		tb.Fatalf("etcdtest: start: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a new client of members (all of them when none are
// given), closed in tb.Cleanup. It carries the cluster's TLS and
// credentials (see ClientConfig).
func (c *Cluster) Client(tb testing.TB, members ...*Member) *clientv3.Client {
	tb.Helper()
	cli, err := c.NewClient(members...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Proxies starts one faults.Proxy in front of each member, in the order of
// Members, closed in tb.Cleanup. Give them to ClientThrough, and to
// faults.Partition, faults.LostReplies or faults.SlowLink to disrupt that
// client's links alone.
func (c *Cluster) Proxies(tb testing.TB) []*faults.Proxy {
	tb.Helper()
	ms := c.Members()
	ps := make([]*faults.Proxy, 0, len(ms))
	for _, m := range ms {
		p, err := c.NewProxy(m)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = p.Close() })
		ps = append(ps, p)
	}
	return ps
}

// ClientThrough returns a new client that reaches the cluster only
// through proxies (Proxies makes one per member), closed in tb.Cleanup.
func (c *Cluster) ClientThrough(tb testing.TB, proxies ...*faults.Proxy) *clientv3.Client {
	tb.Helper()
	cli, err := c.NewClientThrough(proxies...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

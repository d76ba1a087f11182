// Package etcdtest gives the core packages' tests an etcd cluster of
// separate server processes (see internal/etcdproc), stopped on cleanup.
// The server version is FENCEKIT_ETCD_VERSION's (3.5, 3.6 or 3.7; default
// 3.7), built from tools/etcdserver before the tests by scripts/test.sh
// (etcdproc.BuildCommand), or the binary FENCEKIT_ETCD_BIN names. A test
// never builds it: when it is not built, Start fails the test at once with
// the command that builds it (a build takes minutes on a cold machine, and
// would count against the test's deadline). Set FENCEKIT_ETCD_MEMBERS to
// run every one-member cluster of Start with that many members instead.
package etcdtest

import (
	"context"
	"log"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EnvMembers names the variable that sets Start's member count.
const EnvMembers = "FENCEKIT_ETCD_MEMBERS"

// StartTimeout bounds a cluster's start.
const StartTimeout = 60 * time.Second

// Cluster is a running cluster of etcd processes.
type Cluster struct {
	// Members are the members, in the order of their names.
	Members []*Member
	c       *etcdproc.Cluster
}

// Member is one member of a Cluster: its process and addresses.
type Member struct {
	*etcdproc.Member
	// Name is the member's name: m0, m1, ...
	Name string
	// ClientURL is the member's client URL, http://127.0.0.1:port.
	ClientURL string
}

// Start starts a cluster with 10 ms raft ticks (so 1 s lease TTLs work)
// in a temporary directory and stops it on cleanup: one member, or
// FENCEKIT_ETCD_MEMBERS members when that is set.
func Start(t testing.TB) *Cluster {
	t.Helper()
	n := 1
	if v := os.Getenv(EnvMembers); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s=%q: %v", EnvMembers, v, err)
		}
	}
	return StartCluster(t, n)
}

// StartCluster starts a cluster of n members.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartConfig(t, etcdproc.Config{Members: n, NoFsync: true})
}

// StartConfig starts the cluster cfg describes (Dir empty means a
// temporary directory of t) and stops it on cleanup. Without cfg.Binary
// it fails t at once when the server is not built (see the package doc).
func StartConfig(t testing.TB, cfg etcdproc.Config) *Cluster {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Binary == "" {
		bin, err := etcdproc.Built(cfg.Version)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Binary = bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := etcdproc.StartCluster(ctx, cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	w := &Cluster{c: c}
	for _, m := range c.Members() {
		w.Members = append(w.Members, &Member{Member: m, Name: m.Name(), ClientURL: m.ClientURL()})
	}
	return w
}

// Client returns a client of c (all members when no endpoints are given),
// closed on cleanup.
func Client(t testing.TB, c *Cluster, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := c.Client(endpoints...)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Proc returns the process cluster c wraps.
func (c *Cluster) Proc() *etcdproc.Cluster { return c.c }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string { return c.c.Endpoints() }

// Client returns a new client for the given endpoints (all members when
// none are given), with the cluster's TLS and credentials and no logs. The
// caller closes it.
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	cfg := c.c.ClientConfig()
	if len(endpoints) > 0 {
		cfg.Endpoints = endpoints
	}
	return clientv3.New(cfg)
}

// Leader returns the index of the leader member, or -1 when there is none.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until one running member leads and the others have a
// leader.
func (c *Cluster) WaitLeader(ctx context.Context) error { return c.c.WaitLeader(ctx) }

// Metric returns the sum over the running members of the etcd metric
// name, such as etcd_debugging_mvcc_watcher_total; it fails t when a
// member's metrics cannot be read.
func (c *Cluster) Metric(t testing.TB, name string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.c.Metric(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Close stops every member (followers first) and waits until they exited.
func (c *Cluster) Close() { _ = c.c.Close() }

// WaitServerConns did wait for an embedded server's connections; the
// members are processes now, so there is nothing to wait for. It stays for
// the tests that call it.
func WaitServerConns(time.Duration) {}

// ForExample starts a one-member etcd for a package's runnable examples
// (a separate process; a user's program connects to its own cluster
// instead) and returns a client and a function that closes both. An
// example has no testing.T: a failure to start ends the test binary.
func ForExample() (*clientv3.Client, func()) {
	cluster, err := etcdproc.Start(etcdproc.Config{NoFsync: true})
	if err != nil {
		log.Fatal(err)
	}
	cli, err := cluster.NewClient()
	if err != nil {
		_ = cluster.Close()
		log.Fatal(err)
	}
	return cli, func() { cli.Close(); _ = cluster.Close() }
}

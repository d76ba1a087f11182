// Package embedetcd starts in-process etcd clusters on loopback addresses for
// tests, benchmarks and examples. Nothing here needs an etcd binary.
//
// It is a thin wrapper over the public package integration/etcdtest, kept
// for the code that used it before that package existed; new code should
// use etcdtest.
package embedetcd

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config describes a cluster to start.
type Config struct {
	// Dir is the parent of every member's data directory. Required.
	Dir string
	// Members is the number of members; 0 means 1.
	Members int
	// TickMs and ElectionMs set the raft timing; 0 means 10 and 100, which
	// give the smallest lease TTL etcd grants: 1 second.
	TickMs, ElectionMs uint
	// NoFsync turns off fsync (faster, and unsafe outside tests).
	NoFsync bool
}

// Cluster is a running in-process etcd cluster.
type Cluster struct {
	c       *etcdtest.Cluster
	Members []*Member
}

// Member is one member of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	m         *etcdtest.Member
}

// Start starts the cluster described by cfg and waits until every member is
// ready and a leader is elected. ctx bounds the start.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedetcd: Dir is required")
	}
	c, err := etcdtest.StartCluster(ctx, etcdtest.Config{
		Dir:             cfg.Dir,
		Members:         cfg.Members,
		TickInterval:    time.Duration(cfg.TickMs) * time.Millisecond,
		ElectionTimeout: time.Duration(cfg.ElectionMs) * time.Millisecond,
		NoFsync:         cfg.NoFsync,
	})
	if err != nil {
		return nil, err
	}
	w := &Cluster{c: c}
	for _, m := range c.Members() {
		w.Members = append(w.Members, &Member{Name: m.Name(), ClientURL: m.ClientURL(), m: m})
	}
	return w, nil
}

// Etcdtest returns the public cluster this one wraps.
func (c *Cluster) Etcdtest() *etcdtest.Cluster { return c.c }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string { return c.c.Endpoints() }

// Client returns a new client for the given endpoints (all members when
// none are given), with logging off. The caller closes it.
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	cfg := c.c.ClientConfig()
	if len(endpoints) > 0 {
		cfg.Endpoints = endpoints
	}
	return clientv3.New(cfg)
}

// Stop stops the member; its data stays for Restart.
func (m *Member) Stop() { m.m.Stop() }

// Running reports whether the member is started.
func (m *Member) Running() bool { return m.m.Running() }

// Restart starts a stopped member again on the same addresses and data.
func (m *Member) Restart(ctx context.Context) error { return m.m.Restart(ctx) }

// IsLeader reports whether the member is running and is the raft leader.
func (m *Member) IsLeader() bool { return m.m.IsLeader() }

// Leader returns the index of the leader member, or -1 when there is none.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until every running member sees the same leader.
func (c *Cluster) WaitLeader(ctx context.Context) error { return c.c.WaitLeader(ctx) }

// Close stops every member: the followers first, then the leader, so the
// leader does not try to hand leadership to a member that is going away.
// The data directories stay under Config.Dir for the caller to remove.
func (c *Cluster) Close() { _ = c.c.Close() }

package etcdproc

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Binary returns the path of the etcd binary the members run, or "" when
// a Runner of the Config starts them.
func (c *Cluster) Binary() string {
	if r, ok := c.cfg.Runner.(processRunner); ok {
		return r.bin
	}
	return ""
}

// Dir returns the directory of the members' data and logs.
func (c *Cluster) Dir() string { return c.cfg.Dir }

// Members returns the members, in the order of their names.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.clientURL
	}
	return eps
}

// Leader returns the member that is the raft leader, or nil when none is
// (during an election, or when too few members run).
func (c *Cluster) Leader() *Member {
	for _, m := range c.members {
		if m.IsLeader() {
			return m
		}
	}
	return nil
}

// WaitLeader waits until exactly one running, unpaused member leads and
// every other one has a leader (the same one, where its server says which);
// ctx bounds the wait.
func (c *Cluster) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if c.agreedLeader(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdproc: no leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Cluster) agreedLeader(ctx context.Context) bool {
	leaders := 0
	var lead uint64
	for _, m := range c.members {
		srv := m.serving()
		if srv == nil {
			continue
		}
		st, err := srv.Status(ctx)
		if err != nil || !st.HasLeader || (st.LeaderID != 0 && lead != 0 && st.LeaderID != lead) {
			return false
		}
		if st.LeaderID != 0 {
			lead = st.LeaderID
		}
		if st.IsLeader {
			leaders++
		}
	}
	return leaders == 1
}

// Metric returns the sum of the metric name (a counter's or a gauge's
// value without labels, or the sum over its series) over the running,
// unpaused members, read from their metrics URLs (which a Runner's
// servers may not serve: then it fails).
func (c *Cluster) Metric(ctx context.Context, name string) (float64, error) {
	var sum float64
	for _, m := range c.members {
		if m.serving() == nil {
			continue
		}
		ms, err := readMetrics(ctx, m, name)
		if err != nil {
			return 0, err
		}
		sum += ms[name]
	}
	return sum, nil
}

// TLS returns a new copy of the client TLS configuration (the cluster's
// CA and client certificate), or nil when the cluster has no TLS.
func (c *Cluster) TLS() *tls.Config {
	if c.certs == nil || c.certs.Client == nil {
		return nil
	}
	return c.certs.Client.Clone()
}

// CAFile returns the path of the cluster's CA certificate in PEM form, or
// "" when the cluster has no TLS. It stays until the cluster is closed.
func (c *Cluster) CAFile() string {
	if c.certs == nil {
		return ""
	}
	return c.certs.CAFile
}

// ClientConfig returns a client configuration for every member: their
// endpoints, TLS and credentials when the cluster has them, a 5 s dial
// timeout and no logs. Change Endpoints to reach the members through
// something else, such as a proxy.
func (c *Cluster) ClientConfig() clientv3.Config {
	cfg := clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		TLS:         c.TLS(),
	}
	if c.cfg.RootPassword != "" {
		cfg.Username, cfg.Password = RootUser, c.cfg.RootPassword
	}
	return cfg
}

// NewClient returns a new client of members (all of them when none are
// given), configured as ClientConfig says. The caller closes it.
func (c *Cluster) NewClient(members ...*Member) (*clientv3.Client, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	cfg := c.ClientConfig()
	if len(members) > 0 {
		cfg.Endpoints = cfg.Endpoints[:0]
		for _, m := range members {
			cfg.Endpoints = append(cfg.Endpoints, m.clientURL)
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdproc: client: %w", err)
	}
	return cli, nil
}

// Close stops every member, the followers before the leader (a process
// gets SIGTERM, then SIGKILL after StopTimeout), and removes the
// temporary directories the cluster made (not Config.Dir). Closing a
// closed cluster does nothing.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		var leader *Member
		var wg sync.WaitGroup
		for _, m := range c.members {
			if leader == nil && m.IsLeader() {
				leader = m
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); m.Stop() }()
		}
		wg.Wait()
		if leader != nil {
			leader.Stop()
		}
		for _, d := range c.tmpDirs {
			_ = os.RemoveAll(d)
		}
		ReleasePorts(c.ports)
	})
	return nil
}

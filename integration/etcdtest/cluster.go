package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/internal/etcdproc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrEmbedded reports a call that needs a member process (Config.Binary)
// on an in-process member.
var ErrEmbedded = errors.New("etcdtest: member is in-process, not a process")

// cluster is the one etcd test cluster type, which internal/etcdproc's
// process clusters are too; Cluster adds what involves package faults
// and testing.
type cluster = etcdproc.Cluster

// Cluster is a running etcd cluster: members inside the test process, or
// processes of Config.Binary. Its methods are safe for concurrent use.
//
// Besides the methods below it has those of the one cluster type that
// fencekit's own process runner shares: Members, Endpoints, Leader,
// WaitLeader (every running member agrees on one leader; ctx bounds the
// wait), TLS (a copy of the client TLS configuration, nil without TLS),
// CAFile, ClientConfig (every member's endpoint, TLS and credentials, a 5 s
// dial timeout, no logs), NewClient(members...) (a new client of those
// members, all when none are given; it returns ErrClosed after Close),
// Metric (the sum of a metric over the member processes; it fails for
// in-process members, which serve no metrics), Dir and Binary.
type Cluster struct {
	*cluster
	inProcess bool // the members run inside this process

	closeOnce sync.Once
}

// Member is one member of a Cluster. It satisfies faults.Member, so
// faults.CrashMember and faults.KillLeader can stop and restart it, and
// faults.ProcessMember, so that the Sigstop and Sigkill faults can freeze
// and kill it when it is a process (Config.Binary). Its methods are safe
// for concurrent use: Name (m0, m1, ...), ClientURL (http://127.0.0.1:port,
// https:// with TLS, unix:///path or unixs:// with unix sockets; the same
// across Restart), PeerURL, MetricsURL, Running, IsLeader, Stop (a leader
// hands its leadership over first, as etcd does on shutdown; its data
// stays), Restart(ctx) (on the same addresses and data; ErrClosed after
// Close), Kill (SIGKILL for a process, Stop for an in-process member),
// Pause and Resume (SIGSTOP and SIGCONT; ErrEmbedded for an in-process
// member), Paused, PID (0 for an in-process member) and LogFile.
type Member = etcdproc.Member

var _ faults.ProcessMember = (*Member)(nil)

// openClusters counts the in-process clusters that are open; see Close.
var openClusters atomic.Int64

// StartCluster starts the cluster cfg describes and returns once every
// member is ready and all agree on a leader (and, with
// Config.RootPassword, authentication is on). ctx bounds the start. On
// failure nothing is left running and the error says why: a *ConfigError
// for a bad cfg, ctx's error when it ended first. Close the cluster when
// done.
func StartCluster(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pcfg := etcdproc.Config{
		Dir:             cfg.Dir,
		Members:         cfg.Members,
		TickInterval:    cfg.TickInterval,
		ElectionTimeout: cfg.ElectionTimeout,
		NoFsync:         cfg.NoFsync,
		UnixSockets:     cfg.UnixSockets,
		TLS:             cfg.TLS,
		RootPassword:    cfg.RootPassword,
		Binary:          cfg.Binary,
	}
	if cfg.Binary == "" {
		pcfg.Runner = embedRunner{logger: cfg.Logger}
	} else if cfg.UnixSockets {
		return nil, &ConfigError{Field: "UnixSockets", Reason: "not supported with Binary"}
	}
	pc, err := etcdproc.StartCluster(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	c := &Cluster{cluster: pc, inProcess: cfg.Binary == ""}
	if c.inProcess {
		openClusters.Add(1)
	}
	return c, nil
}

// FaultMembers returns the members as faults.Member values, for
// faults.KillLeader.
func (c *Cluster) FaultMembers() []faults.Member {
	ms := c.Members()
	fs := make([]faults.Member, len(ms))
	for i, m := range ms {
		fs[i] = m
	}
	return fs
}

// ProcessMembers returns the members as faults.ProcessMember values, for
// faults.SigstopLeader and faults.SigkillLeader. Their Pause and Resume
// fail with ErrEmbedded unless the cluster runs processes (Config.Binary).
func (c *Cluster) ProcessMembers() []faults.ProcessMember {
	ms := c.Members()
	ps := make([]faults.ProcessMember, len(ms))
	for i, m := range ms {
		ps[i] = m
	}
	return ps
}

// NewProxy starts a faults.Proxy in front of member m, on a loopback TCP
// port. Close it when done.
func (c *Cluster) NewProxy(m *Member) (*faults.Proxy, error) {
	p, err := faults.NewProxy(m.ClientURL())
	if err != nil {
		return nil, fmt.Errorf("etcdtest: proxy for %s: %w", m.Name(), err)
	}
	return p, nil
}

// NewClientThrough returns a new client that reaches the cluster only
// through proxies (made by NewProxy), with the cluster's TLS and
// credentials. The caller closes it. It returns ErrNoProxies when proxies
// is empty.
func (c *Cluster) NewClientThrough(proxies ...*faults.Proxy) (*clientv3.Client, error) {
	if len(proxies) == 0 {
		return nil, ErrNoProxies
	}
	cfg := c.ClientConfig()
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	cfg.Endpoints = make([]string, len(proxies))
	for i, p := range proxies {
		cfg.Endpoints[i] = scheme + p.Addr()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: client: %w", err)
	}
	return cli, nil
}

// Close stops every member, the followers before the leader, and removes
// the temporary directories the cluster made (not Config.Dir). Closing a
// closed cluster does nothing.
//
// etcd's servers keep connections that were being accepted when a member
// stopped for up to 5 s more. When the last open in-process cluster of the
// process closes, Close waits, up to 6 s, until none is left, so that a
// leak check that follows (goleak) sees none.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		_ = c.cluster.Close()
		if c.inProcess && openClusters.Add(-1) == 0 {
			waitServerConns(6 * time.Second)
		}
	})
	return nil
}

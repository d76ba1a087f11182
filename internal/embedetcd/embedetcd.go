// Package embedetcd starts in-process etcd clusters on loopback addresses for
// tests, benchmarks and examples. Nothing here needs an etcd binary.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
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
	cfg     Config
	token   string
	Members []*Member
}

// Member is one member of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	peerURL   string
	dataDir   string
	cluster   *Cluster

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// reservePorts returns n free loopback TCP ports. The ports are released
// before use, so another process could take one in between; on loopback in
// a test that risk is small and shows as a start error, not as wrong results.
func reservePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start starts the cluster described by cfg and waits until every member is
// ready and a leader is elected. ctx bounds the start.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedetcd: Dir is required")
	}
	if cfg.Members <= 0 {
		cfg.Members = 1
	}
	if cfg.TickMs == 0 {
		cfg.TickMs = 10
	}
	if cfg.ElectionMs == 0 {
		cfg.ElectionMs = 100
	}
	ports, err := reservePorts(2 * cfg.Members)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: reserve ports: %w", err)
	}
	c := &Cluster{cfg: cfg, token: fmt.Sprintf("fencekit-%d", time.Now().UnixNano())}
	var initial []string
	for i := range cfg.Members {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			cluster:   c,
		}
		m.dataDir = filepath.Join(cfg.Dir, m.Name)
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.peerURL)
	}
	initialCluster := strings.Join(initial, ",")
	errs := make(chan error, len(c.Members))
	for _, m := range c.Members {
		go func() { errs <- m.start(ctx, initialCluster, "new") }()
	}
	var startErr error
	for range c.Members {
		startErr = errors.Join(startErr, <-errs)
	}
	if startErr != nil {
		c.Close()
		return nil, startErr
	}
	if err := c.WaitLeader(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (m *Member) config(initialCluster, state string) (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.dataDir
	cfg.TickMs = m.cluster.cfg.TickMs
	cfg.ElectionMs = m.cluster.cfg.ElectionMs
	cfg.UnsafeNoFsync = m.cluster.cfg.NoFsync
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu, err := url.Parse(m.ClientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(m.peerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = initialCluster
	cfg.InitialClusterToken = m.cluster.token
	cfg.ClusterState = state
	return cfg, nil
}

func (m *Member) start(ctx context.Context, initialCluster, state string) error {
	cfg, err := m.config(initialCluster, state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.dataDir, 0o700); err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("embedetcd: start %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedetcd: %s: %w", m.Name, err)
	case <-ctx.Done():
		e.Close()
		return fmt.Errorf("embedetcd: %s not ready: %w", m.Name, ctx.Err())
	}
	m.mu.Lock()
	m.etcd = e
	m.mu.Unlock()
	return nil
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.ClientURL
	}
	return eps
}

// Client returns a new client for the given endpoints (all members when
// none are given), with logging off. The caller closes it.
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{},
	})
}

// Stop stops the member; its data stays for Restart.
func (m *Member) Stop() {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Running reports whether the member is started.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil
}

// Restart starts a stopped member again on the same addresses and data.
func (m *Member) Restart(ctx context.Context) error {
	if m.Running() {
		return nil
	}
	var initial []string
	for _, o := range m.cluster.Members {
		initial = append(initial, o.Name+"="+o.peerURL)
	}
	return m.start(ctx, strings.Join(initial, ","), "existing")
}

// IsLeader reports whether the member is running and is the raft leader.
func (m *Member) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd == nil {
		return false
	}
	s := m.etcd.Server
	return s.Leader() != 0 && uint64(s.Leader()) == uint64(s.MemberID())
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

// WaitLeader waits until every running member sees the same leader.
func (c *Cluster) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if c.agreedLeader() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedetcd: no leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Cluster) agreedLeader() bool {
	var lead uint64
	for _, m := range c.Members {
		m.mu.Lock()
		e := m.etcd
		m.mu.Unlock()
		if e == nil {
			continue
		}
		l := uint64(e.Server.Leader())
		if l == 0 || (lead != 0 && l != lead) {
			return false
		}
		lead = l
	}
	return lead != 0
}

// Close stops every member: the followers first, then the leader, so the
// leader does not try to hand leadership to a member that is going away.
// The data directories stay under Config.Dir for the caller to remove.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	var leader *Member
	for _, m := range c.Members {
		if m.IsLeader() {
			leader = m
			continue
		}
		wg.Go(m.Stop)
	}
	wg.Wait()
	if leader != nil {
		leader.Stop()
	}
}

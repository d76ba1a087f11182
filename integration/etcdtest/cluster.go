package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/internal/etcdproc"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is a running in-process etcd cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg     Config
	token   string
	tmpDirs []string        // removed by Close
	certs   *etcdproc.Certs // nil without TLS
	ports   []int           // reserved for the members
	members []*Member
	opened  bool // returned by StartCluster

	closeOnce sync.Once
	closed    atomic.Bool

	proc *etcdproc.Cluster // with Config.Binary: the members are processes
}

// Member is one member of a Cluster. It satisfies faults.Member, so
// faults.CrashMember and faults.KillLeader can stop and restart it, and
// faults.ProcessMember, so that the Sigstop and Sigkill faults can freeze
// and kill it when it is a process (Config.Binary). Its methods are safe
// for concurrent use.
type Member struct {
	name      string
	clientURL string
	peerURL   string
	dataDir   string
	cluster   *Cluster

	mu   sync.Mutex // serializes start and stop
	etcd atomic.Pointer[embed.Etcd]

	proc *etcdproc.Member // with Config.Binary: the member's process
}

var _ faults.ProcessMember = (*Member)(nil)

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
	if cfg.Binary != "" {
		return startProcesses(ctx, cfg)
	}
	// Ports are found free and released before etcd binds them; another
	// process may take one in between. Try again on fresh ports then.
	for attempt := 1; ; attempt++ {
		c, err := startOnce(ctx, cfg)
		if err == nil || attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) || ctx.Err() != nil {
			return c, err
		}
	}
}

func startOnce(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	c := &Cluster{cfg: cfg, token: fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), clusterSeq.Add(1))}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.cfg.Dir == "" {
		d, err := os.MkdirTemp("", "etcdtest-")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: data dir: %w", err)
		}
		c.tmpDirs = append(c.tmpDirs, d)
		c.cfg.Dir = d
	}
	if cfg.TLS {
		// Over a unix socket, etcd's client expects the socket's file
		// name as the server name.
		names := make([]string, cfg.Members)
		for i := range names {
			names[i] = sockName(i)
		}
		if c.certs, err = etcdproc.GenCerts(filepath.Join(c.cfg.Dir, "tls"), names...); err != nil {
			return nil, fmt.Errorf("etcdtest: certificates: %w", err)
		}
	}
	nPorts := 2 * cfg.Members
	var sockDir string
	if cfg.UnixSockets {
		nPorts = cfg.Members
		// Socket paths are limited to about 100 bytes: keep them short.
		if sockDir, err = os.MkdirTemp("", "etcdsock"); err != nil {
			return nil, fmt.Errorf("etcdtest: socket dir: %w", err)
		}
		c.tmpDirs = append(c.tmpDirs, sockDir)
	}
	ports, err := etcdproc.ReservePorts(nPorts)
	c.ports = ports
	if err != nil {
		return nil, fmt.Errorf("etcdtest: reserve ports: %w", err)
	}
	scheme, sockScheme := "http", "unix"
	if cfg.TLS {
		scheme, sockScheme = "https", "unixs"
	}
	for i := range cfg.Members {
		m := &Member{name: fmt.Sprintf("m%d", i), cluster: c}
		m.dataDir = filepath.Join(c.cfg.Dir, m.name)
		if cfg.UnixSockets {
			m.peerURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[i])
			m.clientURL = sockScheme + "://" + filepath.Join(sockDir, sockName(i))
		} else {
			m.clientURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i])
			m.peerURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i+1])
		}
		c.members = append(c.members, m)
	}
	// Launch the members one after the other: a new member asks the
	// peers already serving whether it joined before, and a peer that
	// listens but does not serve yet would keep it waiting a second.
	// Then wait for all of them to be ready at once.
	launched := make([]*embed.Etcd, len(c.members))
	for i, m := range c.members {
		if launched[i], err = m.launch("new"); err != nil {
			for _, e := range launched[:i] {
				e.Close()
			}
			return nil, err
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
	)
	for i, m := range c.members {
		wg.Go(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if err := m.ready(ctx, launched[i]); err != nil {
				mu.Lock()
				errs = errors.Join(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if errs != nil {
		return nil, errs
	}
	if err := c.WaitLeader(ctx); err != nil {
		return nil, err
	}
	if cfg.RootPassword != "" {
		if err := c.enableAuth(ctx); err != nil {
			return nil, err
		}
	}
	c.opened = true
	openClusters.Add(1)
	return c, nil
}

var (
	clusterSeq   atomic.Int64
	openClusters atomic.Int64
)

// enableAuth creates the root user and turns authentication on.
func (c *Cluster) enableAuth(ctx context.Context) error {
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: enable auth: %w", err)
	}
	defer cli.Close()
	if _, err := cli.UserAdd(ctx, RootUser, c.cfg.RootPassword); err != nil {
		return fmt.Errorf("etcdtest: add user %s: %w", RootUser, err)
	}
	if _, err := cli.UserGrantRole(ctx, RootUser, "root"); err != nil {
		return fmt.Errorf("etcdtest: grant role root: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcdtest: enable auth: %w", err)
	}
	return nil
}

// embedConfig is the etcd configuration of m.
func (m *Member) embedConfig(state string) (*embed.Config, error) {
	c := m.cluster
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dataDir
	cfg.TickMs = uint(c.cfg.TickInterval / time.Millisecond)
	cfg.ElectionMs = uint(c.cfg.ElectionTimeout / time.Millisecond)
	cfg.UnsafeNoFsync = c.cfg.NoFsync
	lg := c.cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.With(zap.String("member", m.name)))
	cu, err := url.Parse(m.clientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(m.peerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.name+"="+o.peerURL)
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = state
	if c.certs != nil {
		info := transport.TLSInfo{
			CertFile:       c.certs.CertFile,
			KeyFile:        c.certs.KeyFile,
			TrustedCAFile:  c.certs.CAFile,
			ClientCertAuth: true,
		}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	return cfg, nil
}

// start starts m's etcd and waits until it is ready.
func (m *Member) start(ctx context.Context, state string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd.Load() != nil {
		return nil
	}
	e, err := m.launch(state)
	if err != nil {
		return err
	}
	return m.ready(ctx, e)
}

// launch starts m's etcd without waiting for it to be ready. m.mu is held.
func (m *Member) launch(state string) (*embed.Etcd, error) {
	if m.cluster.closed.Load() {
		return nil, ErrClosed
	}
	cfg, err := m.embedConfig(state)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %s: %w", m.name, err)
	}
	if err := os.MkdirAll(m.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdtest: %s: %w", m.name, err)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: start %s: %w", m.name, err)
	}
	return e, nil
}

// ready waits until e, m's etcd, is ready and records it as running, or
// closes it. m.mu is held.
func (m *Member) ready(ctx context.Context, e *embed.Etcd) error {
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdtest: %s: %w", m.name, err)
	case <-e.Server.StopNotify():
		e.Close()
		return fmt.Errorf("etcdtest: %s stopped while starting", m.name)
	case <-ctx.Done():
		e.Close()
		return fmt.Errorf("etcdtest: %s not ready: %w", m.name, ctx.Err())
	}
	m.etcd.Store(e)
	return nil
}

// sockName is the file name of member i's client socket.
func sockName(i int) string { return fmt.Sprintf("m%d.sock", i) }

// Name returns the member's name: m0, m1, ...
func (m *Member) Name() string { return m.name }

// ClientURL returns the URL the member serves clients on:
// http://127.0.0.1:port, https://... with TLS, or unix:///path (unixs://
// with TLS) with unix sockets. It stays the same across Restart.
func (m *Member) ClientURL() string { return m.clientURL }

// PeerURL returns the URL the member talks to its peers on.
func (m *Member) PeerURL() string { return m.peerURL }

// Running reports whether the member is started.
func (m *Member) Running() bool {
	if m.proc != nil {
		return m.proc.Running()
	}
	return m.etcd.Load() != nil
}

// Stop stops the member; its data stays for Restart. A leader first
// hands its leadership to a follower when it can, as etcd does on
// shutdown. Stopping a stopped member does nothing. Clients connected to
// it fail over to the others.
func (m *Member) Stop() {
	if m.proc != nil {
		m.proc.Stop()
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.etcd.Swap(nil); e != nil {
		// Not HardStop first: the peer server would then serve requests
		// on a closed backend, and such a request blocks for ever.
		e.Close()
	}
}

// Restart starts a stopped member again on the same addresses and data,
// and returns once it is ready; ctx bounds the wait. Restarting a running
// member does nothing. It returns ErrClosed after Cluster.Close.
func (m *Member) Restart(ctx context.Context) error {
	if m.proc != nil {
		if m.cluster.closed.Load() {
			return ErrClosed
		}
		return m.proc.Restart(ctx)
	}
	return m.start(ctx, "existing")
}

// IsLeader reports whether the member is running and is the raft leader.
func (m *Member) IsLeader() bool {
	if m.proc != nil {
		return m.proc.IsLeader()
	}
	e := m.etcd.Load()
	if e == nil {
		return false
	}
	s := e.Server
	return s.Leader() != 0 && uint64(s.Leader()) == uint64(s.MemberID())
}

// leaderID returns the leader m sees (0 when none, or m is stopped).
func (m *Member) leaderID() uint64 {
	if e := m.etcd.Load(); e != nil {
		return uint64(e.Server.Leader())
	}
	return 0
}

// Members returns the members, in the order of their names.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// FaultMembers returns the members as faults.Member values, for
// faults.KillLeader.
func (c *Cluster) FaultMembers() []faults.Member {
	ms := make([]faults.Member, len(c.members))
	for i, m := range c.members {
		ms[i] = m
	}
	return ms
}

// ProcessMembers returns the members as faults.ProcessMember values, for
// faults.SigstopLeader and faults.SigkillLeader. Their Pause and Resume
// fail with ErrEmbedded unless the cluster runs processes (Config.Binary).
func (c *Cluster) ProcessMembers() []faults.ProcessMember {
	ms := make([]faults.ProcessMember, len(c.members))
	for i, m := range c.members {
		ms[i] = m
	}
	return ms
}

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

// WaitLeader waits until every running member sees the same leader; ctx
// bounds the wait.
func (c *Cluster) WaitLeader(ctx context.Context) error {
	if c.proc != nil {
		return c.proc.WaitLeader(ctx)
	}
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		if c.agreedLeader() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdtest: no leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Cluster) agreedLeader() bool {
	var lead uint64
	for _, m := range c.members {
		if !m.Running() {
			continue
		}
		l := m.leaderID()
		if l == 0 || (lead != 0 && l != lead) {
			return false
		}
		lead = l
	}
	return lead != 0
}

// TLS returns a new copy of the client TLS configuration (the cluster's
// CA and client certificate), or nil when the cluster has no TLS.
func (c *Cluster) TLS() *tls.Config {
	if c.proc != nil {
		return c.proc.TLS()
	}
	if c.certs == nil {
		return nil
	}
	return c.certs.Client.Clone()
}

// CAFile returns the path of the cluster's CA certificate in PEM form, or
// "" when the cluster has no TLS. It stays until the cluster is closed.
func (c *Cluster) CAFile() string {
	if c.proc != nil {
		return c.proc.CAFile()
	}
	if c.certs == nil {
		return ""
	}
	return c.certs.CAFile
}

// ClientConfig returns a client configuration for every member: their
// endpoints, TLS and credentials when the cluster has them, a 5 s dial
// timeout and no logs. Change Endpoints to reach the members through
// something else, such as a faults.Proxy.
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
		return nil, fmt.Errorf("etcdtest: client: %w", err)
	}
	return cli, nil
}

// NewProxy starts a faults.Proxy in front of member m, on a loopback TCP
// port. Close it when done.
func (c *Cluster) NewProxy(m *Member) (*faults.Proxy, error) {
	p, err := faults.NewProxy(m.clientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: proxy for %s: %w", m.name, err)
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
	cfg.Endpoints = c.proxyEndpoints(proxies)
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: client: %w", err)
	}
	return cli, nil
}

// proxyEndpoints returns the URLs of proxies in the cluster's scheme.
func (c *Cluster) proxyEndpoints(proxies []*faults.Proxy) []string {
	scheme := "http://"
	if c.certs != nil || c.TLS() != nil {
		scheme = "https://"
	}
	eps := make([]string, len(proxies))
	for i, p := range proxies {
		eps[i] = scheme + p.Addr()
	}
	return eps
}

// Close stops every member, the followers before the leader, and removes
// the temporary directories the cluster made (not Config.Dir). Closing a
// closed cluster does nothing.
//
// etcd's servers keep connections that were being accepted when a member
// stopped for up to 5 s more. When the last open cluster of the process
// closes, Close waits, up to 6 s, until none is left, so that a leak
// check that follows (goleak) sees none.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.proc != nil {
			_ = c.proc.Close()
			return
		}
		var wg sync.WaitGroup
		var leader *Member
		for _, m := range c.members {
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
		for _, d := range c.tmpDirs {
			_ = os.RemoveAll(d)
		}
		etcdproc.ReleasePorts(c.ports)
		if c.opened && openClusters.Add(-1) == 0 {
			waitServerConns(6 * time.Second)
		}
	})
	return nil
}

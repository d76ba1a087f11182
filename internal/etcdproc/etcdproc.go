// Package etcdproc runs etcd clusters for tests as separate processes: each
// member is an etcd server process (built from tools/etcdserver at a pinned
// version, or the binary FENCEKIT_ETCD_BIN names) on free 127.0.0.1 ports,
// with its data in a directory of its own. Members can be stopped
// gracefully, killed (SIGKILL), paused (SIGSTOP) and resumed (SIGCONT), and
// restarted on the same data. Every process is stopped by its PID when the
// cluster is closed; on Linux the kernel also kills the members when the
// test process dies.
//
// Building a server binary takes minutes on a cold machine, so it is an
// explicit step before any test starts: BuildCommand (which scripts/test.sh,
// scripts/matrix.sh and CI run before go test) calls Binary, which builds
// into the user cache directory (os.UserCacheDir, so XDG_CACHE_HOME on
// Linux, then fencekit/etcd), keyed by version, sources and Go version.
// StartCluster, Start and the tests' helpers only look the binary up
// (Built) and fail at once, naming the command, when it is missing: a
// plain go test of a package on a machine that never built the server
// fails fast with that message instead of building under a test's
// deadline.
//
// It is test support: the library packages never import it, and it does
// not import etcd's server module, so it lifts nothing into the module
// graph of fencekit's users.
package etcdproc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Defaults of a Config.
const (
	// DefaultTickInterval is the raft heartbeat interval when
	// Config.TickInterval is 0.
	DefaultTickInterval = 10 * time.Millisecond
	// DefaultElectionTimeout is the raft election timeout when
	// Config.ElectionTimeout is 0; with it etcd grants 1 s leases.
	DefaultElectionTimeout = 100 * time.Millisecond
	// RootUser is the user that Config.RootPassword creates.
	RootUser = "root"
	// BuildTimeout bounds a build of the binary by BuildCommand.
	BuildTimeout = 15 * time.Minute
	// MaxMembers is the largest member count a Config may ask for.
	MaxMembers = 9
)

// ErrClosed reports a call on a closed Cluster.
var ErrClosed = errors.New("etcdproc: cluster closed")

// Config describes a cluster. The zero value is one member on loopback
// TCP, fsync on, no TLS, no auth, the default version's binary.
type Config struct {
	// Dir is the parent of every member's data directory and log file.
	// Empty means a new temporary directory removed by Close.
	Dir string
	// Members is the number of members, 1 to MaxMembers; 0 means 1.
	Members int
	// TickInterval and ElectionTimeout set raft's timing, whole
	// milliseconds; 0 means DefaultTickInterval and
	// DefaultElectionTimeout.
	TickInterval, ElectionTimeout time.Duration
	// NoFsync turns fsync off (--unsafe-no-fsync).
	NoFsync bool
	// TLS serves clients and peers over TLS with generated certificates;
	// clients must present the client certificate ClientConfig carries.
	TLS bool
	// Certs, with TLS, are the certificates the members use instead of
	// generated ones; its Client may be nil (ClientConfig then has no
	// TLS configuration).
	Certs *Certs
	// RootPassword, when not empty, creates RootUser with it and turns
	// authentication on before StartCluster returns.
	RootPassword string
	// Binary is the etcd binary to run; empty means Built(Version).
	Binary string
	// Version is the server version to run when Binary is empty: "3.5",
	// "3.6" or "3.7"; empty means the FENCEKIT_ETCD_VERSION variable's, or
	// DefaultVersion.
	Version string
	// Flags are more etcd flags for every member, such as
	// "--bcrypt-cost=4".
	Flags []string
}

// Cluster is a running cluster of etcd processes. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg     Config
	bin     string
	token   string
	certs   *Certs
	tmpDirs []string
	ports   []int
	members []*Member

	closeOnce sync.Once
	closed    atomic.Bool
}

// StartCluster starts the cluster cfg describes and returns once every
// member serves and all agree on a leader. ctx bounds the start. It never
// builds a binary: with Binary empty it runs the one Built finds, and
// returns Built's *NotBuiltError (matching ErrNotBuilt, naming the build
// command) at once when there is none. On failure nothing is left running.
func StartCluster(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Binary == "" {
		if cfg.Binary, err = Built(cfg.Version); err != nil {
			return nil, err
		}
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

// StartTimeout bounds the start of a cluster by Start.
const StartTimeout = 60 * time.Second

// Start starts the cluster cfg describes within StartTimeout, for examples
// and benchmarks that have no test to clean up after; like StartCluster it
// fails at once, saying how to build it, when the binary is not built.
// Close it when done.
func Start(cfg Config) (*Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	return StartCluster(ctx, cfg)
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Members < 0 || cfg.Members > MaxMembers {
		return cfg, fmt.Errorf("etcdproc: Members %d is not between 1 and %d", cfg.Members, MaxMembers)
	}
	if cfg.Members == 0 {
		cfg.Members = 1
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = max(DefaultElectionTimeout, 10*cfg.TickInterval)
	}
	if cfg.TickInterval < time.Millisecond || cfg.ElectionTimeout < 5*cfg.TickInterval {
		return cfg, fmt.Errorf("etcdproc: timing %v/%v: tick below 1ms or election below 5 ticks", cfg.TickInterval, cfg.ElectionTimeout)
	}
	return cfg, nil
}

var clusterSeq atomic.Int64

func startOnce(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	c := &Cluster{cfg: cfg, bin: cfg.Binary, token: fmt.Sprintf("etcdproc-%d-%d", os.Getpid(), clusterSeq.Add(1))}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.cfg.Dir == "" {
		d, err := os.MkdirTemp("", "etcdproc-")
		if err != nil {
			return nil, fmt.Errorf("etcdproc: data dir: %w", err)
		}
		c.tmpDirs = append(c.tmpDirs, d)
		c.cfg.Dir = d
	}
	if cfg.TLS && cfg.Certs != nil {
		c.certs = cfg.Certs
	} else if cfg.TLS {
		if c.certs, err = GenCerts(filepath.Join(c.cfg.Dir, "tls")); err != nil {
			return nil, fmt.Errorf("etcdproc: certificates: %w", err)
		}
	}
	if c.ports, err = ReservePorts(3 * cfg.Members); err != nil {
		return nil, fmt.Errorf("etcdproc: reserve ports: %w", err)
	}
	scheme := "http"
	if cfg.TLS {
		scheme = "https"
	}
	for i := range cfg.Members {
		m := &Member{name: fmt.Sprintf("m%d", i), cluster: c}
		m.dataDir = filepath.Join(c.cfg.Dir, m.name)
		m.logFile = filepath.Join(c.cfg.Dir, m.name+".log")
		m.clientURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, c.ports[3*i])
		m.peerURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, c.ports[3*i+1])
		m.metricsURL = fmt.Sprintf("http://127.0.0.1:%d", c.ports[3*i+2])
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.mu.Lock()
		err := m.launch("new")
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
	)
	// A member that exits (a port taken) leaves the others without a
	// quorum: stop waiting for them then.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.waitReady(rctx); err != nil {
				mu.Lock()
				errs = errors.Join(errs, err)
				mu.Unlock()
				cancel()
			}
		}()
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
	return c, nil
}

// enableAuth creates the root user and turns authentication on.
func (c *Cluster) enableAuth(ctx context.Context) error {
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("etcdproc: enable auth: %w", err)
	}
	defer cli.Close()
	if _, err := cli.UserAdd(ctx, RootUser, c.cfg.RootPassword); err != nil {
		return fmt.Errorf("etcdproc: add user %s: %w", RootUser, err)
	}
	if _, err := cli.UserGrantRole(ctx, RootUser, "root"); err != nil {
		return fmt.Errorf("etcdproc: grant role root: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcdproc: enable auth: %w", err)
	}
	return nil
}

// Binary returns the path of the etcd binary the members run.
func (c *Cluster) Binary() string { return c.bin }

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

// Leader returns the member that is the raft leader, or nil when none is.
func (c *Cluster) Leader() *Member {
	for _, m := range c.members {
		if m.IsLeader() {
			return m
		}
	}
	return nil
}

// WaitLeader waits until exactly one running, unpaused member leads and
// every other one has a leader; ctx bounds the wait.
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
	for _, m := range c.members {
		if !m.Running() || m.Paused() {
			continue
		}
		ms, err := m.metrics(ctx, "etcd_server_has_leader", "etcd_server_is_leader")
		if err != nil || ms["etcd_server_has_leader"] != 1 {
			return false
		}
		if ms["etcd_server_is_leader"] == 1 {
			leaders++
		}
	}
	return leaders == 1
}

// Metric returns the sum of the metric name (a counter's or a gauge's
// value without labels, or the sum over its series) over the running,
// unpaused members, read from their metrics URLs.
func (c *Cluster) Metric(ctx context.Context, name string) (float64, error) {
	var sum float64
	for _, m := range c.members {
		if !m.Running() || m.Paused() {
			continue
		}
		ms, err := m.metrics(ctx, name)
		if err != nil {
			return 0, err
		}
		sum += ms[name]
	}
	return sum, nil
}

// TLS returns a new copy of the client TLS configuration, or nil without
// TLS.
func (c *Cluster) TLS() *tls.Config {
	if c.certs == nil || c.certs.Client == nil {
		return nil
	}
	return c.certs.Client.Clone()
}

// CAFile returns the path of the cluster's CA certificate, or "" without
// TLS.
func (c *Cluster) CAFile() string {
	if c.certs == nil {
		return ""
	}
	return c.certs.CAFile
}

// ClientConfig returns a client configuration for every member, with the
// cluster's TLS and credentials, a 5 s dial timeout and no logs.
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

// NewClient returns a new client of members (all when none are given).
// The caller closes it.
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

// Close stops every member, followers first (SIGTERM, then SIGKILL after
// 10 s), and removes the temporary directories it made. Closing a closed
// cluster does nothing.
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

// args are the command line of m's etcd, joining as state ("new" or
// "existing").
func (m *Member) args(state string) []string {
	c := m.cluster
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.name+"="+o.peerURL)
	}
	args := []string{
		"--name=" + m.name,
		"--data-dir=" + m.dataDir,
		"--listen-client-urls=" + m.clientURL,
		"--advertise-client-urls=" + m.clientURL,
		"--listen-peer-urls=" + m.peerURL,
		"--initial-advertise-peer-urls=" + m.peerURL,
		"--listen-metrics-urls=" + m.metricsURL,
		"--initial-cluster=" + strings.Join(initial, ","),
		"--initial-cluster-token=" + c.token,
		"--initial-cluster-state=" + state,
		"--heartbeat-interval=" + strconv.Itoa(int(c.cfg.TickInterval/time.Millisecond)),
		"--election-timeout=" + strconv.Itoa(int(c.cfg.ElectionTimeout/time.Millisecond)),
		"--log-level=warn",
	}
	if c.cfg.NoFsync {
		args = append(args, "--unsafe-no-fsync")
	}
	if cs := c.certs; cs != nil {
		args = append(args,
			"--cert-file="+cs.CertFile, "--key-file="+cs.KeyFile, "--trusted-ca-file="+cs.CAFile, "--client-cert-auth",
			"--peer-cert-file="+cs.CertFile, "--peer-key-file="+cs.KeyFile, "--peer-trusted-ca-file="+cs.CAFile, "--peer-client-cert-auth")
	}
	return append(args, c.cfg.Flags...)
}

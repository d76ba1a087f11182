// Package etcdproc runs etcd clusters for tests: one Cluster and one
// Member type whose members' servers a Runner starts. By default each
// member is an etcd server process (built from tools/etcdserver at a
// pinned version, or the binary FENCEKIT_ETCD_BIN names) on free 127.0.0.1
// ports, with its data in a directory of its own; integration/etcdtest
// gives the same Cluster a Runner that starts the servers inside the test
// process instead. Members can be stopped gracefully, killed (SIGKILL),
// paused (SIGSTOP) and resumed (SIGCONT) when they are processes, and
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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
	// UnixSockets serves clients on unix sockets, in a short temporary
	// directory removed by Close, instead of loopback TCP ports. Peers
	// always talk over loopback TCP.
	UnixSockets bool
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
	// Runner starts the members' servers; nil means processes of Binary.
	Runner Runner
	// Binary is the etcd binary the default Runner runs; empty means
	// Built(Version).
	Binary string
	// Version is the server version to run when Binary is empty: "3.5",
	// "3.6" or "3.7"; empty means the FENCEKIT_ETCD_VERSION variable's, or
	// DefaultVersion.
	Version string
	// Flags are more etcd flags for every member process, such as
	// "--bcrypt-cost=4".
	Flags []string
}

// Cluster is a running etcd cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	cfg     Config
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
// builds a binary: with Runner and Binary empty it runs the one Built
// finds, and returns Built's *NotBuiltError (matching ErrNotBuilt, naming
// the build command) at once when there is none. On failure nothing is
// left running.
func StartCluster(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Runner == nil {
		if cfg.Binary == "" {
			if cfg.Binary, err = Built(cfg.Version); err != nil {
				return nil, err
			}
		}
		cfg.Runner = processRunner{bin: cfg.Binary}
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
	cfg.Members = max(cfg.Members, 1)
	cfg.TickInterval, cfg.ElectionTimeout = Timing(cfg.TickInterval, cfg.ElectionTimeout)
	if cfg.TickInterval < time.Millisecond || cfg.ElectionTimeout < 5*cfg.TickInterval {
		return cfg, fmt.Errorf("etcdproc: timing %v/%v: tick below 1ms or election below 5 ticks", cfg.TickInterval, cfg.ElectionTimeout)
	}
	return cfg, nil
}

// Timing returns tick and election with their defaults where they are 0:
// DefaultTickInterval, and DefaultElectionTimeout or 10 ticks, whichever
// is longer.
func Timing(tick, election time.Duration) (time.Duration, time.Duration) {
	if tick == 0 {
		tick = DefaultTickInterval
	}
	if election == 0 {
		election = max(DefaultElectionTimeout, 10*tick)
	}
	return tick, election
}

var clusterSeq atomic.Int64

// startOnce starts cfg's cluster on ports reserved for this attempt.
func startOnce(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	c := &Cluster{cfg: cfg, token: fmt.Sprintf("etcdproc-%d-%d", os.Getpid(), clusterSeq.Add(1))}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := c.prepare(); err != nil {
		return nil, err
	}
	// Launch the members one after the other: a new member asks the peers
	// already serving whether it joined before, and a peer that listens
	// but does not serve yet would keep it waiting a second. Then wait for
	// all of them to be ready at once.
	for _, m := range c.members {
		m.mu.Lock()
		err := m.launch("new")
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
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

// prepare makes the directories, the certificates and the members, on
// ports it reserves.
func (c *Cluster) prepare() error {
	if c.cfg.Dir == "" {
		d, err := c.tempDir("etcdproc-")
		if err != nil {
			return fmt.Errorf("etcdproc: data dir: %w", err)
		}
		c.cfg.Dir = d
	}
	var sockDir string
	if c.cfg.UnixSockets {
		// Socket paths are limited to about 100 bytes: keep them short.
		d, err := c.tempDir("etcdsock")
		if err != nil {
			return fmt.Errorf("etcdproc: socket dir: %w", err)
		}
		sockDir = d
	}
	if err := c.makeCerts(); err != nil {
		return err
	}
	perMember := 3 // client, peer, metrics
	if c.cfg.UnixSockets {
		perMember = 2
	}
	ports, err := ReservePorts(perMember * c.cfg.Members)
	c.ports = ports
	if err != nil {
		return fmt.Errorf("etcdproc: reserve ports: %w", err)
	}
	for i := range c.cfg.Members {
		c.members = append(c.members, c.newMember(i, ports[perMember*i:perMember*(i+1)], sockDir))
	}
	return nil
}

// tempDir makes a temporary directory that Close removes.
func (c *Cluster) tempDir(pattern string) (string, error) {
	d, err := os.MkdirTemp("", pattern)
	if err == nil {
		c.tmpDirs = append(c.tmpDirs, d)
	}
	return d, err
}

// makeCerts sets the cluster's certificates: Config.Certs, or generated
// ones with TLS. Over a unix socket, etcd's client expects the socket's
// file name as the server name: the member certificate names them too.
func (c *Cluster) makeCerts() error {
	if !c.cfg.TLS {
		return nil
	}
	if c.cfg.Certs != nil {
		c.certs = c.cfg.Certs
		return nil
	}
	names := make([]string, c.cfg.Members)
	for i := range names {
		names[i] = sockName(i)
	}
	certs, err := GenCerts(filepath.Join(c.cfg.Dir, "tls"), names...)
	if err != nil {
		return fmt.Errorf("etcdproc: certificates: %w", err)
	}
	c.certs = certs
	return nil
}

// newMember is member i on ports (peer, metrics and, without unix
// sockets, client first), its socket in sockDir with unix sockets.
func (c *Cluster) newMember(i int, ports []int, sockDir string) *Member {
	scheme, sockScheme := "http", "unix"
	if c.cfg.TLS {
		scheme, sockScheme = "https", "unixs"
	}
	m := &Member{name: fmt.Sprintf("m%d", i), cluster: c}
	m.dataDir = filepath.Join(c.cfg.Dir, m.name)
	m.logFile = filepath.Join(c.cfg.Dir, m.name+".log")
	if c.cfg.UnixSockets {
		m.clientURL = sockScheme + "://" + filepath.Join(sockDir, sockName(i))
	} else {
		m.clientURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0])
		ports = ports[1:]
	}
	m.peerURL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0])
	m.metricsURL = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	return m
}

// sockName is the file name of member i's client socket.
func sockName(i int) string { return fmt.Sprintf("m%d.sock", i) }

// waitReady waits until every launched member is ready. A member that
// exits (a port taken) leaves the others without a quorum: it stops
// waiting for them then.
func (c *Cluster) waitReady(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
	)
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
	return errs
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

package etcdproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopTimeout bounds how long Stop waits for a member process to exit
// after SIGTERM before it kills it.
const StopTimeout = 10 * time.Second

// A Runner starts the members' etcd servers: processes by default, or
// servers inside the test process (integration/etcdtest has that one).
type Runner interface {
	// Launch starts the server s describes and returns without waiting
	// for it to be ready.
	Launch(s Spec) (Server, error)
}

// Spec is what a Runner needs to start one member's server.
type Spec struct {
	// Name is the member's name: m0, m1, ...
	Name string
	// ClientURL and PeerURL are the URLs it listens on; a process also
	// serves /metrics and /health on MetricsURL, over plain HTTP.
	ClientURL, PeerURL, MetricsURL string
	// DataDir is its data directory (it exists); LogFile is where a
	// process writes its output.
	DataDir, LogFile string
	// InitialCluster lists every member as name=peerURL, comma-separated.
	InitialCluster string
	// Token is the initial cluster token; State is "new" at the
	// cluster's start and "existing" on a restart.
	Token, State string
	// TickInterval and ElectionTimeout are raft's timing.
	TickInterval, ElectionTimeout time.Duration
	// NoFsync turns fsync off.
	NoFsync bool
	// Certs, when not nil, are the member certificates for clients and
	// peers, both of which must present a certificate the CA signed.
	Certs *Certs
	// Flags are more flags for a process.
	Flags []string
}

// A Server is one run of a member's etcd server, from Launch until it
// exits.
type Server interface {
	// Ready waits until the server serves. When it fails because the
	// server ended, Exited reports true afterwards.
	Ready(ctx context.Context) error
	// Exited reports whether the server has ended.
	Exited() bool
	// Stop stops the server gracefully (a leader hands its leadership
	// over first) and returns once it has ended.
	Stop()
	// Kill stops the server abruptly (a crash) and returns once it has
	// ended.
	Kill()
	// Pause freezes the server (pause true) or continues it.
	Pause(pause bool) error
	// Status reports the raft leadership the server sees.
	Status(ctx context.Context) (Status, error)
	// PID returns the server's process id, or 0 when it is no process.
	PID() int
}

// Status is the raft leadership one member sees.
type Status struct {
	// HasLeader reports whether the member knows a leader.
	HasLeader bool
	// IsLeader reports whether the member is the leader.
	IsLeader bool
	// LeaderID is the leader's member id, or 0 when the server does not
	// say.
	LeaderID uint64
}

// Member is one member of a Cluster: its server while it runs, and its
// name, addresses and data, which stay the same across restarts. Its
// methods are safe for concurrent use.
type Member struct {
	name       string
	clientURL  string
	peerURL    string
	metricsURL string
	dataDir    string
	logFile    string
	cluster    *Cluster

	mu     sync.Mutex // guards srv and paused; held across launch and stop
	srv    Server     // nil while stopped
	paused bool
}

// Name returns the member's name: m0, m1, ...
func (m *Member) Name() string { return m.name }

// ClientURL returns the URL the member serves clients on:
// http://127.0.0.1:port, https://... with TLS, or unix:///path (unixs://
// with TLS) with unix sockets. It stays the same across Restart.
func (m *Member) ClientURL() string { return m.clientURL }

// PeerURL returns the URL the member talks to its peers on.
func (m *Member) PeerURL() string { return m.peerURL }

// MetricsURL returns the base URL of a member process's /metrics and
// /health, plain HTTP even with TLS (a Runner's servers may serve none:
// integration/etcdtest's in-process ones do not).
func (m *Member) MetricsURL() string { return m.metricsURL }

// LogFile returns the file a member process's output goes to.
func (m *Member) LogFile() string { return m.logFile }

// PID returns the member's process id, or 0 while it is stopped or when
// it is no process.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv == nil {
		return 0
	}
	return m.srv.PID()
}

// Running reports whether the member is started (paused or not) and has
// not exited.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv != nil && !m.srv.Exited()
}

// Paused reports whether the member is paused (see Pause).
func (m *Member) Paused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused
}

// serving returns m's server when it runs and is not paused, or nil.
func (m *Member) serving() Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv == nil || m.paused || m.srv.Exited() {
		return nil
	}
	return m.srv
}

// IsLeader reports whether the member runs, is not paused, and is the raft
// leader.
func (m *Member) IsLeader() bool {
	srv := m.serving()
	if srv == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := srv.Status(ctx)
	return err == nil && st.IsLeader
}

// Stop stops the member gracefully (a paused one is continued first; a
// leader hands its leadership to a follower when it can, as etcd does on
// shutdown); a process that does not exit within StopTimeout is killed.
// Its data stays for Restart. Stopping a stopped member does nothing.
// Clients connected to it fail over to the others.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	srv := m.srv
	if srv == nil {
		return
	}
	m.srv = nil
	if m.paused {
		_ = srv.Pause(false)
		m.paused = false
	}
	srv.Stop()
}

// Kill stops the member abruptly and waits until it is gone: a process
// gets SIGKILL (a crash: no leadership hand-over, nothing flushed beyond
// what etcd wrote); a server inside the test process stops as Stop does.
// Its data stays for Restart. Killing a stopped member does nothing.
func (m *Member) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	srv := m.srv
	if srv == nil {
		return
	}
	m.srv, m.paused = nil, false
	srv.Kill()
}

// Pause freezes a member process with SIGSTOP: it keeps its sockets
// (connections are accepted by the kernel) but answers nothing, like a
// frozen machine. It fails when the member is not running, and with the
// Runner's error when its servers cannot pause (integration/etcdtest's
// ErrEmbedded).
func (m *Member) Pause() error { return m.pause(true) }

// Resume continues a paused member (SIGCONT).
func (m *Member) Resume() error { return m.pause(false) }

func (m *Member) pause(pause bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv == nil {
		return fmt.Errorf("etcdproc: %s is not running", m.name)
	}
	if err := m.srv.Pause(pause); err != nil {
		return err
	}
	m.paused = pause
	return nil
}

// Restart starts a stopped member again on the same addresses and data
// and returns once it serves; ctx bounds the wait. Restarting a running
// member does nothing. It returns ErrClosed after Cluster.Close.
//
// A port of the member may have been taken for a moment since it stopped
// (a search for free ports binds and closes random ones); Restart then
// tries again, up to 5 times.
func (m *Member) Restart(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := m.restartOnce(ctx)
		if err == nil || attempt == 5 || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (m *Member) restartOnce(ctx context.Context) error {
	m.mu.Lock()
	if m.srv != nil {
		m.mu.Unlock()
		return nil
	}
	err := m.launch("existing")
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := m.waitReady(ctx); err != nil {
		m.mu.Lock()
		if m.srv != nil && m.srv.Exited() {
			m.srv, m.paused = nil, false // ended: may start again
		}
		m.mu.Unlock()
		return err
	}
	return nil
}

// launch starts m's server, joining as state ("new" or "existing"). m.mu
// is held.
func (m *Member) launch(state string) error {
	c := m.cluster
	if c.closed.Load() {
		return ErrClosed
	}
	if err := os.MkdirAll(m.dataDir, 0o700); err != nil {
		return fmt.Errorf("etcdproc: %s: %w", m.name, err)
	}
	initial := make([]string, len(c.members))
	for i, o := range c.members {
		initial[i] = o.name + "=" + o.peerURL
	}
	srv, err := c.cfg.Runner.Launch(Spec{
		Name: m.name, ClientURL: m.clientURL, PeerURL: m.peerURL, MetricsURL: m.metricsURL,
		DataDir: m.dataDir, LogFile: m.logFile,
		InitialCluster: strings.Join(initial, ","), Token: c.token, State: state,
		TickInterval: c.cfg.TickInterval, ElectionTimeout: c.cfg.ElectionTimeout,
		NoFsync: c.cfg.NoFsync, Certs: c.certs, Flags: c.cfg.Flags,
	})
	if err != nil {
		return fmt.Errorf("etcdproc: %w", err)
	}
	m.srv = srv
	return nil
}

// waitReady waits until m's server is ready.
func (m *Member) waitReady(ctx context.Context) error {
	m.mu.Lock()
	srv := m.srv
	m.mu.Unlock()
	if srv == nil {
		return fmt.Errorf("etcdproc: %s stopped while starting", m.name)
	}
	if err := srv.Ready(ctx); err != nil {
		return fmt.Errorf("etcdproc: %w", err)
	}
	return nil
}

package etcdproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopTimeout bounds how long Stop waits for a member to exit after
// SIGTERM before it kills it.
const StopTimeout = 10 * time.Second

// Member is one etcd process of a Cluster (or the place of one, while it is
// stopped). Its methods are safe for concurrent use.
type Member struct {
	name       string
	clientURL  string
	peerURL    string
	metricsURL string
	dataDir    string
	logFile    string
	cluster    *Cluster

	mu     sync.Mutex // guards proc and paused; held across start and stop
	proc   *process   // nil while stopped
	paused bool
}

// process is a started etcd process.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	err  error         // Wait's, set before done is closed
}

// Name returns the member's name: m0, m1, ...
func (m *Member) Name() string { return m.name }

// ClientURL returns the URL the member serves clients on; it stays the
// same across restarts.
func (m *Member) ClientURL() string { return m.clientURL }

// PeerURL returns the URL the member talks to its peers on.
func (m *Member) PeerURL() string { return m.peerURL }

// MetricsURL returns the base URL of the member's /metrics and /health,
// plain HTTP even with TLS.
func (m *Member) MetricsURL() string { return m.metricsURL }

// LogFile returns the file the member's output goes to.
func (m *Member) LogFile() string { return m.logFile }

// PID returns the member's process id, or 0 while it is stopped.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.cmd.Process.Pid
}

// Running reports whether the member's process is started (paused or
// not) and has not exited.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return false
	}
	select {
	case <-m.proc.done:
		return false
	default:
		return true
	}
}

// Paused reports whether the member is paused (see Pause).
func (m *Member) Paused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused
}

// IsLeader reports whether the member runs, is not paused, and reports
// itself the raft leader.
func (m *Member) IsLeader() bool {
	if !m.Running() || m.Paused() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ms, err := m.metrics(ctx, "etcd_server_is_leader")
	return err == nil && ms["etcd_server_is_leader"] == 1
}

// Stop stops the member gracefully (SIGCONT when paused, then SIGTERM: a
// leader hands its leadership over first), killing it after StopTimeout.
// Its data stays for Restart. Stopping a stopped member does nothing.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil {
		return
	}
	m.proc = nil
	if m.paused {
		_ = p.cmd.Process.Signal(sigCont)
		m.paused = false
	}
	_ = p.cmd.Process.Signal(sigTerm)
	select {
	case <-p.done:
	case <-time.After(StopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill kills the member's process (SIGKILL) and waits until it is gone:
// a crash. Its data stays for Restart. Killing a stopped member does
// nothing.
func (m *Member) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil {
		return
	}
	m.proc, m.paused = nil, false
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Pause stops the member's process with SIGSTOP: it keeps its sockets
// (connections are accepted by the kernel) but answers nothing, like a
// frozen machine. It returns an error when the member is not running.
func (m *Member) Pause() error { return m.signalPause(true) }

// Resume continues a paused member (SIGCONT).
func (m *Member) Resume() error { return m.signalPause(false) }

func (m *Member) signalPause(pause bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return fmt.Errorf("etcdproc: %s is not running", m.name)
	}
	sig := sigCont
	if pause {
		sig = sigStop
	}
	if err := m.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("etcdproc: signal %s: %w", m.name, err)
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
	if m.proc != nil {
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
		if p := m.proc; p != nil {
			select {
			case <-p.done:
				m.proc, m.paused = nil, false // exited: may start again
			default:
			}
		}
		m.mu.Unlock()
		return err
	}
	return nil
}

// launch starts m's process. m.mu is held.
func (m *Member) launch(state string) error {
	if m.cluster.closed.Load() {
		return ErrClosed
	}
	if err := os.MkdirAll(m.dataDir, 0o700); err != nil {
		return fmt.Errorf("etcdproc: %s: %w", m.name, err)
	}
	log, err := os.OpenFile(m.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("etcdproc: %s: %w", m.name, err)
	}
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	args := m.args(state)
	go func() {
		// The thread that starts the process lives as long as it: on
		// Linux the kernel kills the process when that thread exits.
		lockThread()
		defer log.Close()
		cmd := exec.Command(m.cluster.bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.Env = environ()
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.cmd = cmd
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("etcdproc: start %s: %w", m.name, err)
	}
	m.proc = p
	return nil
}

// environ is this process's environment without etcd's ETCD_ variables,
// which would override or conflict with the flags.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitReady waits until m's /health reports healthy, or its process exits,
// or ctx ends.
func (m *Member) waitReady(ctx context.Context) error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("etcdproc: %s stopped while starting", m.name)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if m.healthy(ctx) {
			return nil
		}
		select {
		case <-p.done:
			return m.exitError(p)
		case <-ctx.Done():
			return fmt.Errorf("etcdproc: %s not ready: %w (log: %s)", m.name, ctx.Err(), m.logTail())
		case <-t.C:
		}
	}
}

// exitError describes the early exit of p, m's process; it matches
// syscall.EADDRINUSE when a port was taken.
func (m *Member) exitError(p *process) error {
	tail := m.logTail()
	err := fmt.Errorf("etcdproc: %s exited while starting: %v: %s", m.name, p.err, tail)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%w: %w", err, syscall.EADDRINUSE)
	}
	return err
}

// logTail returns the end of m's log file, without the lines of its
// /health checks (a start that waits for a leader writes two every 10 ms,
// which would hide why there is none).
func (m *Member) logTail() string {
	b, err := os.ReadFile(m.logFile)
	if err != nil {
		return err.Error()
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "/health") {
			keep = append(keep, line)
		}
	}
	tail := strings.Join(keep, "\n")
	if len(tail) > 3000 {
		tail = tail[len(tail)-3000:]
	}
	return tail
}

// httpClient reads metrics and health; a paused member must not block it,
// and no idle connection outlives a request (tests check for leaks).
var httpClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func (m *Member) healthy(ctx context.Context) bool {
	body, err := m.get(ctx, "/health")
	return err == nil && strings.Contains(body, `"health":"true"`)
}

func (m *Member) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.metricsURL+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metrics reads the named metrics from m's /metrics: each one's value
// summed over its series.
func (m *Member) metrics(ctx context.Context, names ...string) (map[string]float64, error) {
	body, err := m.get(ctx, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("etcdproc: metrics of %s: %w", m.name, err)
	}
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range names {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
			if len(fields) == 0 {
				continue
			}
			if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
				out[name] += v
			}
		}
	}
	return out, sc.Err()
}

// reserved holds the ports handed to clusters of this process that are
// still open.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// ReservePorts returns n free loopback TCP ports, none handed to a
// cluster of this process that is still open (integration/etcdtest's
// in-process clusters reserve from the same set). They are released before
// etcd binds them; StartCluster tries again when another process takes
// one in between.
func ReservePorts(n int) ([]int, error) {
	reserved.Lock()
	defer reserved.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, p := range ports {
				delete(reserved.ports, p)
			}
			return nil, err
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		if reserved.ports[p] {
			continue
		}
		reserved.ports[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// ReleasePorts makes ports available to ReservePorts again.
func ReleasePorts(ports []int) {
	reserved.Lock()
	defer reserved.Unlock()
	for _, p := range ports {
		delete(reserved.ports, p)
	}
}

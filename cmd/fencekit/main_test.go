package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease/admin"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// bin is the fencekit binary the tests drive, built by TestMain.
var bin string

func TestMain(m *testing.M) {
	if mode := os.Getenv("FK_CHILD"); mode != "" {
		os.Exit(child(mode))
	}
	dir, err := os.MkdirTemp("", "fencekit-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "fencekit")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(settleM{m}, append(testkit.EtcdLeaks, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))...)
}

// settleM runs the tests, then waits for the connections of stopped
// embedded etcd members to end before goleak looks: peers of a 3-member
// cluster talk HTTP through cmux, and those connections outlast Close by
// up to their read deadline.
type settleM struct{ m *testing.M }

func (s settleM) Run() int {
	code := s.m.Run()
	etcdtest.WaitServerConns(10 * time.Second)
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("net/http.(*conn).serve")) && !bytes.Contains(buf[:n], []byte("net/http.(*persistConn)")) {
			break
		}
	}
	return code
}

// child is the command that "fencekit run" runs in the tests: the test
// binary itself, in one of these modes, appending lines of
// "<event> <unix nanoseconds> <FENCING_TOKEN>" to $FK_OUT.
//
//	record: "start", sleep $FK_SLEEP, "end", exit $FK_CODE
//	loop:   "start", then "alive" every 10 ms; on SIGTERM "term" and exit 143
//	trap:   "ready"; on SIGINT, SIGTERM or SIGHUP the signal's name, exit 7
func child(mode string) int {
	out, err := os.OpenFile(os.Getenv("FK_OUT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 99
	}
	defer out.Close()
	note := func(ev string) {
		fmt.Fprintf(out, "%s %d %s\n", ev, time.Now().UnixNano(), os.Getenv("FENCING_TOKEN"))
	}
	switch mode {
	case "record":
		note("start")
		d, _ := time.ParseDuration(os.Getenv("FK_SLEEP"))
		time.Sleep(d)
		note("end")
		code, _ := strconv.Atoi(os.Getenv("FK_CODE"))
		return code
	case "loop":
		sigc := make(chan os.Signal, 1)
		signal.Notify(sigc, syscall.SIGTERM)
		note("start")
		t := time.NewTicker(10 * time.Millisecond)
		for {
			select {
			case <-t.C:
				note("alive")
			case <-sigc:
				note("term")
				return 143
			}
		}
	case "stubborn": // loop, ignoring SIGTERM
		signal.Ignore(syscall.SIGTERM)
		note("start")
		for {
			time.Sleep(10 * time.Millisecond)
			note("alive")
		}
	case "spawn":
		return spawn(note)
	case "trap":
		sigc := make(chan os.Signal, 1)
		signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		note("ready")
		s := <-sigc
		note(strings.ToUpper(strings.TrimPrefix(sigName(s), "SIG")))
		return 7
	}
	return 98
}

// spawn starts the test binary again in mode $FK_LEFT and exits without
// waiting for it, leaving it behind: a background child ("cmd &" in sh).
// With FK_SETSID=1 it goes through an intermediate process that calls
// setsid, starts it and exits: a double-forked daemon, in a session and
// process group of its own, whose parent is gone. Its pid is written to
// $FK_OUT.pid.
func spawn(note func(string)) int {
	if os.Getenv("FK_SETSID") == "1" {
		mid := exec.Command(os.Args[0])
		mid.Env = append(os.Environ(), "FK_SETSID=0")
		mid.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := mid.Run(); err != nil {
			return 97
		}
		note("spawned")
		return 0
	}
	left := exec.Command(os.Args[0])
	left.Env = append(os.Environ(), "FK_CHILD="+os.Getenv("FK_LEFT"))
	if err := left.Start(); err != nil {
		return 97
	}
	if err := os.WriteFile(os.Getenv("FK_OUT")+".pid", []byte(strconv.Itoa(left.Process.Pid)), 0o600); err != nil {
		return 97
	}
	// Exit once it runs (and, if stubborn, ignores SIGTERM).
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(os.Getenv("FK_OUT")); strings.Contains(string(b), "alive ") {
			break
		}
	}
	note("spawned")
	return 0
}

func sigName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// event is one line a child wrote.
type event struct {
	name  string
	at    time.Time
	token string
}

func readEvents(t *testing.T, path string) []event {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var evs []event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue // a line being written
		}
		ns, err := strconv.ParseInt(fs[1], 10, 64)
		require.NoError(t, err)
		ev := event{name: fs[0], at: time.Unix(0, ns)}
		if len(fs) > 2 {
			ev.token = fs[2]
		}
		evs = append(evs, ev)
	}
	return evs
}

func waitEvent(t *testing.T, path, name string, within time.Duration) event {
	t.Helper()
	var got event
	require.Eventually(t, func() bool {
		for _, ev := range readEvents(t, path) {
			if ev.name == name {
				got = ev
				return true
			}
		}
		return false
	}, within, 5*time.Millisecond, "no %q event in %s", name, path)
	return got
}

// syncBuffer is a bytes.Buffer safe for a process writing and a test
// reading.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// proc is a running fencekit.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	code           int
}

// start starts fencekit with args and the environment env (added to the
// test's). It is killed on cleanup if still running.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for p to exit and returns its exit code.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		t.Fatalf("fencekit %v still running after %v; stderr:\n%s", p.cmd.Args[1:], within, p.stderr.String())
		return -1
	}
}

// fk runs fencekit to completion and returns its exit code and output.
func fk(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait(t, 30*time.Second)
	return code, p.stdout.String(), p.stderr.String()
}

// endpointsEnv points fencekit at the cluster through ETCDCTL_ENDPOINTS.
func endpointsEnv(cl *etcdtest.Cluster) []string {
	return []string{"ETCDCTL_ENDPOINTS=" + strings.Join(cl.Endpoints(), ",")}
}

func childEnv(mode, out string, extra ...string) []string {
	return append([]string{"FK_CHILD=" + mode, "FK_OUT=" + out}, extra...)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newLocks(t *testing.T, cl *etcdtest.Cluster, opts ...lease.Option) *lease.Client {
	t.Helper()
	c, err := lease.New(etcdtest.Client(t, cl), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// newOps returns the operator's tools over the default prefix of cl.
func newOps(t *testing.T, cl *etcdtest.Cluster) *admin.Admin {
	t.Helper()
	ops, err := admin.New(etcdtest.Client(t, cl), lease.DefaultPrefix)
	require.NoError(t, err)
	return ops
}

// oneLine asserts that s is exactly one line mentioning want.
func requireOneLine(t *testing.T, s, want string) {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, "\n"), "want one line, got %q", s)
	require.Contains(t, s, want)
}

func clientOpts() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithPrefix()} }

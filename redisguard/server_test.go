package redisguard_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/redis/go-redis/v9"
)

// server is a redis-server process of a test's own, on a free loopback
// port, without automatic persistence (no snapshots unless a test runs
// SAVE, no AOF): a restart forgets every key saved by no SAVE.
type server struct {
	t     testing.TB
	bin   string
	port  int
	dir   string // the working directory, kept across restarts
	extra []string
	cmd   *exec.Cmd
}

// startServer starts a redis-server with extra arguments and stops it
// when t ends. It skips t when there is no redis-server binary, or fails
// t when FENCEKIT_REQUIRE_DB is "1".
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin = "/usr/bin/redis-server"
		if _, err := os.Stat(bin); err != nil {
			testkit.Need(t, "redis-server", "not on PATH nor in /usr/bin; install it (apt-get install redis-server) to run these tests, which start servers of their own")
		}
	}
	s := &server{t: t, bin: bin, port: freePort(t), dir: t.TempDir(), extra: extra}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server and waits until it answers PING.
func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", ""}, s.extra...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	cli := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer cli.Close()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cli.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			s.stop()
			s.t.Fatalf("redis-server on %s did not answer: %v", s.addr(), err)
		}
	}
}

// stop kills the server by its PID and waits for it to exit.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Kill(); err != nil {
		s.t.Errorf("kill redis-server %d: %v", s.cmd.Process.Pid, err)
	}
	_ = s.cmd.Wait()
	s.cmd = nil
}

// restart kills the server and starts it again on the same port and in
// the same directory: it keeps nothing, unless a snapshot was saved
// there (SAVE), which it loads.
func (s *server) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

func (s *server) String() string { return fmt.Sprintf("redis-server on %s", s.addr()) }

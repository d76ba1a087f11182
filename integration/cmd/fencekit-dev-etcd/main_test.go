package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// bin is the fencekit-dev-etcd binary the tests run, built by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencekit-dev-etcd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "fencekit-dev-etcd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// lockedBuffer is a bytes.Buffer a process writes while a test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func unusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestServesLocks starts the command, takes and releases a lease through
// it, stops it with SIGTERM (exit 0), and starts it again on the same
// data directory, where the revision goes on.
func TestServesLocks(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	var revs []int64
	for range 2 {
		client, peer := unusedAddr(t), unusedAddr(t)
		var stderr lockedBuffer
		cmd := exec.Command(bin, "--data-dir", data, "--listen", client, "--listen-peer", peer)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(stderr.String(), "serving on") {
			if time.Now().After(deadline) {
				t.Fatalf("not serving after 30s; stderr:\n%s", stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		revs = append(revs, acquireOnce(t, client))
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			exited <- err
			if err != nil {
				t.Fatalf("exit: %v; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("still running 20s after SIGTERM; stderr:\n%s", stderr.String())
		}
	}
	if revs[1] <= revs[0] {
		t.Errorf("fence after restart %d, want above %d (the data directory kept)", revs[1], revs[0])
	}
}

// acquireOnce takes and releases lease "demo" at endpoint and returns its
// fencing token's revision.
func acquireOnce(t *testing.T, endpoint string) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	locks, err := lease.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := locks.Acquire(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	rev := l.Fence().Revision
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestUsage: bad flags and addresses exit 64 with one line on stderr and
// start nothing; --help exits 0.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "2379"},
		{"--listen-peer", ":"},
		{"--data-dir", ""},
		{"--bogus"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if code != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", args, code, err, exitUsage)
		}
		if n := strings.Count(stderr.String(), "\n"); n != 1 {
			t.Errorf("%v: stderr %q, want one line", args, stderr.String())
		}
	}
	out, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(string(out), "--data-dir") {
		t.Errorf("--help does not name --data-dir:\n%s", out)
	}
}

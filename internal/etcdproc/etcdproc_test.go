package etcdproc_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// binary returns the binary scripts/test.sh built before the tests, or
// fails t at once, saying how to build it.
func binary(t *testing.T) string {
	t.Helper()
	bin, err := etcdproc.Built("")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, cfg etcdproc.Config) *etcdproc.Cluster {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Binary = binary(t)
	c, err := etcdproc.StartCluster(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func client(t *testing.T, c *etcdproc.Cluster, ms ...*etcdproc.Member) *clientv3.Client {
	t.Helper()
	cli, err := c.NewClient(ms...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// alive reports whether a process with pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// A three-member cluster survives the SIGKILL of its leader, elects
// another, takes the killed member back on its data, and leaves no process
// behind when closed.
func TestKillLeaderRestartClose(t *testing.T) {
	c, err := etcdproc.StartCluster(ctxT(t), etcdproc.Config{Dir: t.TempDir(), Members: 3, NoFsync: true, Binary: binary(t)})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, m := range c.Members() {
		pids = append(pids, m.PID())
	}
	cli := client(t, c)
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	old := c.Leader()
	if old == nil {
		t.Fatal("no leader")
	}
	old.Kill()
	if old.Running() {
		t.Fatal("killed member still running")
	}
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if l := c.Leader(); l == nil || l == old {
		t.Fatalf("leader after the kill: %v", l)
	}
	if err := old.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := client(t, c, old).Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("restarted member reads %v, %v", resp, err)
	}
	pids = append(pids, old.PID())
	_ = c.Close()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d still runs after Close", pid)
		}
	}
}

// A paused member answers nothing; the others elect a leader; resumed, it
// serves again.
func TestPauseResume(t *testing.T) {
	c := start(t, etcdproc.Config{Members: 3, NoFsync: true})
	ctx := ctxT(t)
	l := c.Leader()
	if err := l.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if nl := c.Leader(); nl == nil || nl == l {
		t.Fatalf("leader while %s is paused: %v", l.Name(), nl)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := client(t, c, l).Get(short, "k"); err == nil {
		t.Error("a paused member answered")
	}
	if err := l.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := client(t, c, l).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
}

// TLS and authentication: the client configuration carries both; the
// metrics stay readable over plain HTTP.
func TestTLSAuthMetrics(t *testing.T) {
	c := start(t, etcdproc.Config{TLS: true, RootPassword: "pw", NoFsync: true, Flags: []string{"--bcrypt-cost=4"}})
	ctx := ctxT(t)
	cli := client(t, c)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Metric(ctx, "etcd_mvcc_put_total")
	if err != nil || w < 1 {
		t.Fatalf("put metric %v, %v", w, err)
	}
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	anon, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Put(ctx, "k", "v"); err == nil {
		t.Error("a client without credentials wrote")
	}
}

// FENCEKIT_ETCD_BIN names the binary to run instead of building one.
func TestBinaryFromEnv(t *testing.T) {
	t.Setenv(etcdproc.EnvBinary, os.Args[0])
	bin, err := etcdproc.Binary(context.Background(), "")
	if err != nil || bin != os.Args[0] {
		t.Fatalf("Binary = %q, %v", bin, err)
	}
	if bin, err := etcdproc.Built(""); err != nil || bin != os.Args[0] {
		t.Fatalf("Built = %q, %v", bin, err)
	}
	t.Setenv(etcdproc.EnvBinary, "")
	if _, err := etcdproc.Binary(context.Background(), "3.4"); err == nil {
		t.Error("version 3.4 accepted")
	}
	if _, err := etcdproc.Built("3.4"); err == nil || errors.Is(err, etcdproc.ErrNotBuilt) {
		t.Errorf("Built(3.4) = %v, want an error about the version", err)
	}
}

// With an empty server cache, nothing builds: Built, StartCluster and Start
// fail at once with a *NotBuiltError that names the build command, so that
// no test's deadline spans a build.
func TestNotBuiltFailsFast(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // os.UserCacheDir's on Linux; elsewhere HOME's
	t.Setenv("HOME", t.TempDir())
	t.Setenv(etcdproc.EnvBinary, "")
	for _, v := range etcdproc.Versions {
		_, err := etcdproc.Built(v)
		var nb *etcdproc.NotBuiltError
		if !errors.As(err, &nb) || !errors.Is(err, etcdproc.ErrNotBuilt) {
			t.Fatalf("Built(%s) with an empty cache: %v, want a *NotBuiltError matching ErrNotBuilt", v, err)
		}
		release, rerr := etcdproc.Release(v)
		if rerr != nil || !strings.HasPrefix(release, v+".") || nb.Release != release || nb.Version != v {
			t.Errorf("Release(%s) = %q, %v; error's %+v", v, release, rerr, nb)
		}
		for _, s := range []string{etcdproc.BuildCommand + " " + v, "scripts/test.sh", etcdproc.EnvBinary, nb.Root} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
		if _, err := os.Stat(filepath.Join(nb.Root, "tools", "etcdserver", "main.go")); err != nil {
			t.Errorf("error's root %s has no tools/etcdserver: %v", nb.Root, err)
		}
	}
	start := time.Now()
	if _, err := etcdproc.StartCluster(ctxT(t), etcdproc.Config{Dir: t.TempDir()}); !errors.Is(err, etcdproc.ErrNotBuilt) {
		t.Errorf("StartCluster: %v, want ErrNotBuilt", err)
	}
	if _, err := etcdproc.Start(etcdproc.Config{Dir: t.TempDir(), Version: "3.5"}); !errors.Is(err, etcdproc.ErrNotBuilt) {
		t.Errorf("Start: %v, want ErrNotBuilt", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failing took %v: something built", took)
	}
}

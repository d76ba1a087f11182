package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// roundTrip puts key=val through cli and reads it back.
func roundTrip(t *testing.T, cli *clientv3.Client, key, val string) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	if _, err := cli.Put(ctx, key, val); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
		t.Fatalf("get %s = %v, want %q", key, resp.Kvs, val)
	}
}

func TestStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []etcdtest.Option
		members int
		scheme  string
	}{
		{"one member", nil, 1, "http://"},
		{"three members", []etcdtest.Option{etcdtest.WithMembers(3), etcdtest.WithoutFsync()}, 3, "http://"},
		{"unix sockets", []etcdtest.Option{etcdtest.WithUnixSockets()}, 1, "unix://"},
		{"slow timing", []etcdtest.Option{etcdtest.WithTiming(100*time.Millisecond, time.Second)}, 1, "http://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := etcdtest.Start(t, tc.opts...)
			if got := len(c.Members()); got != tc.members {
				t.Errorf("%d members, want %d", got, tc.members)
			}
			for _, ep := range c.Endpoints() {
				if !strings.HasPrefix(ep, tc.scheme) {
					t.Errorf("endpoint %q, want scheme %s", ep, tc.scheme)
				}
			}
			if c.Leader() == nil {
				t.Error("no leader after Start")
			}
			roundTrip(t, c.Client(t), "k", "v")
			roundTrip(t, c.ClientThrough(t, c.Proxies(t)...), "through", "proxies")
			// Each member serves on its own.
			for _, m := range c.Members() {
				if !m.Running() {
					t.Errorf("%s not running", m.Name())
				}
				roundTrip(t, c.Client(t, m), "k-"+m.Name(), m.ClientURL())
			}
		})
	}
}

func TestTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []etcdtest.Option
	}{
		{"tcp", []etcdtest.Option{etcdtest.WithTLS(), etcdtest.WithMembers(3), etcdtest.WithoutFsync()}},
		{"unix", []etcdtest.Option{etcdtest.WithTLS(), etcdtest.WithUnixSockets()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := etcdtest.Start(t, tc.opts...)
			for _, ep := range c.Endpoints() {
				if !strings.HasPrefix(ep, "https://") && !strings.HasPrefix(ep, "unixs://") {
					t.Errorf("endpoint %q is not TLS", ep)
				}
			}
			if c.TLS() == nil || c.CAFile() == "" {
				t.Fatal("TLS() or CAFile() empty on a TLS cluster")
			}
			if _, err := os.Stat(c.CAFile()); err != nil {
				t.Errorf("CA file: %v", err)
			}
			roundTrip(t, c.Client(t), "k", "v")
			roundTrip(t, c.ClientThrough(t, c.Proxies(t)...), "through", "proxy")

			// Without the client certificate the server refuses.
			cfg := c.ClientConfig()
			cfg.TLS.Certificates = nil
			assertRefused(t, cfg)
			// Without TLS at all too.
			cfg = c.ClientConfig()
			cfg.TLS = nil
			assertRefused(t, cfg)
		})
	}
}

// assertRefused checks that a client with cfg cannot put.
func assertRefused(t *testing.T, cfg clientv3.Config) {
	t.Helper()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return // refused at dial
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := cli.Put(ctx, "intruder", "x"); err == nil {
		t.Error("put succeeded without the client's TLS settings")
	}
}

func TestAuth(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testAuth(t, rpctypes.ErrUserEmpty) })
	// The client certificate's name is no etcd user.
	t.Run("tls", func(t *testing.T) { testAuth(t, rpctypes.ErrPermissionDenied, etcdtest.WithTLS()) })
}

func testAuth(t *testing.T, anonErr error, opts ...etcdtest.Option) {
	c := etcdtest.Start(t, append(opts, etcdtest.WithAuth("s3cret"))...)
	cfg := c.ClientConfig()
	if cfg.Username != etcdtest.RootUser || cfg.Password != "s3cret" {
		t.Errorf("ClientConfig credentials %q/%q, want %s/s3cret", cfg.Username, cfg.Password, etcdtest.RootUser)
	}
	roundTrip(t, c.Client(t), "k", "v")

	ctx := ctxFor(t, 10*time.Second)
	anon := c.ClientConfig()
	anon.Username, anon.Password = "", ""
	cli, err := clientv3.New(anon)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "anonymous"); !errors.Is(err, anonErr) {
		t.Errorf("put without credentials: %v, want %v", err, anonErr)
	}
	wrong := c.ClientConfig()
	wrong.Password = "guess"
	if cli, err := clientv3.New(wrong); err == nil {
		defer cli.Close()
		_, err = cli.Put(ctx, "k", "guessed")
		if !errors.Is(err, rpctypes.ErrAuthFailed) {
			t.Errorf("put with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
		}
	} else if !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("client with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}
}

func TestMemberCrashKeepsData(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	c := etcdtest.Start(t, etcdtest.WithMembers(3))
	cli := c.Client(t)
	if _, err := cli.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []faults.Fault{
		faults.KillLeader(c.FaultMembers()...),
		faults.CrashMember(c.Members()[0]),
	} {
		if err := f.Inject(ctx); err != nil {
			t.Fatalf("%s: %v", f.Kind(), err)
		}
		var down *etcdtest.Member
		for _, m := range c.Members() {
			if !m.Running() {
				down = m
			}
		}
		if down == nil {
			t.Fatalf("%s: every member still runs", f.Kind())
		}
		if err := c.WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
		if c.Leader() == down || c.Leader() == nil {
			t.Fatalf("%s: leader %v", f.Kind(), c.Leader())
		}
		// The others go on: a write while it is down.
		key := "during-" + f.Kind()
		if _, err := cli.Put(ctx, key, "2"); err != nil {
			t.Fatalf("put while %s is down: %v", down.Name(), err)
		}
		if err := f.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		if !down.Running() {
			t.Fatalf("%s not restarted", down.Name())
		}
		// The restarted member has the old data and catches up on the
		// new: read from it alone, without a quorum read.
		own := c.Client(t, down)
		for _, k := range []string{"before", key} {
			waitFor(t, fmt.Sprintf("%s on restarted %s", k, down.Name()), func() bool {
				resp, err := own.Get(ctx, k, clientv3.WithSerializable())
				return err == nil && len(resp.Kvs) == 1
			})
		}
	}
}

func TestOneMemberRestartKeepsData(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []etcdtest.Option
	}{
		{"tcp", nil},
		{"unix sockets and TLS", []etcdtest.Option{etcdtest.WithUnixSockets(), etcdtest.WithTLS(), etcdtest.WithAuth("pw")}},
	} {
		t.Run(tc.name, func(t *testing.T) { testOneMemberRestart(t, tc.opts...) })
	}
}

func testOneMemberRestart(t *testing.T, opts ...etcdtest.Option) {
	ctx := ctxFor(t, 30*time.Second)
	c := etcdtest.Start(t, opts...)
	cli := c.Client(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	m := c.Members()[0]
	m.Stop()
	m.Stop() // no-op
	if m.Running() || m.IsLeader() || c.Leader() != nil {
		t.Fatal("stopped member still counted")
	}
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(ctx); err != nil { // no-op
		t.Fatal(err)
	}
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Client(t).Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Errorf("after restart k = %v, want v", resp.Kvs)
	}
}

func TestParallelClusters(t *testing.T) {
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			opts := []etcdtest.Option{etcdtest.WithoutFsync()}
			if i%2 == 1 {
				opts = append(opts, etcdtest.WithMembers(3))
			}
			c := etcdtest.Start(t, opts...)
			cli := c.Client(t)
			// Each cluster is its own: nobody else's key is here.
			ctx := ctxFor(t, 10*time.Second)
			resp, err := cli.Get(ctx, "owner")
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 0 {
				t.Fatalf("a new cluster holds %s", resp.Kvs[0].Value)
			}
			roundTrip(t, cli, "owner", t.Name())
		})
	}
}

func TestInvalidConfig(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	for _, tc := range []struct {
		field string
		cfg   etcdtest.Config
	}{
		{"Members", etcdtest.Config{Members: -1}},
		{"Members", etcdtest.Config{Members: etcdtest.MaxMembers + 1}},
		{"TickInterval", etcdtest.Config{TickInterval: -time.Millisecond}},
		{"TickInterval", etcdtest.Config{TickInterval: 1500 * time.Microsecond}},
		{"ElectionTimeout", etcdtest.Config{TickInterval: 100 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond}},
		{"ElectionTimeout", etcdtest.Config{ElectionTimeout: time.Minute}},
	} {
		c, err := etcdtest.StartCluster(ctx, tc.cfg)
		var ce *etcdtest.ConfigError
		if c != nil || !errors.As(err, &ce) || !errors.Is(err, etcdtest.ErrInvalidConfig) {
			t.Errorf("%+v: StartCluster = %v, %v; want nil and a *ConfigError", tc.cfg, c, err)
			continue
		}
		if ce.Field != tc.field {
			t.Errorf("%+v: error names %s, want %s", tc.cfg, ce.Field, tc.field)
		}
	}
}

func TestStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := etcdtest.StartCluster(ctx, etcdtest.Config{})
	if c != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("StartCluster with a cancelled ctx = %v, %v; want nil, context.Canceled", c, err)
	}
}

func TestClosed(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	dir := t.TempDir()
	c, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: dir, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.NewClient(); !errors.Is(err, etcdtest.ErrClosed) {
		t.Errorf("NewClient after Close = %v, want ErrClosed", err)
	}
	if err := c.Members()[0].Restart(ctx); !errors.Is(err, etcdtest.ErrClosed) {
		t.Errorf("Restart after Close = %v, want ErrClosed", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Close removed Config.Dir: %v", err)
	}
}

// TestNoLeak runs last among the sequential tests: no cluster of another
// test is open, so every goroutine and file a cluster used must be gone
// after Close.
func TestNoLeak(t *testing.T) {
	before := openFDs(t)
	ctx := ctxFor(t, time.Minute)
	for _, cfg := range []etcdtest.Config{
		{Members: 3, NoFsync: true},
		{UnixSockets: true, TLS: true, RootPassword: "pw"},
	} {
		c, err := etcdtest.StartCluster(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := c.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		if f := faults.KillLeader(c.FaultMembers()...); cfg.Members == 3 {
			if err := faults.Apply(ctx, f, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		cli.Close()
		c.Close()
	}
	goleak.VerifyNone(t)
	if after := openFDs(t); after > before {
		t.Errorf("%d open files after the clusters closed, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A client behind its own proxies loses etcd in a partition; the others
// do not.
func TestClientThroughPartition(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithMembers(3), etcdtest.WithoutFsync())
	proxies := c.Proxies(t)
	behind, direct := c.ClientThrough(t, proxies...), c.Client(t)
	roundTrip(t, behind, "k", "before")

	ctx := ctxFor(t, 30*time.Second)
	cut := faults.Partition(proxies...)
	if err := cut.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := behind.Put(short, "k", "during")
	cancel()
	if err == nil {
		t.Error("a put through partitioned proxies succeeded")
	}
	roundTrip(t, direct, "other", "during")
	if err := cut.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client back after the partition", func() bool {
		_, err := behind.Put(ctx, "k", "after")
		return err == nil
	})
}

func TestNoProxies(t *testing.T) {
	c := etcdtest.Start(t)
	if cli, err := c.NewClientThrough(); !errors.Is(err, etcdtest.ErrNoProxies) || cli != nil {
		t.Errorf("NewClientThrough() = %v, %v; want nil, ErrNoProxies", cli, err)
	}
}

// In-process members are no processes and serve no metrics (etcd's are
// process-wide): Metric fails rather than sum one member's values thrice.
func TestInProcessHasNoMetrics(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithMembers(3), etcdtest.WithoutFsync())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := c.Metric(ctx, "etcd_server_has_leader"); err == nil {
		t.Errorf("Metric of an in-process cluster = %v, want an error", got)
	}
	for _, m := range c.Members() {
		if m.PID() != 0 {
			t.Errorf("in-process member %s has PID %d", m.Name(), m.PID())
		}
	}
}

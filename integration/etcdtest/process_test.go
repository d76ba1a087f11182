package etcdtest_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/internal/etcdproc"
)

// etcdBinary returns the etcd binary the repository's harness built
// (FENCEKIT_ETCD_VERSION, default 3.7; scripts/test.sh builds it before
// the tests) or FENCEKIT_ETCD_BIN; it fails t at once when there is none.
func etcdBinary(t *testing.T) string {
	t.Helper()
	bin, err := etcdproc.Built("")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// WithBinary runs the members as processes: a killed leader is replaced,
// a paused member neither answers nor blocks the others, faults.KillLeader
// works on them, and Close leaves no process behind.
func TestWithBinary(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithBinary(etcdBinary(t)), etcdtest.WithMembers(3), etcdtest.WithoutFsync(),
		etcdtest.WithTLS(), etcdtest.WithAuth("pw"))
	cli := c.Client(t)
	roundTrip(t, cli, "k", "v1")
	var pids []int
	for _, m := range c.Members() {
		pids = append(pids, m.PID())
	}
	ctx := ctxFor(t, 60*time.Second)

	old := c.Leader()
	old.Kill()
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, cli, "k", "v2")
	if err := old.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	pids = append(pids, old.PID())

	p := c.Members()[0]
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c.Client(t, c.Members()[1], c.Members()[2]), "k", "v3")
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}

	f := faults.KillLeader(c.FaultMembers()...)
	if err := f.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, cli, "k", "v4")

	_ = c.Close()
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d runs after Close", pid)
		}
	}
	if err := c.Members()[0].Restart(ctx); !errors.Is(err, etcdtest.ErrClosed) {
		t.Errorf("Restart after Close: %v", err)
	}
}

// Pause needs a process.
func TestPauseEmbedded(t *testing.T) {
	c := etcdtest.Start(t)
	if err := c.Members()[0].Pause(); !errors.Is(err, etcdtest.ErrEmbedded) {
		t.Errorf("Pause of an in-process member: %v", err)
	}
}

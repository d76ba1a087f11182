//go:build unix

package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	faults.ServeWorker(map[string]faults.WorkerFunc{"ticker": ticker})
	code := m.Run()
	if code == 0 {
		// Crashed and restarted members leave server connections that end
		// a few seconds after Close; wait for them, then check for leaks.
		etcdtest.WaitServerConns(10 * time.Second)
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ticker prints a line every 10 ms until it is stopped.
func ticker(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("stopped")
			return nil
		case <-t.C:
			fmt.Println("tick")
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) ticks() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), "tick")
}

func TestPause(t *testing.T) {
	var out lockedBuffer
	w, err := faults.StartWorker("ticker", nil, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first ticks", func() bool { return out.ticks() > 2 })

	p := faults.Pause(w)
	if got := p.Kind(); got != faults.KindPause {
		t.Errorf("Kind = %q, want %q", got, faults.KindPause)
	}
	if err := p.Inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // output in flight
	before := out.ticks()
	time.Sleep(300 * time.Millisecond)
	if got := out.ticks(); got != before {
		t.Errorf("a stopped worker ticked %d times", got-before)
	}
	if err := p.Heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ticks after resume", func() bool { return out.ticks() > before+2 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := p.Inject(context.Background()); !errors.Is(err, faults.ErrNoTarget) {
		t.Errorf("Inject after exit = %v, want ErrNoTarget", err)
	}
}

func TestStopPausedWorker(t *testing.T) {
	w, err := faults.StartWorker("ticker", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := faults.Pause(w).Inject(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Errorf("Stop of a paused worker: %v", err)
	}
}

func TestRevokeHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	admin := etcdtest.Client(t, c)
	locks, err := lease.New(etcdtest.Client(t, c), lease.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	a, err := locks.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := locks.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	rev := faults.RevokeHolder(admin, faults.LockPrefix(lease.DefaultPrefix, "a"))
	if err := faults.Apply(ctx, rev, 0); err != nil {
		t.Fatal(err)
	}
	// It names both records: they hang on the same session lease.
	taken := rev.(faults.Taker).Taken()
	slices.Sort(taken)
	if want := []int64{a.Fence().Revision, b.Fence().Revision}; !slices.Equal(taken, want) {
		t.Errorf("Taken() = %v, want %v", taken, want)
	}
	for _, l := range []*lease.Lease{a, b} {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still held after its lease was revoked", l.Name())
		}
		if err := l.Err(); !errors.Is(err, lease.ErrLost) {
			t.Errorf("%s ended with %v, want ErrLost", l.Name(), err)
		}
	}
	if err := rev.Inject(ctx); !errors.Is(err, faults.ErrNoTarget) {
		t.Errorf("second Inject = %v, want ErrNoTarget", err)
	}
}

func TestKillLeaderAndCrashMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.StartCluster(t, 3)
	members := make([]faults.Member, len(c.Members))
	for i, m := range c.Members {
		members[i] = m
	}
	old := c.Leader()
	kill := faults.KillLeader(members...)
	if err := kill.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Members[old].Running() {
		t.Fatalf("leader m%d still running", old)
	}
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if now := c.Leader(); now == old || now < 0 {
		t.Errorf("leader after kill = %d, was %d", now, old)
	}
	if err := kill.Inject(ctx); err == nil {
		t.Error("a second Inject before Heal succeeded")
	}
	if err := kill.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.Members[old].Running() {
		t.Errorf("m%d not restarted by Heal", old)
	}

	crash := faults.CrashMember(c.Members[old])
	if err := faults.Apply(ctx, crash, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !c.Members[old].Running() {
		t.Errorf("m%d not restarted", old)
	}
	// The cluster still serves.
	cli := etcdtest.Client(t, c)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Errorf("put after faults: %v", err)
	}
}

func TestNetworkFaultsWithoutProxies(t *testing.T) {
	for _, f := range []faults.Fault{faults.Partition(), faults.LostReplies(), faults.SlowLink(time.Second)} {
		if err := f.Inject(context.Background()); !errors.Is(err, faults.ErrNoTarget) {
			t.Errorf("%s with no proxies: Inject = %v, want ErrNoTarget", f.Kind(), err)
		}
		if err := f.Heal(context.Background()); err != nil {
			t.Errorf("%s: Heal = %v", f.Kind(), err)
		}
	}
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

func TestRestartMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	cli := etcdtest.Client(t, c)
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	r := faults.RestartMember(c.Members[0])
	if got := r.Kind(); got != faults.KindMemberRestart {
		t.Errorf("Kind = %q, want %q", got, faults.KindMemberRestart)
	}
	if err := faults.Apply(ctx, r, 0); err != nil {
		t.Fatal(err)
	}
	if !c.Members[0].Running() {
		t.Fatal("member not running after the restart")
	}
	// The data survived: it came back from the data dir.
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
		t.Errorf("after the restart k = %v, want \"before\"", resp.Kvs)
	}
}

func TestSwitchMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.StartCluster(t, 3)
	var proxies []*faults.Proxy
	var eps []string
	for _, ep := range c.Endpoints() {
		p, err := faults.NewProxy(ep)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		proxies = append(proxies, p)
		eps = append(eps, p.URL())
	}
	cli := etcdtest.Client(t, c, eps...)
	if _, err := cli.Put(ctx, "k", "0"); err != nil {
		t.Fatal(err)
	}
	sw := faults.SwitchMember(proxies[2], proxies[:2]...)
	if err := sw.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	// Requests that go to a cut member time out; retried, they reach the
	// one left.
	done := false
	for i := 0; i < 50 && !done; i++ {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := cli.Put(rctx, "k", "during")
		cancel()
		done = err == nil
	}
	if !done {
		t.Error("no write went through the member left")
	}
	if err := sw.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sw.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	_ = sw.Heal(ctx)
	if err := faults.SwitchMember(nil).Inject(ctx); !errors.Is(err, faults.ErrNoTarget) {
		t.Errorf("SwitchMember(nil): Inject = %v, want ErrNoTarget", err)
	}
}

func TestCompactedWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	admin := etcdtest.Client(t, c)
	p, err := faults.NewProxy(c.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	locks, err := lease.New(etcdtest.Client(t, c, p.URL()), lease.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	l, err := locks.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	f := faults.CompactedWatch(admin, faults.LockPrefix(lease.DefaultPrefix, "a"), p)
	if err := f.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	if taken := f.(faults.Taker).Taken(); !slices.Equal(taken, []int64{l.Fence().Revision}) {
		t.Errorf("Taken() = %v, want the holder's record %d", taken, l.Fence().Revision)
	}
	// The record is gone, and the history behind the holder's watch.
	resp, err := admin.Get(ctx, faults.LockPrefix(lease.DefaultPrefix, "a"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("records left: %d", len(resp.Kvs))
	}
	if _, err := admin.Get(ctx, "x", clientv3.WithRev(l.Fence().Revision)); err == nil {
		t.Error("history before the fault still readable: not compacted")
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), lease.ErrLost) {
			t.Errorf("lease ended with %v, want ErrLost", l.Err())
		}
	case <-time.After(4 * time.Second):
		t.Error("holder did not learn of its deleted record after the compaction (4 s)")
	}
	if err := f.Inject(ctx); !errors.Is(err, faults.ErrNoTarget) {
		t.Errorf("Inject with no holder = %v, want ErrNoTarget", err)
	}
	// The links are back.
	if _, err := locks.Acquire(ctx, "b"); err != nil {
		t.Errorf("acquire after the fault: %v", err)
	}
}

// The process-level member faults: a frozen leader is replaced and runs
// again after Heal; a killed one is replaced and restarted on Heal; a
// frozen or killed follower leaves the cluster serving.
func TestSignalFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := etcdtest.StartCluster(t, 3)
	members := make([]faults.ProcessMember, len(c.Members))
	for i, m := range c.Members {
		members[i] = m
	}
	cli := etcdtest.Client(t, c)
	for _, f := range []faults.Fault{faults.SigstopLeader(members...), faults.SigkillLeader(members...)} {
		old := c.Leader()
		if err := f.Inject(ctx); err != nil {
			t.Fatalf("%s: %v", f.Kind(), err)
		}
		if f.Kind() == faults.KindLeaderSigstop && !c.Members[old].Paused() {
			t.Errorf("%s: m%d not paused", f.Kind(), old)
		}
		if f.Kind() == faults.KindLeaderSigkill && c.Members[old].Running() {
			t.Errorf("%s: m%d still running", f.Kind(), old)
		}
		if err := f.Inject(ctx); err == nil {
			t.Errorf("%s: a second Inject before Heal succeeded", f.Kind())
		}
		if err := c.WaitLeader(ctx); err != nil {
			t.Fatalf("%s: %v", f.Kind(), err)
		}
		if now := c.Leader(); now == old || now < 0 {
			t.Errorf("%s: leader = m%d, was m%d", f.Kind(), now, old)
		}
		if err := f.Heal(ctx); err != nil {
			t.Fatalf("%s: %v", f.Kind(), err)
		}
		if m := c.Members[old]; !m.Running() || m.Paused() {
			t.Errorf("%s: m%d running=%v paused=%v after Heal", f.Kind(), old, m.Running(), m.Paused())
		}
		if err := c.WaitLeader(ctx); err != nil {
			t.Fatalf("%s: after heal: %v", f.Kind(), err)
		}
	}
	follower := c.Members[(c.Leader()+1)%len(c.Members)]
	for _, f := range []faults.Fault{faults.SigstopMember(follower), faults.SigkillMember(follower)} {
		if err := f.Inject(ctx); err != nil {
			t.Fatalf("%s: %v", f.Kind(), err)
		}
		// A request sent to the frozen member hangs: each try has
		// its own deadline, and the client's balancer sends the next
		// to another member.
		var err error
		for range 5 {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = cli.Put(pctx, "k", f.Kind())
			cancel()
			if err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("%s: put: %v", f.Kind(), err)
		}
		if err := f.Heal(ctx); err != nil {
			t.Fatalf("%s: %v", f.Kind(), err)
		}
		if !follower.Running() || follower.Paused() {
			t.Errorf("%s: %s not back after Heal", f.Kind(), follower.Name)
		}
	}
	if err := faults.SigstopLeader().Inject(ctx); !errors.Is(err, faults.ErrNoTarget) {
		t.Errorf("SigstopLeader of no members: %v, want ErrNoTarget", err)
	}
}

// scratchRefusingKV fails every write of faults.ScratchKey, as a leader
// failure in the middle of CompactedWatch's injection would.
type scratchRefusingKV struct{ clientv3.KV }

func (kv scratchRefusingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if key == faults.ScratchKey {
		return nil, errors.New("etcdserver: request timed out, possibly due to previous leader failure")
	}
	return kv.KV.Put(ctx, key, val, opts...)
}

// A CompactedWatch whose compaction fails after it deleted the holder's
// record has taken the lock away all the same: Inject says so
// (ErrPartial), and the holder's links stay cut until Heal.
func TestCompactedWatchPartial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := etcdtest.Start(t)
	admin := etcdtest.Client(t, c)
	p, err := faults.NewProxy(c.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	holder := etcdtest.Client(t, c, p.URL())
	locks, err := lease.New(holder, lease.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	if _, err := locks.Acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	refusing := etcdtest.Client(t, c)
	refusing.KV = scratchRefusingKV{refusing.KV}
	f := faults.CompactedWatch(refusing, faults.LockPrefix(lease.DefaultPrefix, "a"), p)
	err = f.Inject(ctx)
	if !errors.Is(err, faults.ErrPartial) {
		t.Fatalf("Inject = %v, want an error matching ErrPartial", err)
	}
	resp, err := admin.Get(ctx, faults.LockPrefix(lease.DefaultPrefix, "a"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("records left after a partial injection: %d", len(resp.Kvs))
	}
	// The holder's link is still cut.
	gctx, gcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, gerr := holder.Get(gctx, "x")
	gcancel()
	if gerr == nil {
		t.Error("a read through the holder's link went through before Heal")
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Get(ctx, "x"); err != nil {
		t.Errorf("a read through the holder's link after Heal: %v", err)
	}
}

// A worker is alone in its process group, so that a Pause cannot become
// a SIGHUP from the kernel when the test binary's group is orphaned (see
// StartWorker).
func TestWorkerOwnProcessGroup(t *testing.T) {
	w, err := faults.StartWorker("ticker", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	pgid, err := syscall.Getpgid(w.PID())
	if err != nil {
		t.Fatal(err)
	}
	if pgid != w.PID() {
		t.Errorf("worker %d is in process group %d (this process's: %d), want a group of its own", w.PID(), pgid, syscall.Getpgrp())
	}
}

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return exe
}

// TestRunOneAfterAnother: two runs on one lock run their children one after
// the other, the second with a higher fencing token; on one member and on
// three, each run talking to a different member.
func TestRunOneAfterAnother(t *testing.T) {
	for _, members := range []int{1, 3} {
		t.Run(strings.Repeat("m", members), func(t *testing.T) {
			cl := etcdtest.StartCluster(t, members)
			dir := t.TempDir()
			var ps []*proc
			outs := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
			for i, out := range outs {
				ep := cl.Members[(2*i)%members].ClientURL
				ps = append(ps, start(t, childEnv("record", out, "FK_SLEEP=400ms"),
					"run", "--endpoints", ep, "--ttl", "2s", "nightly", "--", testExe(t)))
			}
			for _, p := range ps {
				require.Equal(t, 0, p.wait(t, 30*time.Second), p.stderr.String())
			}
			a, b := readEvents(t, outs[0]), readEvents(t, outs[1])
			require.Len(t, a, 2)
			require.Len(t, b, 2)
			if b[0].at.Before(a[0].at) {
				a, b = b, a
			}
			assert.True(t, b[0].at.After(a[1].at), "second child started %v before the first ended", a[1].at.Sub(b[0].at))
			ta, err := fence.Parse(a[0].token)
			require.NoError(t, err)
			tb, err := fence.Parse(b[0].token)
			require.NoError(t, err)
			assert.Equal(t, "nightly", ta.Lock)
			assert.Greater(t, tb.Revision, ta.Revision)
			requireFree(t, cl.Endpoints()[0], "nightly")
		})
	}
}

// requireFree asserts through "fencekit status --json" that nobody holds
// or waits for lock.
func requireFree(t *testing.T, endpoint, lock string) {
	t.Helper()
	code, out, errOut := fk(t, nil, "status", "--endpoints", endpoint, "--json", lock)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"holder": null`)
	assert.Contains(t, out, `"waiters": []`)
}

// TestRunPartitionKillsChildFirst: a run cut off from etcd has its child
// killed before another run's child starts.
func TestRunPartitionKillsChildFirst(t *testing.T) {
	cl := etcdtest.Start(t)
	px, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { px.Close() })
	dir := t.TempDir()
	outA, outB := filepath.Join(dir, "a"), filepath.Join(dir, "b")

	a := start(t, childEnv("loop", outA), "run", "--endpoints", px.Addr(), "--ttl", "2s", "--grace", "300ms", "backup", "--", testExe(t))
	waitEvent(t, outA, "start", 20*time.Second)
	b := start(t, childEnv("record", outB, "FK_SLEEP=10ms"), "run", "--endpoints", cl.Members[0].ClientURL, "--ttl", "2s", "backup", "--", testExe(t))
	require.Eventually(t, func() bool {
		_, out, _ := fk(t, nil, "status", "--endpoints", cl.Members[0].ClientURL, "--json", "backup")
		return strings.Count(out, `"fence"`) == 2
	}, 20*time.Second, 50*time.Millisecond, "second run never queued")

	paused := time.Now()
	px.Pause()
	require.Equal(t, ExitLost, a.wait(t, 30*time.Second), a.stderr.String())
	assert.Contains(t, a.stderr.String(), "lost")
	assert.Regexp(t, "no renewal confirmed|validity deadline", a.stderr.String())
	require.Equal(t, 0, b.wait(t, 30*time.Second), b.stderr.String())

	evA := readEvents(t, outA)
	last := evA[len(evA)-1]
	assert.Equal(t, "term", last.name)
	startB := waitEvent(t, outB, "start", time.Second)
	assert.True(t, last.at.Before(startB.at), "first child's last write %v after the second child started", last.at.Sub(startB.at))
	t.Logf("partition at 0; first child's last write at %v; second child started at %v (gap %v)",
		last.at.Sub(paused).Round(time.Millisecond), startB.at.Sub(paused).Round(time.Millisecond), startB.at.Sub(last.at).Round(time.Millisecond))
	ta, _ := fence.Parse(evA[0].token)
	tb, _ := fence.Parse(startB.token)
	assert.Greater(t, tb.Revision, ta.Revision)
}

// TestRunForwardsSignals: INT, TERM and HUP sent to fencekit reach the
// child, whose exit code fencekit returns; the lock is released.
func TestRunForwardsSignals(t *testing.T) {
	cl := etcdtest.Start(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		out := filepath.Join(t.TempDir(), "out")
		p := start(t, append(endpointsEnv(cl), childEnv("trap", out)...), "run", "sig", "--", testExe(t))
		waitEvent(t, out, "ready", 20*time.Second)
		require.NoError(t, p.cmd.Process.Signal(sig))
		require.Equal(t, 7, p.wait(t, 10*time.Second), p.stderr.String())
		waitEvent(t, out, strings.TrimPrefix(sigName(sig), "SIG"), time.Second)
		requireFree(t, cl.Members[0].ClientURL, "sig")
	}
}

// TestRunSignalWhileWaiting: a signal while waiting gives up the wait and
// leaves no record.
func TestRunSignalWhileWaiting(t *testing.T) {
	cl := etcdtest.Start(t)
	locks := newLocks(t, cl)
	l, err := locks.Acquire(ctxT(t, 10*time.Second), "busy")
	require.NoError(t, err)
	p := start(t, endpointsEnv(cl), "run", "--progress", "100ms", "busy", "--", "true")
	require.Eventually(t, func() bool {
		st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "busy")
		return err == nil && len(st.Waiters) == 1
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.Contains(p.stderr.String(), "waiter 1 of 1 (holder: fence "+strconv.FormatInt(l.Fence().Revision, 10))
	}, 10*time.Second, 20*time.Millisecond, "no progress line: %q", p.stderr.String())
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 130, p.wait(t, 10*time.Second))
	assert.Contains(t, p.stderr.String(), "not acquired")
	st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "busy")
	require.NoError(t, err)
	assert.Empty(t, st.Waiters)
	require.NoError(t, l.Release(ctxT(t, 5*time.Second)))
}

// TestRunLeaseDeletedKillsChild: when the record is deleted behind run's
// back, the child gets SIGTERM at once and run exits ExitLost.
func TestRunLeaseDeletedKillsChild(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(endpointsEnv(cl), childEnv("loop", out)...), "run", "jobs", "--", testExe(t))
	waitEvent(t, out, "start", 20*time.Second)
	resp, err := cli.Get(ctxT(t, 5*time.Second), lease.DefaultPrefix+"jobs/", clientOpts()...)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	deleted := time.Now()
	_, err = cli.Delete(ctxT(t, 5*time.Second), string(resp.Kvs[0].Key))
	require.NoError(t, err)
	require.Equal(t, ExitLost, p.wait(t, 10*time.Second), p.stderr.String())
	term := waitEvent(t, out, "term", time.Second)
	t.Logf("child got SIGTERM %v after the record was deleted", term.at.Sub(deleted).Round(time.Millisecond))
	assert.Contains(t, p.stderr.String(), "lock record deleted")
}

// TestRunStoppedChildKilledFirst: while fencekit run is stopped (SIGSTOP),
// its watchdog kills the child before another run's child starts.
func TestRunStoppedChildKilledFirst(t *testing.T) {
	cl := etcdtest.Start(t)
	ep := cl.Members[0].ClientURL
	dir := t.TempDir()
	outA, outB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	a := start(t, childEnv("loop", outA), "run", "--endpoints", ep, "--ttl", "2s", "--grace", "300ms", "cron", "--", testExe(t))
	waitEvent(t, outA, "start", 20*time.Second)
	b := start(t, childEnv("record", outB, "FK_SLEEP=10ms"), "run", "--endpoints", ep, "--ttl", "2s", "cron", "--", testExe(t))
	require.Eventually(t, func() bool {
		_, out, _ := fk(t, nil, "status", "--endpoints", ep, "--json", "cron")
		return strings.Count(out, `"fence"`) == 2
	}, 20*time.Second, 50*time.Millisecond, "second run never queued")

	stopped := time.Now()
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	require.Equal(t, 0, b.wait(t, 30*time.Second), b.stderr.String())
	startB := waitEvent(t, outB, "start", time.Second)
	evA := readEvents(t, outA)
	last := evA[len(evA)-1]
	assert.Equal(t, "term", last.name)
	assert.True(t, last.at.Before(startB.at), "stopped run's child wrote %v after the second child started", last.at.Sub(startB.at))
	t.Logf("SIGSTOP at 0; first child's last write at %v; second child started at %v (gap %v)",
		last.at.Sub(stopped).Round(time.Millisecond), startB.at.Sub(stopped).Round(time.Millisecond), startB.at.Sub(last.at).Round(time.Millisecond))

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	assert.Equal(t, ExitLost, a.wait(t, 20*time.Second))
	assert.Contains(t, a.stderr.String(), "fencekit run (watchdog)")
}

// TestRunKilledChildKilled: when fencekit run is killed outright, its
// watchdog still kills the child by the lease's deadline.
func TestRunKilledChildKilled(t *testing.T) {
	cl := etcdtest.Start(t)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(endpointsEnv(cl), childEnv("loop", out)...), "run", "--ttl", "2s", "--grace", "300ms", "solo", "--", testExe(t))
	waitEvent(t, out, "start", 20*time.Second)
	killed := time.Now()
	require.NoError(t, p.cmd.Process.Kill())
	p.wait(t, 5*time.Second)
	term := waitEvent(t, out, "term", 5*time.Second)
	assert.Less(t, term.at.Sub(killed), 2*time.Second, "child outlived the lease's TTL")
}

// TestRunMismatchIsUsage: a lock that a Go client holds as a semaphore is
// a usage error for "fencekit run" (64), not a connection error (69) a
// script would retry for ever; with --try it is held (75), as --try does
// not look at what holds the lock. The command does not start.
func TestRunMismatchIsUsage(t *testing.T) {
	cl := etcdtest.Start(t)
	sem, err := newLocks(t, cl).Semaphore("sem", 2)
	require.NoError(t, err)
	p, err := sem.Acquire(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	defer p.Release(ctxT(t, 5*time.Second))
	out := filepath.Join(t.TempDir(), "events")
	for _, c := range []struct {
		flags []string
		code  int
		says  string
	}{
		{nil, ExitUsage, "another kind or size"},
		{[]string{"--wait", "5s"}, ExitUsage, "another kind or size"},
		{[]string{"--try"}, ExitNotAcquired, "is held"},
	} {
		args := append(append([]string{"run", "--endpoints", cl.Endpoints()[0]}, c.flags...), "sem", "--", testExe(t))
		code, _, errOut := fk(t, childEnv("record", out), args...)
		assert.Equal(t, c.code, code, "%v: %s", args, errOut)
		assert.Contains(t, errOut, c.says)
	}
	assert.NoFileExists(t, out, "the command ran")
}

// TestRunLeftoversStopBeforeRelease: a command that exits leaving a
// process running, a background child in its process group or a
// double-forked daemon in a session of its own, does not take the lock's
// protection away from it: run stops it (SIGTERM, then SIGKILL after
// --grace for one that ignores SIGTERM) and releases the lease only once
// it is gone, so nothing of the command runs beside the next holder.
func TestRunLeftoversStopBeforeRelease(t *testing.T) {
	for _, c := range []struct {
		name, setsid, left string
	}{
		{"background child", "0", "loop"},
		{"background child ignoring SIGTERM", "0", "stubborn"},
		{"double-forked daemon", "1", "loop"},
		{"double-forked daemon ignoring SIGTERM", "1", "stubborn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := etcdtest.Start(t)
			out := filepath.Join(t.TempDir(), "events")
			const grace = 300 * time.Millisecond
			p := start(t, childEnv("spawn", out, "FK_LEFT="+c.left, "FK_SETSID="+c.setsid),
				"run", "--endpoints", cl.Endpoints()[0], "--grace", grace.String(), "job", "--", testExe(t))
			code := p.wait(t, 30*time.Second)
			exited := time.Now()
			pidText, err := os.ReadFile(out + ".pid")
			require.NoError(t, err, p.stderr.String())
			pid, err := strconv.Atoi(string(pidText))
			require.NoError(t, err)
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			assert.Equal(t, 0, code, p.stderr.String())
			assert.Contains(t, p.stderr.String(), "left 1 process(es) (pid "+string(pidText)+") running")

			// Gone when run returned (it may linger a moment as a zombie
			// until init reaps it).
			require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 2*time.Second, 10*time.Millisecond,
				"the leftover still runs after run released the lease")
			var last, spawned time.Time
			termed := false
			for _, ev := range readEvents(t, out) {
				switch ev.name {
				case "alive", "term":
					last = ev.at
					termed = termed || ev.name == "term"
				case "spawned":
					spawned = ev.at
				}
			}
			require.False(t, last.IsZero(), "the leftover never ran")
			assert.True(t, last.Before(exited), "the leftover wrote %v after run exited", last.Sub(exited))
			require.False(t, spawned.IsZero(), "the command did not finish spawning")
			if c.left == "stubborn" {
				assert.GreaterOrEqual(t, last.Sub(spawned), grace-50*time.Millisecond, "killed before --grace ran out")
			} else {
				assert.True(t, termed, "not stopped by SIGTERM")
			}
			n := len(readEvents(t, out))
			time.Sleep(100 * time.Millisecond)
			assert.Len(t, readEvents(t, out), n, "the leftover still writes")
			requireFree(t, cl.Endpoints()[0], "job")
		})
	}
}

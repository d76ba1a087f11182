package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestElectLeader: elect runs its command while leading, with the term's
// FENCING_TOKEN; leader prints it (text and JSON) while it leads and exits
// 1 once it resigned; nothing is left behind.
func TestElectLeader(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(append([]string{}, env...), childEnv("trap", out)...), "elect", "--ttl", "2s", "scheduler", "pod-a", "--", testExe(t))
	ev := waitEvent(t, out, "ready", 20*time.Second)
	tok, err := fence.Parse(ev.token)
	require.NoError(t, err, "FENCING_TOKEN %q", ev.token)
	assert.Equal(t, "scheduler", tok.Lock)

	code, stdout, errOut := fk(t, env, "leader", "scheduler")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "fence "+strconv.FormatInt(tok.Revision, 10), strings.Join(strings.Fields(stdout)[:2], " "))
	assert.Contains(t, stdout, `value "pod-a"`)
	code, stdout, errOut = fk(t, env, "leader", "--json", "scheduler")
	require.Equal(t, 0, code, errOut)
	var j leaderJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &j))
	assert.Equal(t, leaderJSON{Election: "scheduler", Leader: true, Fence: tok.Revision, FencingToken: tok.String(), Since: j.Since, Value: "pod-a"}, j)
	assert.False(t, j.Since.IsZero(), "since published")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 7, p.wait(t, 10*time.Second), p.stderr.String())
	code, stdout, errOut = fk(t, env, "leader", "scheduler")
	assert.Equal(t, ExitRefused, code, errOut)
	assert.Empty(t, stdout)
	requireOneLine(t, errOut, `election "scheduler" has no leader`)
	all, err := newOps(t, cl).InspectAll(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	assert.Empty(t, all, "resigned: nothing left behind")
}

// TestObserveFailover: five candidates campaign one after the other; each
// leader in turn is stopped (SIGTERM to its elect, which forwards it and
// resigns). observe --json sees every leader, in campaign order, with
// rising fences, then no leader; SIGINT ends it with 0.
func TestObserveFailover(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	obs := start(t, env, "observe", "--json", "failover")
	dir := t.TempDir()
	var cands []*proc
	var outs []string
	for i := range 5 {
		out := filepath.Join(dir, strconv.Itoa(i))
		outs = append(outs, out)
		cands = append(cands, start(t, append(append([]string{}, env...), childEnv("trap", out)...),
			"elect", "--ttl", "2s", "--progress", "0", "failover", "c"+strconv.Itoa(i), "--", testExe(t)))
		// Campaign order is queue order: wait for this one's record.
		require.Eventually(t, func() bool {
			st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "failover")
			return err == nil && st.Holder != nil && len(st.Waiters) == i
		}, 20*time.Second, 20*time.Millisecond)
	}
	for i, c := range cands {
		waitEvent(t, outs[i], "ready", 20*time.Second)
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 7, c.wait(t, 10*time.Second), c.stderr.String())
	}
	var seen []leaderJSON
	require.Eventually(t, func() bool {
		seen = distinctLeaders(t, obs.stdout.String())
		return len(seen) > 0 && !seen[len(seen)-1].Leader && len(seen) >= 6
	}, 10*time.Second, 20*time.Millisecond, "observe printed:\n%s", obs.stdout.String())
	require.NoError(t, obs.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, obs.wait(t, 10*time.Second), obs.stderr.String())

	if !seen[0].Leader {
		seen = seen[1:] // nobody led when observe started
	}
	require.Len(t, seen, 6, "%+v", seen)
	for i, l := range seen[:5] {
		assert.Equal(t, "c"+strconv.Itoa(i), l.Value, "leader %d", i)
		assert.False(t, l.Gap)
		if i > 0 {
			assert.Greater(t, l.Fence, seen[i-1].Fence)
		}
	}
	assert.False(t, seen[5].Leader, "no leader at the end")
}

// distinctLeaders parses observe --json output and drops lines that only
// repeat the leader before them (a published value or start time).
func distinctLeaders(t *testing.T, out string) []leaderJSON {
	t.Helper()
	var ls []leaderJSON
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l leaderJSON
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		if n := len(ls); n > 0 && ls[n-1].Fence == l.Fence && ls[n-1].Value == l.Value {
			continue
		}
		if n := len(ls); n > 0 && ls[n-1].Fence == l.Fence {
			ls[n-1] = l
			continue
		}
		ls = append(ls, l)
	}
	return ls
}

// TestElectLost: deleting the leader's record kills its command and
// elect exits 79, saying the term was lost.
func TestElectLost(t *testing.T) {
	cl := etcdtest.Start(t)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(endpointsEnv(cl), childEnv("loop", out)...), "elect", "--ttl", "2s", "sched", "--", testExe(t))
	waitEvent(t, out, "start", 20*time.Second)
	st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "sched")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	_, err = etcdtest.Client(t, cl).Delete(ctxT(t, 5*time.Second), st.Holder.Key)
	require.NoError(t, err)
	require.Equal(t, ExitLost, p.wait(t, 10*time.Second), p.stderr.String())
	waitEvent(t, out, "term", time.Second)
	assert.Contains(t, p.stderr.String(), `term on "sched" lost`)
}

// TestElectUsage: bad input exits 64 with one line and writes nothing;
// an unreachable etcd exits 69 within --dial-timeout.
func TestElectUsage(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	unreachable := unusedAddr(t)
	for _, tc := range []struct {
		args    []string
		code    int
		oneLine string
	}{
		{[]string{"elect", "x", "true"}, ExitUsage, "want NAME [VALUE] -- COMMAND"},
		{[]string{"elect", "x", "a", "b", "--", "true"}, ExitUsage, `unexpected argument "b"`},
		{[]string{"elect", "x", "--"}, ExitUsage, "no COMMAND after --"},
		{[]string{"elect", "--", "true"}, ExitUsage, "want NAME"},
		{[]string{"elect", "a/b", "--", "true"}, ExitUsage, "invalid lock name"},
		{[]string{"elect", "x", strings.Repeat("v", 4097), "--", "true"}, ExitUsage, "VALUE is 4097 bytes"},
		{[]string{"elect", "--ttl", "0s", "x", "--", "true"}, ExitUsage, "--ttl 0s"},
		{[]string{"elect", "-n", "2", "x", "--", "true"}, ExitUsage, "-n"},
		{[]string{"observe"}, ExitUsage, "want exactly one NAME"},
		{[]string{"observe", "a/b"}, ExitUsage, "invalid lock name"},
		{[]string{"leader", "x", "y"}, ExitUsage, "want exactly one NAME"},
		{[]string{"leader", "--bogus", "x"}, ExitUsage, "-bogus"},
		{[]string{"elect", "--endpoints", unreachable, "--dial-timeout", "300ms", "x", "--", "true"}, ExitConn, "did not answer within 300ms"},
		{[]string{"observe", "--endpoints", unreachable, "--dial-timeout", "300ms", "x"}, ExitConn, "did not answer within 300ms"},
		{[]string{"leader", "--endpoints", unreachable, "--dial-timeout", "300ms", "x"}, ExitConn, "did not answer within 300ms"},
	} {
		t.Run(strings.Join(tc.args, " ")[:min(40, len(strings.Join(tc.args, " ")))], func(t *testing.T) {
			begin := time.Now()
			code, _, errOut := fk(t, env, tc.args...)
			assert.Equal(t, tc.code, code, errOut)
			requireOneLine(t, errOut, tc.oneLine)
			if tc.code == ExitConn {
				assert.Less(t, time.Since(begin), 5*time.Second)
			}
		})
	}
	all, err := newOps(t, cl).InspectAll(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	assert.Empty(t, all, "nothing written")
}

// TestElectStoppedChildKilled: while fencekit elect is stopped (SIGSTOP),
// its watchdog kills the leader's command by the term's deadline, and
// says so as elect's.
func TestElectStoppedChildKilled(t *testing.T) {
	cl := etcdtest.Start(t)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(endpointsEnv(cl), childEnv("loop", out)...), "elect", "--ttl", "2s", "--grace", "300ms", "solo", "--", testExe(t))
	waitEvent(t, out, "start", 20*time.Second)
	stopped := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	term := waitEvent(t, out, "term", 5*time.Second)
	assert.Less(t, term.at.Sub(stopped), 2*time.Second, "command outlived the term's TTL")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	assert.Equal(t, ExitLost, p.wait(t, 20*time.Second), p.stderr.String())
	assert.Contains(t, p.stderr.String(), "fencekit elect (watchdog)")
}

// TestTransferElect: "transfer --to-value" asks the leader run by elect to
// hand over to the chosen candidate, passing over the one queued ahead of
// it: the leader's command gets SIGTERM, elect exits with its code once it
// exits, and the chosen candidate's command starts with a higher term.
// A transfer to a value nobody waiting published, or naming a fence that
// does not lead, is refused (exit 1) and asks nothing.
func TestTransferElect(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	dir := t.TempDir()
	elect := func(value string) (*proc, string) {
		out := filepath.Join(dir, value)
		return start(t, append(append([]string{}, env...), childEnv("loop", out)...), "elect", "--ttl", "2s", "sched", value, "--", testExe(t)), out
	}
	a, outA := elect("pod-a")
	evA := waitEvent(t, outA, "start", 20*time.Second)
	b, outB := elect("pod-b")
	waitQueue(t, cl, "sched", 2)
	c, outC := elect("pod-c")
	waitQueue(t, cl, "sched", 3)

	code, _, errOut := fk(t, env, "transfer", "--to-value", "pod-z", "sched")
	assert.Equal(t, ExitRefused, code, errOut)
	requireOneLine(t, errOut, "nothing asked")
	rev := strings.SplitN(evA.token, ":", 2)[0]
	code, _, errOut = fk(t, env, "transfer", "--fence", rev+"1", "--to-value", "pod-c", "sched")
	assert.Equal(t, ExitRefused, code, errOut)
	requireOneLine(t, errOut, "nothing asked")
	code, _, errOut = fk(t, env, "transfer", "--to-value", "pod-c", "sched")
	assert.Equal(t, ExitUsage, fkCode(t, env, "transfer", "sched"), "neither --to nor --to-value")
	require.Equal(t, 0, code, errOut)
	requireOneLine(t, errOut, `asked the leader of election "sched"`)

	waitEvent(t, outA, "term", 5*time.Second)
	require.Equal(t, 143, a.wait(t, 10*time.Second), a.stderr.String())
	evC := waitEvent(t, outC, "start", 10*time.Second)
	tokA, err := fence.Parse(evA.token)
	require.NoError(t, err)
	tokC, err := fence.Parse(evC.token)
	require.NoError(t, err)
	assert.Greater(t, tokC.Revision, tokA.Revision)
	code, stdout, errOut := fk(t, env, "leader", "sched")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, stdout, `value "pod-c"`)
	_, err = os.Stat(outB)
	assert.True(t, os.IsNotExist(err), "pod-b, passed over, never led")

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 143, c.wait(t, 10*time.Second), c.stderr.String())
	waitEvent(t, outB, "start", 10*time.Second)
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 143, b.wait(t, 10*time.Second), b.stderr.String())
}

// waitQueue waits until n records queue for the election name.
func waitQueue(t *testing.T, cl *etcdtest.Cluster, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), name)
		return err == nil && st.Holder != nil && len(st.Waiters)+1 == n
	}, 20*time.Second, 10*time.Millisecond)
}

func fkCode(t *testing.T, env []string, args ...string) int {
	t.Helper()
	code, _, _ := fk(t, env, args...)
	return code
}

// TestTransferToReaderRefused: "transfer --to" naming a read lock that
// waits behind the leader run by elect is refused (exit 1, "nothing
// asked"): nothing is written, the leader's command runs on, and the
// candidate behind the reader does not lead.
func TestTransferToReaderRefused(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	dir := t.TempDir()
	elect := func(value string) (*proc, string) {
		out := filepath.Join(dir, value)
		return start(t, append(append([]string{}, env...), childEnv("loop", out)...), "elect", "--ttl", "2s", "sched", value, "--", testExe(t)), out
	}
	a, outA := elect("pod-a")
	waitEvent(t, outA, "start", 20*time.Second)
	rw, err := newLocks(t, cl).RWMutex("sched")
	require.NoError(t, err)
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	reading := make(chan error, 1)
	go func() {
		_, err := rw.RLock(rctx)
		reading <- err
	}()
	waitQueue(t, cl, "sched", 2)
	b, outB := elect("pod-b")
	waitQueue(t, cl, "sched", 3)
	st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "sched")
	require.NoError(t, err)
	reader := st.Waiters[0]
	require.Equal(t, "read", reader.Kind)

	direct := etcdtest.Client(t, cl)
	before, err := direct.Get(ctxT(t, 5*time.Second), "", clientv3.WithPrefix())
	require.NoError(t, err)
	code, _, errOut := fk(t, env, "transfer", "--to", strconv.FormatInt(reader.Fence.Revision, 10), "sched")
	assert.Equal(t, ExitRefused, code, errOut)
	requireOneLine(t, errOut, "nothing asked")
	after, err := direct.Get(ctxT(t, 5*time.Second), "", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Equal(t, before.Header.Revision, after.Header.Revision, "nothing written")

	code, stdout, errOut := fk(t, env, "leader", "sched")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, stdout, `value "pod-a"`)
	for _, ev := range readEvents(t, outA) {
		assert.NotEqual(t, "term", ev.name, "the leader's command was stopped")
	}
	_, err = os.Stat(outB)
	assert.True(t, os.IsNotExist(err), "pod-b never led")

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 143, a.wait(t, 10*time.Second), a.stderr.String())
	rcancel()
	<-reading
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	b.wait(t, 10*time.Second)
}

// TestLeaderLockDelay: a lease run with --lock-delay on an election's
// name, force released: during the delay "leader" says nobody leads and
// when the delay ends (exit 1; JSON: delayed_until), "observe" says so,
// and "status" shows the delay.
func TestLeaderLockDelay(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	out := filepath.Join(t.TempDir(), "out")
	obs := start(t, env, "observe", "--json", "dl")
	p := start(t, append(append([]string{}, env...), childEnv("loop", out)...), "run", "--lock-delay", "8s", "dl", "--", testExe(t))
	ev := waitEvent(t, out, "start", 20*time.Second)
	rev := strings.SplitN(ev.token, ":", 2)[0]
	code, stdout, errOut := fk(t, env, "leader", "dl")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, stdout, "fence "+rev)
	code, _, errOut = fk(t, env, "release", "--fence", rev, "dl")
	require.Equal(t, 0, code, errOut)
	released := time.Now()

	code, stdout, errOut = fk(t, env, "leader", "dl")
	assert.Equal(t, ExitRefused, code, "stdout %q stderr %q", stdout, errOut)
	assert.Empty(t, stdout)
	requireOneLine(t, errOut, `election "dl" has no leader, lock-delay until ~`)
	code, stdout, _ = fk(t, env, "leader", "--json", "dl")
	assert.Equal(t, ExitRefused, code)
	var j leaderJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &j), stdout)
	assert.False(t, j.Leader)
	if assert.NotNil(t, j.DelayedUntil) {
		assert.True(t, j.DelayedUntil.After(released), "delayed until %v", j.DelayedUntil)
	}
	code, table, errOut := fk(t, env, "status", "dl")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, table, "lock-delay until ~")
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(obs.stdout.String(), "\n") {
			var l leaderJSON
			if json.Unmarshal([]byte(line), &l) == nil && !l.Leader && l.DelayedUntil != nil {
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "observe printed:\n%s", obs.stdout.String())
	t.Logf("checked within %v of the force release (lock-delay 8s)", time.Since(released))
	require.Equal(t, ExitLost, p.wait(t, 10*time.Second))
	require.NoError(t, obs.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, obs.wait(t, 10*time.Second), obs.stderr.String())
}

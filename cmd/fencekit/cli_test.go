package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExitCodes runs fencekit into every documented exit code.
func TestExitCodes(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	locks := newLocks(t, cl)
	held, err := locks.Acquire(ctxT(t, 10*time.Second), "held")
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "out")
	notExec := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600))
	unreachable := unusedAddr(t)

	for _, tc := range []struct {
		name    string
		env     []string
		args    []string
		code    int
		oneLine string // when set, stderr is exactly one line containing it
	}{
		{"child code", childEnv("record", out, "FK_CODE=3"), []string{"run", "x", "--", testExe(t)}, 3, ""},
		{"child ok", childEnv("record", out), []string{"run", "x", "--", testExe(t)}, 0, ""},
		{"child killed by a signal", nil, []string{"run", "x", "--", "sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
		{"flags after LOCK", nil, []string{"run", "x", "--ttl", "3s", "--", "true"}, 0, ""},
		{"command not found", nil, []string{"run", "x", "--", "/no/such/command"}, ExitNotFound, "no such file"},
		{"command not executable", nil, []string{"run", "x", "--", notExec}, ExitCannotExec, "permission denied"},
		{"try held", nil, []string{"run", "--try", "held", "--", "true"}, ExitNotAcquired, "is held by fence"},
		{"wait ran out", nil, []string{"run", "--wait", "300ms", "held", "--", "true"}, ExitNotAcquired, "not acquired within 300ms"},
		{"bad flag", nil, []string{"run", "--bogus", "x", "--", "true"}, ExitUsage, "flag provided but not defined: -bogus"},
		{"bad duration", nil, []string{"run", "--wait", "soon", "x", "--", "true"}, ExitUsage, "invalid value"},
		{"no command", nil, []string{"run", "x"}, ExitUsage, "no COMMAND"},
		{"no lock", nil, []string{"run"}, ExitUsage, "want LOCK"},
		{"bad lock name", nil, []string{"run", "a/b", "--", "true"}, ExitUsage, "invalid lock name"},
		{"try and wait", nil, []string{"run", "--try", "--wait", "1s", "x", "--", "true"}, ExitUsage, "exclude each other"},
		{"grace too long", nil, []string{"run", "--ttl", "2s", "--grace", "2s", "x", "--", "true"}, ExitUsage, "--grace"},
		{"ttl too long", nil, []string{"run", "--ttl", "2h", "x", "--", "true"}, ExitUsage, "--ttl 2h0m0s is above"},
		{"ttl zero", nil, []string{"run", "--ttl", "0s", "x", "--", "true"}, ExitUsage, "--ttl 0s is below etcd's minimum lease TTL"},
		{"ttl too short for the margin", []string{"FENCEKIT_TTL=1s"}, []string{"run", "--grace", "300ms", "x", "--", "true"}, ExitUsage, "--grace 300ms needs a safety margin"},
		{"empty prefix", nil, []string{"ls", "--prefix", ""}, ExitUsage, "--prefix \"\""},
		{"zero dial timeout", nil, []string{"ls", "--dial-timeout", "0s"}, ExitUsage, "--dial-timeout 0s must be positive"},
		{"zero command timeout", nil, []string{"status", "--command-timeout", "0s"}, ExitUsage, "--command-timeout 0s must be positive"},
		{"bad env", []string{"ETCDCTL_DIAL_TIMEOUT=soon"}, []string{"status"}, ExitUsage, "ETCDCTL_DIAL_TIMEOUT"},
		{"unknown command", nil, []string{"lock", "x"}, ExitUsage, "unknown command"},
		{"no command at all", nil, nil, ExitUsage, ""},
		{"status bad flag", nil, []string{"status", "--jsn"}, ExitUsage, "-jsn"},
		{"ls argument", nil, []string{"ls", "x"}, ExitUsage, "unexpected argument"},
		{"release without fence", nil, []string{"release", "x"}, ExitUsage, "--fence N is required"},
		{"release wrong fence", nil, []string{"release", "--fence", "1", "held"}, ExitRefused, "refused"},
		{"release free lock", nil, []string{"release", "--fence", "1", "free"}, ExitRefused, "is free"},
		{"run unreachable", []string{"ETCDCTL_ENDPOINTS=" + unreachable}, []string{"run", "--dial-timeout", "300ms", "x", "--", "true"}, ExitConn, "did not answer within 300ms"},
		{"status unreachable", nil, []string{"status", "--endpoints", unreachable, "--dial-timeout", "300ms"}, ExitConn, "did not answer"},
		{"release unreachable", nil, []string{"release", "--endpoints", unreachable, "--dial-timeout", "300ms", "--fence", "3", "x"}, ExitConn, "did not answer"},
		{"bad TLS files", nil, []string{"ls", "--cacert", "/no/such/ca.pem"}, ExitConn, "TLS"},
		{"user without password", nil, []string{"ls", "--user", "root"}, ExitConn, "no password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := fk(t, append(append([]string{}, env...), tc.env...), tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			if tc.oneLine != "" {
				requireOneLine(t, stderr, tc.oneLine)
			}
		})
	}
	st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "held")
	require.NoError(t, err)
	assert.Equal(t, held.Fence(), st.Holder.Fence, "nothing touched the held lock")
	assert.Empty(t, st.Waiters)
	all, err := newOps(t, cl).InspectAll(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	assert.Len(t, all, 1, "no record left behind")
}

// unusedAddr returns a loopback address nothing listens on.
func unusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestHelp(t *testing.T) {
	code, out, _ := fk(t, nil, "--help")
	require.Equal(t, 0, code)
	for _, c := range commands {
		assert.Contains(t, out, "fencekit "+c.synopsis)
		code, out, errOut := fk(t, nil, c.name, "--help")
		require.Equal(t, 0, code, errOut)
		assert.True(t, strings.HasPrefix(out, "Usage: fencekit "+c.name), out)
		assert.Empty(t, errOut)
	}
	_, out, _ = fk(t, nil, "run", "-h")
	for _, want := range []string{"FENCING_TOKEN", "--grace", "--endpoints", "ETCDCTL_ENDPOINTS", "Exit codes"} {
		assert.Contains(t, out, strings.TrimPrefix(want, "-"))
	}
}

// TestStatusJSON checks "status --json" and "ls --json" against what the
// library reports, and that no owner token is printed.
func TestStatusJSON(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	env := endpointsEnv(cl)
	a := newLocks(t, cl, lease.WithTTL(5*time.Second))
	b := newLocks(t, cl, lease.WithTTL(5*time.Second))
	ctx := ctxT(t, 20*time.Second)
	l, err := a.Acquire(ctx, "reports")
	require.NoError(t, err)
	require.NoError(t, l.Reenter(ctx))
	got := make(chan *lease.Lease, 1)
	go func() {
		w, _ := b.Acquire(ctx, "reports")
		got <- w
	}()
	require.Eventually(t, func() bool {
		st, err := newOps(t, cl).Inspect(ctx, "reports")
		return err == nil && len(st.Waiters) == 1
	}, 10*time.Second, 10*time.Millisecond)
	want, err := newOps(t, cl).Inspect(ctx, "reports")
	require.NoError(t, err)

	code, out, errOut := fk(t, env, "status", "--json", "reports", "idle")
	require.Equal(t, 0, code, errOut)
	var states []lockJSON
	require.NoError(t, json.Unmarshal([]byte(out), &states))
	require.Len(t, states, 2)
	s := states[0]
	assert.Equal(t, "reports", s.Lock)
	require.NotNil(t, s.Holder)
	assert.Equal(t, l.Fence().Revision, s.Holder.Fence)
	assert.Equal(t, l.Fence().String(), s.Holder.FencingToken)
	assert.Equal(t, l.OwnerDigest(), s.Holder.Owner)
	assert.Equal(t, 2, s.Holder.Holds)
	assert.Equal(t, want.Holder.Instance, s.Holder.Instance)
	assert.True(t, want.Holder.Since.Equal(s.Holder.Since))
	assert.False(t, s.Holder.Since.After(l.Acquired()))
	assert.Equal(t, strconv.FormatInt(want.Holder.Session, 16), s.Holder.Session)
	assert.Greater(t, s.Holder.SessionTTL, 0.0)
	assert.LessOrEqual(t, s.Holder.SessionTTL, 5.0)
	require.Len(t, s.Waiters, 1)
	assert.Equal(t, want.Waiters[0].Fence.Revision, s.Waiters[0].Fence)
	assert.Equal(t, want.Waiters[0].OwnerDigest, s.Waiters[0].Owner)
	assert.Equal(t, "idle", states[1].Lock)
	assert.Nil(t, states[1].Holder)
	assert.Empty(t, states[1].Waiters)

	code, out, errOut = fk(t, env, "ls", "--json")
	require.Equal(t, 0, code, errOut)
	var ls []lsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &ls))
	require.Equal(t, []lsJSON{{Lock: "reports", Fence: l.Fence().Revision, FencingToken: l.Fence().String(),
		Owner: l.OwnerDigest(), Holds: 2, SessionTTL: ls[0].SessionTTL, Waiters: 1}}, ls)

	// The table forms carry the same facts, and no output carries a token.
	_, table, _ := fk(t, env, "status")
	assert.Contains(t, table, l.OwnerDigest())
	assert.Contains(t, table, "waiter 1")
	_, lsTable, _ := fk(t, env, "ls")
	assert.Contains(t, lsTable, "reports")
	resp, err := cli.Get(ctx, lease.DefaultPrefix, clientOpts()...)
	require.NoError(t, err)
	for _, kv := range resp.Kvs {
		tok, _, _ := strings.Cut(string(kv.Value), "#")
		for _, o := range []string{out, table, lsTable} {
			assert.NotContains(t, o, tok)
		}
	}

	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
	w := <-got
	require.NotNil(t, w)
	require.NoError(t, w.Release(ctx))
}

// TestReleaseFence: a wrong revision is refused and changes nothing; the
// holder's revision frees the lock, and the holder's run kills its child.
func TestReleaseFence(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(env, childEnv("loop", out)...), "run", "migrate", "--", testExe(t))
	ev := waitEvent(t, out, "start", 20*time.Second)
	rev := strings.SplitN(ev.token, ":", 2)[0]

	code, _, errOut := fk(t, env, "release", "--fence", rev+"1", "migrate")
	assert.Equal(t, ExitRefused, code)
	requireOneLine(t, errOut, "is held by fence "+rev)
	st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "migrate")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	assert.Equal(t, rev, strconv.FormatInt(st.Holder.Fence.Revision, 10))

	code, _, errOut = fk(t, env, "release", "--fence", rev, "migrate")
	require.Equal(t, 0, code, errOut)
	requireOneLine(t, errOut, "deleted lock \"migrate\"")
	assert.Contains(t, errOut, st.Holder.OwnerDigest)
	require.Equal(t, ExitLost, p.wait(t, 10*time.Second))
	waitEvent(t, out, "term", time.Second)
	assert.Contains(t, p.stderr.String(), "lock record deleted")
	requireFree(t, cl.Members[0].ClientURL, "migrate")
}

// TestTTLBelowServerMinimum: on an etcd with its default election timeout
// (1 s: a 2 s lease minimum), "run --ttl 1s" says --ttl is below the
// server's minimum, exits 64, and leaves nothing behind.
func TestTTLBelowServerMinimum(t *testing.T) {
	cl := etcdtest.StartConfig(t, etcdproc.Config{Members: 1, NoFsync: true, TickInterval: 100 * time.Millisecond, ElectionTimeout: time.Second})
	code, _, errOut := fk(t, endpointsEnv(cl), "run", "--ttl", "1s", "x", "--", "true")
	assert.Equal(t, ExitUsage, code, errOut)
	requireOneLine(t, errOut, "--ttl 1s is below this etcd's minimum lease TTL")
	all, err := newOps(t, cl).InspectAll(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	assert.Empty(t, all, "nothing left behind")
}

// TestHelpExitCodes: every command's --help exits 0 and lists its exit
// codes, including the usage error; the overview lists every code.
func TestHelpExitCodes(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Main([]string{c.name, "--help"}, &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
			require.Equal(t, ExitOK, code, stderr.String())
			assert.Contains(t, stdout.String(), "Usage: fencekit "+c.synopsis)
			assert.Contains(t, stdout.String(), "Exit codes: ")
			assert.Contains(t, stdout.String(), "64 usage error")
		})
	}
	var stdout strings.Builder
	require.Equal(t, ExitOK, Main([]string{"--help"}, &Env{Stdout: &stdout, Getenv: func(string) string { return "" }}))
	for _, code := range []int{ExitRefused, ExitUsage, ExitConn, ExitSoftware, ExitNotAcquired, ExitServerTooOld, ExitLost, ExitCannotExec, ExitNotFound} {
		assert.Regexp(t, `\b`+strconv.Itoa(code)+`\b`, stdout.String(), "overview lists exit code %d", code)
	}
}

// TestReleaseAsk: "release --ask" with another fence is refused and asks
// nothing; with the holder's fence, the holding run sends its command
// SIGTERM, exits with the command's code once it exits, and the lock is
// free.
func TestReleaseAsk(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(env, childEnv("loop", out)...), "run", "reindex", "--", testExe(t))
	ev := waitEvent(t, out, "start", 20*time.Second)
	rev := strings.SplitN(ev.token, ":", 2)[0]

	code, _, errOut := fk(t, env, "release", "--ask", "--fence", rev+"1", "reindex")
	assert.Equal(t, ExitRefused, code)
	requireOneLine(t, errOut, "nothing asked")
	code, _, errOut = fk(t, env, "release", "--ask", "--fence", rev, "reindex")
	require.Equal(t, 0, code, errOut)
	requireOneLine(t, errOut, "asked the holder of lock \"reindex\"")
	waitEvent(t, out, "term", 5*time.Second)
	require.Equal(t, 143, p.wait(t, 10*time.Second), "the command's own code: it was asked, not lost")
	assert.Contains(t, p.stderr.String(), "asked to release")
	requireFree(t, cl.Members[0].ClientURL, "reindex")
}

// TestRunMaxHoldAndMetadata: "run --max-hold" ends the lease after the cap
// (the command is killed, exit 79, the lock passes on), and "--metadata"
// is shown by status while the run holds the lock; bad values are usage
// errors.
func TestRunMaxHoldAndMetadata(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	out := filepath.Join(t.TempDir(), "out")
	began := time.Now()
	// The cap leaves room for the two status calls below, each up to a
	// second or two on a loaded machine, before it ends the lease.
	p := start(t, append(env, childEnv("loop", out)...), "run", "--max-hold", "5s", "--metadata", "nightly reindex", "capped", "--", testExe(t))
	waitEvent(t, out, "start", 20*time.Second)
	code, table, errOut := fk(t, env, "status", "capped")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, table, `"nightly reindex"`)
	_, js, _ := fk(t, env, "status", "--json", "capped")
	assert.Contains(t, js, `"value": "nightly reindex"`)

	require.Equal(t, ExitLost, p.wait(t, 15*time.Second))
	assert.GreaterOrEqual(t, time.Since(began), 5*time.Second)
	waitEvent(t, out, "term", time.Second)
	assert.Contains(t, p.stderr.String(), "maximum")
	requireFree(t, cl.Members[0].ClientURL, "capped")

	for _, args := range [][]string{
		{"run", "--max-hold", "-1s", "x", "--", "true"},
		{"run", "--metadata", "two\nlines", "x", "--", "true"},
		{"run", "-n", "2", "--max-hold", "1s", "x", "--", "true"},
	} {
		code, _, errOut := fk(t, env, args...)
		assert.Equal(t, ExitUsage, code, "%v: %s", args, errOut)
		requireOneLine(t, errOut, "--")
	}
}

// TestRunLockDelay: a "run --lock-delay" whose lock is force released is
// not a release: status shows the delay and no holder, a --try run finds
// the lock held, and the next run starts no sooner than the delay after
// the release; bad values are usage errors.
func TestRunLockDelay(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	out := filepath.Join(t.TempDir(), "out")
	// Each fencekit call here takes up to a second or two on a loaded
	// machine: a delay of 5 s leaves room for two of them within it.
	p := start(t, append(env, childEnv("loop", out)...), "run", "--lock-delay", "5s", "delayed", "--", testExe(t))
	ev := waitEvent(t, out, "start", 20*time.Second)
	rev := strings.SplitN(ev.token, ":", 2)[0]
	code, _, errOut := fk(t, env, "release", "--fence", rev, "delayed")
	require.Equal(t, 0, code, errOut)
	released := time.Now()
	code, _, errOut = fk(t, env, "run", "--try", "delayed", "--", "true")
	assert.Equal(t, ExitNotAcquired, code, errOut)
	assert.Contains(t, errOut, "lock-delay until ~")
	code, table, errOut := fk(t, env, "status", "delayed")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, table, "lock-delay until ~")
	_, js, _ := fk(t, env, "status", "--json", "delayed")
	assert.Contains(t, js, `"delayed_until"`)
	assert.Contains(t, js, `"holder": null`)
	t.Logf("status ran within %v of the force release", time.Since(released))
	require.Equal(t, ExitLost, p.wait(t, 10*time.Second))
	code, _, errOut = fk(t, env, "run", "--wait", "20s", "delayed", "--", "true")
	require.Equal(t, 0, code, errOut)
	waited := time.Since(released)
	t.Logf("the next run ended %v after the force release (lock-delay 5s)", waited)
	assert.GreaterOrEqual(t, waited, 5*time.Second)

	for _, args := range [][]string{
		{"run", "--lock-delay", "-1s", "x", "--", "true"},
		{"run", "--lock-delay", "2m", "x", "--", "true"},
		{"run", "-n", "2", "--lock-delay", "1s", "x", "--", "true"},
	} {
		code, _, errOut := fk(t, env, args...)
		assert.Equal(t, ExitUsage, code, "%v: %s", args, errOut)
		requireOneLine(t, errOut, "--")
	}
}

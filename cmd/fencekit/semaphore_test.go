package main

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunSemaphore: three "run -n 2" of one semaphore run at most two
// commands at once, and two do run together; the commands get
// FENCEKIT_PERMIT_REVISION, FENCEKIT_PERMITS and FENCEKIT_LOCK and no
// FENCING_TOKEN (not even one inherited); nothing is left behind.
func TestRunSemaphore(t *testing.T) {
	cl := etcdtest.Start(t)
	env := append(endpointsEnv(cl), "FENCING_TOKEN=1:outer")
	dir := t.TempDir()
	var ps []*proc
	var outs []string
	for i := range 3 {
		out := filepath.Join(dir, strconv.Itoa(i))
		outs = append(outs, out)
		ps = append(ps, start(t, env, "run", "-n", "2", "--ttl", "2s", "reports", "--", "sh", "-c",
			`echo "start $(date +%s%N) [$FENCING_TOKEN] $FENCEKIT_PERMIT_REVISION $FENCEKIT_PERMITS $FENCEKIT_LOCK" >"$0"; sleep 1.5; echo "end $(date +%s%N)" >>"$0"`, out))
	}
	for _, p := range ps {
		require.Equal(t, 0, p.wait(t, 30*time.Second), p.stderr.String())
	}
	type span struct{ from, to int64 }
	var spans []span
	revs := map[string]bool{}
	for _, out := range outs {
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.Len(t, lines, 2, string(b))
		f := strings.Fields(lines[0])
		require.Len(t, f, 6, lines[0])
		assert.Equal(t, "[]", f[2], "FENCING_TOKEN must not be set for a permit")
		rev, err := strconv.ParseInt(f[3], 10, 64)
		require.NoError(t, err, "FENCEKIT_PERMIT_REVISION %q", f[3])
		assert.Positive(t, rev)
		revs[f[3]] = true
		assert.Equal(t, "2", f[4], "FENCEKIT_PERMITS")
		assert.Equal(t, "reports", f[5], "FENCEKIT_LOCK")
		from, _ := strconv.ParseInt(f[1], 10, 64)
		to, _ := strconv.ParseInt(strings.Fields(lines[1])[1], 10, 64)
		spans = append(spans, span{from, to})
	}
	assert.Len(t, revs, 3, "each permit has its own revision")
	// The most commands running at one moment.
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.from, 1}, edge{s.to, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	assert.Equal(t, 2, most, "at most two at once, and two did run together: %v", spans)
	all, err := newOps(t, cl).InspectAll(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	assert.Empty(t, all, "nothing left behind")
}

// TestRunSemaphoreRefusals: a full semaphore with --try exits 75; a lock
// name used as a lock, or a semaphore of another size, exits 64 with one
// line; bad -n values exit 64; the holders are untouched.
func TestRunSemaphoreRefusals(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	locks := newLocks(t, cl)
	l, err := locks.Acquire(ctxT(t, 10*time.Second), "exclusive")
	require.NoError(t, err)
	sem, err := locks.Semaphore("pool", 1)
	require.NoError(t, err)
	p, err := sem.Acquire(ctxT(t, 10*time.Second))
	require.NoError(t, err)

	for _, tc := range []struct {
		args    []string
		code    int
		oneLine string
	}{
		{[]string{"run", "-n", "1", "--try", "pool", "--", "true"}, ExitNotAcquired, `semaphore "pool" is held (1 of 1 permits held)`},
		{[]string{"run", "-n", "1", "--wait", "300ms", "pool", "--", "true"}, ExitNotAcquired, "not acquired within 300ms"},
		{[]string{"run", "-n", "2", "pool", "--", "true"}, ExitUsage, "another kind or size: a semaphore of 2 queued behind a semaphore of 1 (-n must match"},
		{[]string{"run", "-n", "2", "exclusive", "--", "true"}, ExitUsage, "another kind or size"},
		{[]string{"run", "pool", "--", "true"}, ExitUsage, "another kind or size"},
		{[]string{"run", "-n", "0", "x", "--", "true"}, ExitUsage, "-n 0: want 1..65536"},
		{[]string{"run", "-n", "-2", "x", "--", "true"}, ExitUsage, "-n -2"},
		{[]string{"run", "-n", "many", "x", "--", "true"}, ExitUsage, "invalid value"},
		{[]string{"run", "-n", "2", "--endpoints", unusedAddr(t), "--dial-timeout", "300ms", "x", "--", "true"}, ExitConn, "did not answer within 300ms"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errOut := fk(t, env, tc.args...)
			assert.Equal(t, tc.code, code, errOut)
			requireOneLine(t, errOut, tc.oneLine)
		})
	}
	assert.NoError(t, l.Err())
	assert.NoError(t, p.Err())
	for _, name := range []string{"exclusive", "pool"} {
		st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), name)
		require.NoError(t, err)
		assert.NotNil(t, st.Holder, name)
		assert.Empty(t, st.Waiters, "%s: no waiter left behind", name)
	}
}

// TestRunSemaphoreLost: deleting a running permit's record kills its
// command (SIGTERM) and run exits 79, saying the permit was lost.
func TestRunSemaphoreLost(t *testing.T) {
	cl := etcdtest.Start(t)
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, append(endpointsEnv(cl), childEnv("loop", out)...), "run", "-n", "3", "--ttl", "2s", "pool", "--", testExe(t))
	waitEvent(t, out, "start", 20*time.Second)
	st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "pool")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	_, err = etcdtest.Client(t, cl).Delete(ctxT(t, 5*time.Second), st.Holder.Key)
	require.NoError(t, err)
	require.Equal(t, ExitLost, p.wait(t, 10*time.Second), p.stderr.String())
	waitEvent(t, out, "term", time.Second)
	assert.Contains(t, p.stderr.String(), `permit on "pool" lost`)
}

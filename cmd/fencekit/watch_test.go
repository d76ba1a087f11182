package main

import (
	"bufio"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatusWatch: "status --watch" to a pipe prints plain blocks, one per
// change: the empty state, the holder, the holder and a waiter, the
// waiter as holder, then nothing; SIGINT ends it with 0. With --json, each
// change is one JSON array per line.
func TestStatusWatch(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	plain := start(t, env, "status", "--watch")
	js := start(t, env, "status", "--watch", "--json", "w")
	require.Eventually(t, func() bool {
		return strings.Contains(plain.stdout.String(), "no lock is held") && strings.Contains(js.stdout.String(), "\n")
	}, 20*time.Second, 10*time.Millisecond, "first draw: %q %q", plain.stdout.String(), js.stdout.String())

	a, b := newLocks(t, cl), newLocks(t, cl)
	la, err := a.Acquire(ctxT(t, 10*time.Second), "w")
	require.NoError(t, err)
	waitOut(t, plain, "w  holder  "+strconv.FormatInt(la.Fence().Revision, 10))
	type acquired struct {
		l   *lease.Lease
		err error
	}
	got := make(chan acquired, 1)
	go func() {
		lb, err := b.Acquire(ctxT(t, 20*time.Second), "w")
		got <- acquired{lb, err}
	}()
	waitOut(t, plain, "waiter 1")
	require.NoError(t, la.Release(ctxT(t, 5*time.Second)))
	r := <-got
	require.NoError(t, r.err)
	// Both watchers show b holding before it lets go.
	waitOut(t, plain, "w  holder  "+strconv.FormatInt(r.l.Fence().Revision, 10))
	waitOut(t, js, `"fence":`+strconv.FormatInt(r.l.Fence().Revision, 10))
	require.NoError(t, r.l.Release(ctxT(t, 5*time.Second)))
	require.Eventually(t, func() bool {
		return strings.Count(plain.stdout.String(), "no lock is held") == 2
	}, 10*time.Second, 10*time.Millisecond, "no final empty draw:\n%s", plain.stdout.String())

	for _, p := range []*proc{plain, js} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		require.Equal(t, 0, p.wait(t, 10*time.Second), p.stderr.String())
	}
	out := plain.stdout.String()
	assert.NotContains(t, out, "\x1b[", "no terminal escapes on a pipe")
	headers := regexp.MustCompile(`(?m)^== \S+ revision (\d+)$`).FindAllStringSubmatch(out, -1)
	require.GreaterOrEqual(t, len(headers), 5, out)
	prev := int64(0)
	for _, h := range headers {
		rev, _ := strconv.ParseInt(h[1], 10, 64)
		assert.Greater(t, rev, prev, "revisions rise")
		prev = rev
	}
	// The JSON: each line an array; holders seen in order a, b, then none.
	var holders []int64
	sc := bufio.NewScanner(strings.NewReader(js.stdout.String()))
	for sc.Scan() {
		var locks []lockJSON
		require.NoError(t, json.Unmarshal(sc.Bytes(), &locks), sc.Text())
		require.Len(t, locks, 1)
		var h int64
		if locks[0].Holder != nil {
			h = locks[0].Holder.Fence
		}
		if len(holders) == 0 || holders[len(holders)-1] != h {
			holders = append(holders, h)
		}
	}
	require.Len(t, holders, 4, "%v", holders)
	assert.Equal(t, int64(0), holders[0])
	assert.Equal(t, la.Fence().Revision, holders[1])
	assert.Greater(t, holders[2], holders[1])
	assert.Equal(t, int64(0), holders[3])

	code, _, errOut := fk(t, nil, "status", "--watch", "--endpoints", unusedAddr(t), "--dial-timeout", "300ms")
	assert.Equal(t, ExitConn, code, errOut)
	requireOneLine(t, errOut, "did not answer within 300ms")
}

func waitOut(t *testing.T, p *proc, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(collapse(p.stdout.String()))
	},
		10*time.Second, 10*time.Millisecond, "no %q in:\n%s", want, p.stdout.String())
}

// collapse turns runs of spaces into two, as tabwriter pads.
func collapse(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ") }

package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVerify: the holder's token verifies (0), and so does the
// FENCING_TOKEN a run hands its command; a waiter's revision, a permit's,
// a later or made-up revision and a released holder's token do not (1);
// a malformed token is a usage error (64) and an unreachable etcd a
// connection error (69).
func TestVerify(t *testing.T) {
	cl := etcdtest.Start(t)
	env := endpointsEnv(cl)
	locks := newLocks(t, cl)
	other := newLocks(t, cl)
	l, err := locks.Acquire(ctxT(t, 10*time.Second), "ledger")
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		w, err := other.Acquire(ctxT(t, 20*time.Second), "ledger")
		if err == nil {
			err = w.Release(ctxT(t, 5*time.Second))
		}
		waiting <- err
	}()
	var waiter int64
	require.Eventually(t, func() bool {
		st, err := newOps(t, cl).Inspect(ctxT(t, 5*time.Second), "ledger")
		if err != nil || len(st.Waiters) != 1 {
			return false
		}
		waiter = st.Waiters[0].Fence.Revision
		return true
	}, 10*time.Second, 10*time.Millisecond)
	sem, err := locks.Semaphore("pool", 2)
	require.NoError(t, err)
	p, err := sem.Acquire(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	holder := l.Fence()

	for _, tc := range []struct {
		name, token string
		code        int
		line        string
	}{
		{"holder", holder.String(), ExitOK, "yes: "},
		{"next revision", strconv.FormatInt(holder.Revision+1, 10) + ":ledger", ExitRefused, "no: "},
		{"waiter", strconv.FormatInt(waiter, 10) + ":ledger", ExitRefused, "not the revision of the lock's current holder"},
		{"permit", strconv.FormatInt(p.Revision(), 10) + ":pool", ExitRefused, "no fencing token"},
		{"other lock", strconv.FormatInt(holder.Revision, 10) + ":other", ExitRefused, "has no holder"},
		{"future", "999999:ledger", ExitRefused, "beyond the cluster's current revision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, errOut := fk(t, env, "verify", tc.token)
			assert.Equal(t, tc.code, code, errOut)
			requireOneLine(t, stdout, tc.line)
			assert.Empty(t, errOut)
		})
	}
	require.NoError(t, l.Release(ctxT(t, 5*time.Second)))
	require.NoError(t, <-waiting)
	code, stdout, _ := fk(t, env, "verify", holder.String())
	assert.Equal(t, ExitRefused, code, "a released holder's token")
	requireOneLine(t, stdout, "no: ")

	// The token run hands its command verifies while the command runs.
	code, stdout, errOut := fk(t, env, "run", "job", "--", "sh", "-c", `exec "$0" verify "$FENCING_TOKEN"`, bin)
	assert.Equal(t, ExitOK, code, errOut)
	requireOneLine(t, stdout, "yes: ")

	for _, tc := range []struct {
		args []string
		code int
		line string
	}{
		{[]string{"verify", "ledger"}, ExitUsage, "fencekit verify: "},
		{[]string{"verify"}, ExitUsage, "want exactly one TOKEN"},
		{[]string{"verify", "1:a", "2:b"}, ExitUsage, "want exactly one TOKEN"},
		{[]string{"verify", "--endpoints", unusedAddr(t), "--dial-timeout", "300ms", "5:ledger"}, ExitConn, "did not answer within 300ms"},
	} {
		code, _, errOut := fk(t, env, tc.args...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		requireOneLine(t, errOut, tc.line)
	}
}

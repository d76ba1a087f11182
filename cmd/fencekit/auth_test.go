package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAuth: etcdctl's --user NAME:PASSWORD, and --user NAME with
// ETCDCTL_PASSWORD; a wrong password is one line and ExitConn; --help never
// prints a password from the environment.
func TestAuth(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx := ctxT(t, 10*time.Second)
	_, err := cli.RoleAdd(ctx, "root")
	require.NoError(t, err)
	_, err = cli.UserAdd(ctx, "root", "s3cret-pw")
	require.NoError(t, err)
	_, err = cli.UserGrantRole(ctx, "root", "root")
	require.NoError(t, err)
	_, err = cli.AuthEnable(ctx)
	require.NoError(t, err)
	env := endpointsEnv(cl)
	// etcd checks a password with bcrypt, which a loaded machine running
	// the race detector can stretch past the default 2 s dial timeout.
	slow := append(env[:len(env):len(env)], "ETCDCTL_DIAL_TIMEOUT=20s")

	code, _, errOut := fk(t, slow, "run", "--user", "root:s3cret-pw", "secured", "--", "true")
	assert.Equal(t, 0, code, errOut)
	code, out, errOut := fk(t, append(slow, "ETCDCTL_USER=root", "ETCDCTL_PASSWORD=s3cret-pw"), "status", "--json", "secured")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"holder": null`)
	code, _, errOut = fk(t, env, "ls", "--user", "root:wrong")
	assert.Equal(t, ExitConn, code)
	requireOneLine(t, errOut, "authentication failed")
	code, _, errOut = fk(t, env, "ls")
	assert.Equal(t, ExitConn, code, "no credentials")
	requireOneLine(t, errOut, "etcd at")

	for _, c := range commands {
		_, help, _ := fk(t, []string{"ETCDCTL_USER=root:s3cret-pw", "ETCDCTL_PASSWORD=s3cret-pw"}, c.name, "--help")
		assert.False(t, strings.Contains(help, "s3cret"), "%s --help shows the password", c.name)
	}
}

package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// debianEtcd is where Debian's etcd-server package installs etcd 3.4.23,
// a server older than lease.MinServerVersion.
const debianEtcd = "/usr/bin/etcd"

// startOldEtcd starts Debian's etcd as a one-member cluster on free
// loopback ports, as a process of its own that is stopped by its PID on
// cleanup, and returns its client URL. Without the binary it skips, or
// fails when FENCEKIT_REQUIRE_DB=1.
func startOldEtcd(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(debianEtcd); err != nil {
		testkit.Need(t, "etcd 3.4", debianEtcd+" is missing; apt-get install etcd-server (Debian's etcd 3.4.23) to run this test")
	}
	client, peer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	var out bytes.Buffer
	cmd := exec.Command(debianEtcd,
		"--name", "old", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "old="+peer, "--log-outputs", "stderr")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by its PID
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("etcd 3.4 output:\n%s", out.String())
		}
	})
	cli := etcdClient(t, client)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Status(ctx, client)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "etcd 3.4 did not start")
	return client
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func etcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A Client refuses an etcd server below the floor before it writes
// anything, with an error naming the version, the member and the floor.
func TestServerBelowFloorIsRefused(t *testing.T) {
	ep := startOldEtcd(t)
	cli := etcdClient(t, ep)
	c := newClient(t, cli)
	ctx := ctxT(t, 30*time.Second)

	_, err := c.Acquire(ctx, "old")
	require.ErrorIs(t, err, lease.ErrServerTooOld)
	var ve *lease.ServerVersionError
	require.ErrorAs(t, err, &ve)
	assert.True(t, strings.HasPrefix(ve.Version, "3.4."), "version %q", ve.Version)
	assert.Equal(t, lease.MinServerVersion, ve.Floor)
	assert.Equal(t, ep, ve.Endpoint)
	assert.NotErrorIs(t, err, lease.ErrRetryable, "calling again cannot help")
	assert.Contains(t, err.Error(), ve.Version)
	assert.Contains(t, err.Error(), lease.MinServerVersion)

	_, err = c.TryAcquire(ctx, "old")
	require.ErrorIs(t, err, lease.ErrServerTooOld, "refused every time, not only once")
	err = c.Do(ctx, "old", func(context.Context, *lease.Lease) error { return nil })
	require.ErrorIs(t, err, lease.ErrServerTooOld)

	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count, "nothing written")
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Empty(t, leases.Leases, "no session granted")
}

// One member below the floor among newer ones is enough to refuse: any
// request may be served by it.
func TestMixedVersionsAreRefused(t *testing.T) {
	old := startOldEtcd(t)
	cl := etcdtest.Start(t)
	cli := etcdClient(t, cl.Members[0].ClientURL, old)
	c := newClient(t, cli)
	_, err := c.Acquire(ctxT(t, 30*time.Second), "mixed")
	var ve *lease.ServerVersionError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, old, ve.Endpoint)
}

// The harness's servers (the newest patches of 3.5, 3.6 and 3.7, as
// FENCEKIT_ETCD_VERSION picks) pass the check, silently: no refusal and no
// warning about known bugs.
func TestCurrentServerPasses(t *testing.T) {
	cl := etcdtest.Start(t)
	var logs testkit.LogBuffer
	c := newClient(t, etcdtest.Client(t, cl), lease.WithLogger(logs.Logger(-8)))
	ctx := ctxT(t, 30*time.Second)
	st, err := etcdtest.Client(t, cl).Status(ctx, cl.Members[0].ClientURL)
	require.NoError(t, err)
	require.Regexp(t, `^3\.[567]\.`, st.Version, "the harness's server")

	l, err := c.Acquire(ctx, "new")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	for _, r := range logs.Records(t) {
		msg := fmt.Sprint(r["msg"])
		assert.NotContains(t, msg, "known lock-relevant bugs")
		assert.NotContains(t, msg, "version not")
	}
}

func TestServerVersionErrorMatches(t *testing.T) {
	var err error = &lease.ServerVersionError{Endpoint: "http://127.0.0.1:2379", Version: "3.4.23", Floor: lease.MinServerVersion}
	err = fmt.Errorf("wrapped: %w", err)
	assert.True(t, errors.Is(err, lease.ErrServerTooOld))
	assert.Equal(t, "wrapped: lease: etcd server 3.4.23 at http://127.0.0.1:2379 is older than 3.5.0, the oldest supported", err.Error())
}

// A least-privilege user (read and write on the lock prefix only) gets
// past the version check: etcd serves Status to any authenticated user,
// and a Status refused (a proxy without it) would be logged, not fatal.
func TestVersionCheckWithLeastPrivilege(t *testing.T) {
	s := startSecureEtcd(t)
	worker := s.user(t, authWorker)
	ctx := ctxT(t, 30*time.Second)
	_, statusErr := worker.Status(ctx, s.endpoint)
	var logs testkit.LogBuffer
	c := newClient(t, worker, lease.WithTTL(2*time.Second), lease.WithLogger(logs.Logger(-8)))
	l, err := c.Acquire(ctx, "orders")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	refused := false
	for _, r := range logs.Records(t) {
		refused = refused || r["msg"] == "lease server version not checked: Status refused"
	}
	assert.Equal(t, statusErr != nil, refused, "Status error for the worker: %v", statusErr)
}

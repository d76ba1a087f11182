package lease_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The users of the secured etcd that these tests start. Each has its own
// password; root's is only used to set the cluster up and to inspect it.
const (
	authWorker   = "worker"   // role locks-rw: readwrite on lease.DefaultPrefix
	authReader   = "reader"   // role locks-ro: read only on lease.DefaultPrefix
	authIntruder = "intruder" // role other-rw: readwrite on authOtherPrefix only
	authRoot     = "root"

	authOtherPrefix = "other/locks/"
)

func authPassword(user string) string { return "pw-" + user }

// secureEtcd is a one-member embedded etcd that serves clients only over
// TLS with client certificates, with authentication enabled.
type secureEtcd struct {
	endpoint string // https://127.0.0.1:port
	caPool   *x509.CertPool
	client   tls.Certificate // a client certificate the server trusts
}

// startSecureEtcd generates a CA, a server certificate for 127.0.0.1 and a
// client certificate, starts etcd with them, creates the roles and users
// described above and enables authentication. The server stops on cleanup.
func startSecureEtcd(t *testing.T) *secureEtcd {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t)
	serverCert, serverKey := issueCert(t, ca, caKey, "etcd-server", []net.IP{net.IPv4(127, 0, 0, 1)},
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	clientCert, clientKey := issueCert(t, ca, caKey, "fencekit-test-client", nil, x509.ExtKeyUsageClientAuth)

	caFile := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	certFile := writePEM(t, dir, "server.pem", "CERTIFICATE", serverCert.Raw)
	keyFile := writePEM(t, dir, "server-key.pem", "PRIVATE KEY", marshalKey(t, serverKey))

	c := etcdtest.StartConfig(t, etcdproc.Config{
		TLS:     true,
		Certs:   &etcdproc.Certs{CAFile: caFile, CertFile: certFile, KeyFile: keyFile},
		NoFsync: true,
		Flags:   []string{"--bcrypt-cost=4"}, // bcrypt.MinCost: fast password checks in tests
	})

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	s := &secureEtcd{
		endpoint: c.Members[0].ClientURL,
		caPool:   pool,
		client:   tls.Certificate{Certificate: [][]byte{clientCert.Raw}, PrivateKey: clientKey},
	}
	s.setUpAuth(t)
	return s
}

// setUpAuth creates the roles and users as an unauthenticated client (auth
// is still off), then enables authentication.
func (s *secureEtcd) setUpAuth(t *testing.T) {
	t.Helper()
	cli := s.dial(t, "")
	defer cli.Close()
	ctx := ctxT(t, 30*time.Second)
	rw := clientv3.PermissionType(clientv3.PermReadWrite)
	ro := clientv3.PermissionType(clientv3.PermRead)
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, authRoot, authPassword(authRoot)); return err },
		func() error { _, err := cli.UserGrantRole(ctx, authRoot, "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "locks-rw"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "locks-rw", lease.DefaultPrefix, clientv3.GetPrefixRangeEnd(lease.DefaultPrefix), rw)
			return err
		},
		func() error { _, err := cli.RoleAdd(ctx, "locks-ro"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "locks-ro", lease.DefaultPrefix, clientv3.GetPrefixRangeEnd(lease.DefaultPrefix), ro)
			return err
		},
		func() error { _, err := cli.RoleAdd(ctx, "other-rw"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "other-rw", authOtherPrefix, clientv3.GetPrefixRangeEnd(authOtherPrefix), rw)
			return err
		},
	}
	for user, role := range map[string]string{authWorker: "locks-rw", authReader: "locks-ro", authIntruder: "other-rw"} {
		steps = append(steps,
			func() error { _, err := cli.UserAdd(ctx, user, authPassword(user)); return err },
			func() error { _, err := cli.UserGrantRole(ctx, user, role); return err })
	}
	steps = append(steps, func() error { _, err := cli.AuthEnable(ctx); return err })
	for i, step := range steps {
		require.NoError(t, step(), "auth set-up step %d", i)
	}
}

// tlsConfig returns what a well-configured client uses: the CA that signed
// the server's certificate and a client certificate.
func (s *secureEtcd) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: s.caPool, Certificates: []tls.Certificate{s.client}, MinVersion: tls.VersionTLS12}
}

// dial returns a TLS client authenticated as user ("" for none).
func (s *secureEtcd) dial(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints:   []string{s.endpoint},
		TLS:         s.tlsConfig(),
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	}
	if user != "" {
		cfg.Username, cfg.Password = user, authPassword(user)
	}
	cli, err := clientv3.New(cfg)
	require.NoError(t, err)
	return cli
}

// user returns a TLS client authenticated as user, closed on cleanup.
func (s *secureEtcd) user(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	cli := s.dial(t, user)
	t.Cleanup(func() { cli.Close() })
	return cli
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fencekit test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func issueCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, ips []net.IP, usage ...x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func marshalKey(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return der
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}

// sessionOf returns the etcd lease a record is attached to, as root sees it.
func sessionOf(t *testing.T, root *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := root.Get(ctxT(t, 5*time.Second), key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.NotZero(t, resp.Kvs[0].Lease)
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestAuthTLSWorkerHoldsLock: a user whose role covers only the lock prefix
// can do everything a Client does, over TLS: grant and keep alive its
// session, watch, acquire, renew, reenter, release, and revoke on Close.
func TestAuthTLSWorkerHoldsLock(t *testing.T) {
	s := startSecureEtcd(t)
	root := s.user(t, authRoot)
	worker := s.user(t, authWorker)
	ctx := ctxT(t, 30*time.Second)

	locks, err := lease.New(worker, lease.WithTTL(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { locks.Close() })
	l, err := locks.Acquire(ctx, "orders")
	require.NoError(t, err)
	assert.Equal(t, "orders", l.Fence().Lock)
	assert.Positive(t, l.Fence().Revision, "a fencing token is produced")

	keys := records(t, root, "orders")
	require.Len(t, keys, 1)
	sess := sessionOf(t, root, keys[0])

	require.NoError(t, l.Renew(ctx))
	require.NoError(t, l.Reenter(ctx))
	assert.Equal(t, 2, l.Holds())

	// A second acquisition by the same user waits its turn and gets a
	// higher token; TryAcquire meanwhile finds the lock held.
	_, err = locks.TryAcquire(ctx, "orders")
	require.ErrorIs(t, err, lease.ErrHeld)
	next := make(chan *lease.Lease, 1)
	nextErr := make(chan error, 1)
	go func() {
		l2, err := locks.Acquire(ctx, "orders")
		next <- l2
		nextErr <- err
	}()
	waitRecords(t, root, "orders", 2)

	// The background keep-alive (every third of the TTL) renews the session
	// for this user: after more than a TTL the lease is still held.
	time.Sleep(2500 * time.Millisecond)
	assert.False(t, closed(l.Done()), "lease ended: %v", l.Err())
	require.NoError(t, l.Renew(ctx))

	require.NoError(t, l.Release(ctx))
	assert.False(t, closed(l.Done()), "one hold is left")
	require.NoError(t, l.Release(ctx))
	assert.ErrorIs(t, l.Err(), lease.ErrReleased)

	l2 := <-next
	require.NoError(t, <-nextErr)
	assert.Greater(t, l2.Fence().Revision, l.Fence().Revision)
	require.NoError(t, l2.Release(ctx))
	assert.Empty(t, records(t, root, "orders"))

	// Close revokes the session, which needs write permission on every key
	// attached to it: the user has it for its own held record.
	l3, err := locks.Acquire(ctx, "orders")
	require.NoError(t, err)
	require.NoError(t, locks.Close())
	assert.ErrorIs(t, l3.Err(), lease.ErrClosed)
	assert.Empty(t, records(t, root, "orders"), "the revoke deleted the held record")
	ttl, err := root.TimeToLive(ctx, sess)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), ttl.TTL, "the session lease is gone")
}

// TestAuthTLSIntruderDenied: users without write access to the lock prefix
// get an error matching lease.ErrPermissionDenied at once, and cannot read,
// delete, overwrite or revoke the holder's record; the holder does not
// notice them.
func TestAuthTLSIntruderDenied(t *testing.T) {
	s := startSecureEtcd(t)
	root := s.user(t, authRoot)
	worker := s.user(t, authWorker)
	intruder := s.user(t, authIntruder)
	reader := s.user(t, authReader)
	ctx := ctxT(t, 60*time.Second)

	held := newClient(t, worker, lease.WithTTL(2*time.Second))
	l, err := held.Acquire(ctx, "orders")
	require.NoError(t, err)
	keys := records(t, root, "orders")
	require.Len(t, keys, 1)
	key := keys[0]
	before, err := root.Get(ctx, key)
	require.NoError(t, err)
	sess := clientv3.LeaseID(before.Kvs[0].Lease)

	// No role on the prefix: the Client's first read is refused with a
	// typed error, at once rather than at the ctx deadline, leaving nothing
	// behind. (A read-only role: see TestAuthTLSReadOnlyRoleDenied.)
	c := newClient(t, intruder, lease.WithTTL(2*time.Second))
	assertDenied(t, c, "orders")
	assertDenied(t, c, "other-name")
	assert.Equal(t, []string{key}, records(t, root, "orders"), "denied acquisitions leave no record")

	// Raw access to the holder's record by the user with no role on the
	// prefix: reads, watches, deletes, overwrites and transactions are all
	// refused by etcd with rpctypes.ErrPermissionDenied.
	denied := func(what string, err error) {
		t.Helper()
		assert.ErrorIs(t, err, rpctypes.ErrPermissionDenied, what)
	}
	_, err = intruder.Get(ctx, key)
	denied("get record", err)
	_, err = intruder.Get(ctx, lease.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	denied("list prefix", err)
	_, err = intruder.Delete(ctx, key)
	denied("delete record", err)
	_, err = intruder.Delete(ctx, lease.DefaultPrefix, clientv3.WithPrefix())
	denied("delete prefix", err)
	_, err = intruder.Put(ctx, key, "mine#1")
	denied("overwrite record", err)
	_, err = intruder.Put(ctx, lease.DefaultPrefix+"orders/0-1", "mine#1")
	denied("put a record ahead in the queue", err)
	_, err = intruder.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpDelete(key)).Commit()
	denied("txn delete", err)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	wresp, ok := <-intruder.Watch(wctx, lease.DefaultPrefix, clientv3.WithPrefix())
	wcancel()
	require.True(t, ok, "the watch closed without a response")
	// etcd refuses a watch by cancelling it with a reason that is only
	// text: Err is neither rpctypes.ErrPermissionDenied nor a gRPC status
	// with code PermissionDenied, so it cannot be matched as such.
	assert.True(t, wresp.Canceled, "watch prefix not cancelled")
	assert.Error(t, wresp.Err(), "watch prefix")
	assert.Empty(t, wresp.Events, "watch prefix")
	// The read-only role can see the record but not change it.
	_, err = reader.Get(ctx, key)
	require.NoError(t, err)
	_, err = reader.Delete(ctx, key)
	denied("reader delete", err)
	_, err = reader.Put(ctx, key, "mine#1")
	denied("reader overwrite", err)

	// The session lease: a user who learns its id (it is in the record key,
	// and in debug logs) still cannot revoke it, keep it alive or inspect its
	// keys, because etcd requires write (revoke, keep-alive) or read
	// (time-to-live, list) permission on every key attached to it. Granting
	// a lease needs no key permission at all.
	for _, user := range []*clientv3.Client{intruder, reader} {
		_, err = user.Revoke(ctx, sess)
		denied(user.Username+" revoke session", err)
		_, err = user.KeepAliveOnce(ctx, sess)
		denied(user.Username+" keep-alive session", err)
	}
	_, err = intruder.TimeToLive(ctx, sess, clientv3.WithAttachedKeys())
	denied("intruder time-to-live", err)
	_, err = intruder.Leases(ctx)
	denied("intruder list leases", err)
	// Nor can it attach its own key to the holder's session.
	_, err = intruder.Put(ctx, authOtherPrefix+"x", "v", clientv3.WithLease(sess))
	denied("intruder put with the holder's session", err)
	g, err := intruder.Grant(ctx, 5)
	require.NoError(t, err, "granting a lease needs only authentication")
	_, err = intruder.Revoke(ctx, g.ID)
	require.NoError(t, err)

	// The holder saw none of it.
	assert.False(t, closed(l.Done()), "lease ended: %v", l.Err())
	after, err := root.Get(ctx, key)
	require.NoError(t, err)
	require.Len(t, after.Kvs, 1)
	assert.Equal(t, before.Kvs[0].ModRevision, after.Kvs[0].ModRevision, "record changed")
	assert.Equal(t, before.Kvs[0].Value, after.Kvs[0].Value)
	require.NoError(t, l.Renew(ctx))
	require.NoError(t, l.Release(ctx))

	// The intruder's own role works under its own prefix.
	mine := newClient(t, intruder, lease.WithPrefix(authOtherPrefix), lease.WithTTL(2*time.Second))
	ml, err := mine.Acquire(ctx, "orders")
	require.NoError(t, err)
	require.NoError(t, ml.Release(ctx))
}

// TestAuthTLSBadTransport: clients that do not speak TLS, do not trust the
// server's CA, present no client certificate or a wrong password fail to
// connect within their dial timeout, and never reach the data.
func TestAuthTLSBadTransport(t *testing.T) {
	s := startSecureEtcd(t)
	hostPort := strings.TrimPrefix(s.endpoint, "https://")

	cases := []struct {
		name string
		cfg  clientv3.Config
	}{
		{"plain text", clientv3.Config{Endpoints: []string{"http://" + hostPort}}},
		{"plain text, no scheme", clientv3.Config{Endpoints: []string{hostPort}}},
		{"untrusted CA", clientv3.Config{Endpoints: []string{s.endpoint},
			TLS: &tls.Config{Certificates: []tls.Certificate{s.client}, MinVersion: tls.VersionTLS12}}},
		{"no client certificate", clientv3.Config{Endpoints: []string{s.endpoint},
			TLS: &tls.Config{RootCAs: s.caPool, MinVersion: tls.VersionTLS12}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Username, cfg.Password = authWorker, authPassword(authWorker)
			cfg.DialTimeout = 2 * time.Second
			cfg.Logger = zap.NewNop()
			start := time.Now()
			cli, err := clientv3.New(cfg)
			if err == nil {
				// New authenticates before returning, so it should not get
				// here; if it does, no request may succeed either.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err = cli.Get(ctx, lease.DefaultPrefix, clientv3.WithPrefix())
				cancel()
				cli.Close()
			}
			require.Error(t, err)
			assert.Less(t, time.Since(start), 8*time.Second, "not bounded by the dial timeout")
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		_, err := clientv3.New(clientv3.Config{Endpoints: []string{s.endpoint}, TLS: s.tlsConfig(),
			Username: authWorker, Password: "wrong", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		assert.ErrorIs(t, err, rpctypes.ErrAuthFailed)
	})

	t.Run("no user", func(t *testing.T) {
		// TLS is fine but the request carries no user: with a client
		// certificate whose CN is no etcd user, etcd refuses it.
		cli := s.user(t, "")
		_, err := cli.Get(ctxT(t, 5*time.Second), lease.DefaultPrefix, clientv3.WithPrefix())
		require.Error(t, err)
		c := newClient(t, cli)
		_, err = c.Acquire(ctxT(t, 10*time.Second), "orders")
		assert.ErrorIs(t, err, lease.ErrPermissionDenied)
	})
}

// assertDenied checks that Acquire and TryAcquire of name through c fail
// promptly with an error matching lease.ErrPermissionDenied.
func assertDenied(t *testing.T, c *lease.Client, name string) {
	t.Helper()
	for _, try := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		var (
			got *lease.Lease
			err error
		)
		if try {
			got, err = c.TryAcquire(ctx, name)
		} else {
			got, err = c.Acquire(ctx, name)
		}
		cancel()
		assert.Nil(t, got, "try=%v", try)
		assert.ErrorIs(t, err, lease.ErrPermissionDenied, "try=%v", try)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "try=%v", try)
		assert.Less(t, time.Since(start), 5*time.Second, "try=%v: not prompt", try)
	}
}

// TestAuthTLSReadOnlyRoleDenied: a role that may read the lock prefix but
// not write it gets past the Client's first read and its session grant
// (which needs no key permission); writing the record is refused. Acquire
// must report that at once, not retry until the ctx ends.
func TestAuthTLSReadOnlyRoleDenied(t *testing.T) {
	s := startSecureEtcd(t)
	root := s.user(t, authRoot)
	reader := s.user(t, authReader)

	c := newClient(t, reader, lease.WithTTL(2*time.Second))
	assertDenied(t, c, "orders")
	assert.Empty(t, records(t, root, "orders"), "denied acquisitions leave no record")
}

// TestAuthTLSIdleSessionAttach pins an etcd behaviour that least privilege
// does not prevent: anyone authenticated who knows a session's lease id may
// attach a key of their own to it while no key the user cannot write is
// attached, that is while the Client holds nothing. From then on etcd
// refuses the Client's keep-alive, revoke and every put attached to the
// session, because they need write permission on the intruder's key. The
// session cannot be renewed, so it ends at its validity deadline (within a
// TTL) and the Client grants a new one: the attack delays the Client, it
// does not take a lock from it or hang it.
func TestAuthTLSIdleSessionAttach(t *testing.T) {
	s := startSecureEtcd(t)
	root := s.user(t, authRoot)
	worker := s.user(t, authWorker)
	intruder := s.user(t, authIntruder)
	ctx := ctxT(t, 30*time.Second)
	const ttl = 2 * time.Second

	c := newClient(t, worker, lease.WithTTL(ttl))
	l, err := c.Acquire(ctx, "orders")
	require.NoError(t, err)
	sess := sessionOf(t, root, records(t, root, "orders")[0])

	// While a record is attached, attaching is refused (see
	// TestAuthTLSIntruderDenied); once it is released, it is not.
	_, err = intruder.Put(ctx, authOtherPrefix+"x", "v", clientv3.WithLease(sess))
	require.ErrorIs(t, err, rpctypes.ErrPermissionDenied)
	require.NoError(t, l.Release(ctx))
	_, err = intruder.Put(ctx, authOtherPrefix+"x", "v", clientv3.WithLease(sess))
	require.NoError(t, err, "etcd lets any user attach keys to a lease with no keys attached")
	_, err = worker.KeepAliveOnce(ctx, sess)
	require.ErrorIs(t, err, rpctypes.ErrPermissionDenied, "the owner can no longer renew its own session")

	// The Client comes back by itself: an Acquire now returns within about
	// a TTL (today it fails when the session ends; retrying on a new
	// session would be better), and one after that gets the lock.
	start := time.Now()
	if l, err := c.Acquire(ctx, "orders"); err == nil {
		require.NoError(t, l.Release(ctx))
	}
	assert.Less(t, time.Since(start), ttl+time.Second)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		actx, cancel := context.WithTimeout(ctx, ttl)
		defer cancel()
		l, err := c.Acquire(actx, "orders")
		if assert.NoError(ct, err) {
			assert.NotEqual(ct, sess, sessionOf(t, root, records(t, root, "orders")[0]), "a new session")
			assert.NoError(ct, l.Release(ctx))
		}
	}, 3*ttl, 10*time.Millisecond)
}

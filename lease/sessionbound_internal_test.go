package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// boundedClient returns a Client whose sessions take at most bound
// records.
func boundedClient(t *testing.T, cli *clientv3.Client, bound int, opts ...Option) *Client {
	t.Helper()
	c, err := New(cli, opts...)
	require.NoError(t, err)
	c.sessions.bound = bound
	t.Cleanup(func() { c.Close() })
	return c
}

// attached returns the keys etcd attached to session lease id, or nil once
// the lease is gone.
func attached(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	require.NoError(t, err)
	if resp.TTL < 0 {
		return nil
	}
	keys := make([]string, len(resp.Keys))
	for i, k := range resp.Keys {
		keys[i] = string(k)
	}
	return keys
}

func leaseGone(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.TimeToLive(ctx, id)
	require.NoError(t, err)
	return resp.TTL < 0
}

// Records spread over sessions of at most the bound each: N locks take
// ceil(N/bound) sessions, etcd attaches at most bound keys to each, a
// session revoked from outside ends exactly its own leases, and a full
// session is revoked once it holds nothing, while the current one stays.
func TestSessionsAreBounded(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const bound, n = 3, 10
	c := boundedClient(t, cli, bound)

	var leases []*Lease
	bySession := map[clientv3.LeaseID][]*Lease{}
	var order []clientv3.LeaseID
	for i := range n {
		l, err := c.Acquire(ctx, fmt.Sprintf("bounded-%d", i))
		require.NoError(t, err)
		leases = append(leases, l)
		id := l.sess.id
		if bySession[id] == nil {
			order = append(order, id)
		}
		bySession[id] = append(bySession[id], l)
	}
	require.Len(t, order, (n+bound-1)/bound, "N locks take ceil(N/bound) sessions")
	total := 0
	for _, id := range order {
		keys := attached(t, cli, id)
		assert.LessOrEqual(t, len(keys), bound, "session %x", id)
		assert.Len(t, keys, len(bySession[id]), "session %x carries its leases' records", id)
		for _, k := range keys {
			assert.True(t, strings.Contains(k, fmt.Sprintf("%016x-", int64(id))), "key %s on session %x", k, id)
		}
		total += len(keys)
	}
	require.Equal(t, n, total)

	// Revoked from outside: its leases end, nobody else's.
	victim := order[1]
	_, err := cli.Revoke(ctx, victim)
	require.NoError(t, err)
	for _, l := range bySession[victim] {
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatal("a lease of the revoked session did not end")
		}
		assert.ErrorIs(t, l.Err(), ErrLost)
	}
	time.Sleep(200 * time.Millisecond) // room for a wrong end to show
	for _, l := range leases {
		if l.sess.id != victim {
			assert.NoError(t, l.Err(), "a lease of another session ended")
		}
	}

	// A full session that holds nothing any more is revoked; one that
	// still holds a record is not, nor is the current (not full) one.
	idle, busy, cur := order[0], order[2], order[len(order)-1]
	for _, l := range bySession[idle] {
		require.NoError(t, l.Release(ctx))
	}
	require.NoError(t, bySession[busy][0].Release(ctx))
	for _, l := range bySession[cur] {
		require.NoError(t, l.Release(ctx))
	}
	require.Eventually(t, func() bool { return leaseGone(t, cli, idle) }, 10*time.Second, 10*time.Millisecond,
		"the idle full session was not revoked")
	assert.False(t, leaseGone(t, cli, busy), "a full session still holding records was revoked")
	assert.False(t, leaseGone(t, cli, cur), "the current session was revoked")
	assert.Len(t, attached(t, cli, busy), bound-1)

	// The last records of the busy session go: it is revoked too.
	for _, l := range bySession[busy][1:] {
		require.NoError(t, l.Release(ctx))
	}
	require.Eventually(t, func() bool { return leaseGone(t, cli, busy) }, 10*time.Second, 10*time.Millisecond,
		"the full session was not revoked once idle")

	// A set goes on one session, a new one if the current has no room;
	// one larger than the bound on a session of its own.
	s1, err := c.AcquireAll(ctx, []string{"set-a", "set-b"})
	require.NoError(t, err)
	s2, err := c.AcquireAll(ctx, []string{"set-c", "set-d"})
	require.NoError(t, err)
	require.NotEqual(t, s1.leases[0].sess, s2.leases[0].sess, "a set that does not fit goes on a new session")
	big, err := c.AcquireAll(ctx, []string{"big-1", "big-2", "big-3", "big-4", "big-5"})
	require.NoError(t, err)
	assert.Len(t, attached(t, cli, big.leases[0].sess.id), 5)
	for _, s := range []*Set{s1, s2, big} {
		require.NoError(t, s.Release(ctx))
	}
}

// Many acquisitions at once on a bounded Client: no session ever carries
// more than the bound, and when all are released only the current session
// is left.
func TestSessionsBoundedUnderConcurrency(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const bound, n = 4, 64
	c := boundedClient(t, cli, bound)
	leases := make([]*Lease, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var err error
			leases[i], err = c.Acquire(ctx, fmt.Sprintf("conc-%d", i))
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	ids := map[clientv3.LeaseID]int{}
	for _, l := range leases {
		ids[l.sess.id]++
	}
	assert.GreaterOrEqual(t, len(ids), n/bound)
	for id, k := range ids {
		assert.LessOrEqual(t, k, bound)
		assert.LessOrEqual(t, len(attached(t, cli, id)), bound)
	}
	for _, l := range leases {
		require.NoError(t, l.Release(ctx))
	}
	require.Eventually(t, func() bool {
		c.sessions.mu.Lock()
		defer c.sessions.mu.Unlock()
		return len(c.sessions.live) <= 1
	}, 10*time.Second, 10*time.Millisecond, "idle full sessions stay")
}

// Leases of one Client with TTLs 2 s and 5 s live on two sessions of those
// TTLs; cut off from etcd, each ends at its own deadline.
func TestLeaseTTLPerAcquisition(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	p, err := faultproxy.New(strings.TrimPrefix(cl.Members[0].ClientURL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c, err := New(etcdtest.Client(t, cl, p.URL()))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	l2, err := c.Acquire(ctx, "ttl-2", WithLeaseTTL(2*time.Second))
	require.NoError(t, err)
	l5, err := c.Acquire(ctx, "ttl-5", WithLeaseTTL(5*time.Second))
	require.NoError(t, err)
	l2b, err := c.TryAcquire(ctx, "ttl-2b", WithLeaseTTL(2*time.Second))
	require.NoError(t, err)
	require.NotEqual(t, l2.sess, l5.sess)
	require.Equal(t, l2.sess, l2b.sess, "one session per TTL")
	for l, want := range map[*Lease]int64{l2: 2, l5: 5} {
		resp, err := direct.TimeToLive(ctx, l.sess.id)
		require.NoError(t, err)
		assert.Equal(t, want, resp.GrantedTTL)
	}
	require.NoError(t, l2b.Release(ctx))

	time.Sleep(2 * time.Second) // both renewed a few times
	p.Pause()
	cut := time.Now()
	var end2, end5 time.Duration
	for end2 == 0 || end5 == 0 {
		select {
		case <-l2.Done():
			if end2 == 0 {
				end2 = time.Since(cut)
			}
		case <-l5.Done():
			if end5 == 0 {
				end5 = time.Since(cut)
			}
		case <-ctx.Done():
			t.Fatal("a lease cut off from etcd did not end")
		}
		if end2 != 0 && end5 == 0 {
			select {
			case <-l5.Done():
				end5 = time.Since(cut)
			case <-ctx.Done():
				t.Fatal("the 5 s lease did not end")
			}
		}
	}
	t.Logf("cut off: the 2 s lease ended after %v, the 5 s lease after %v", end2, end5)
	assert.ErrorIs(t, l2.Err(), ErrDeadline)
	assert.ErrorIs(t, l5.Err(), ErrDeadline)
	// Each ends within its TTL less its margin of its last renewal, sent
	// at most a third of the TTL before the cut.
	assert.LessOrEqual(t, end2, 2*time.Second, "the 2 s lease outlived its TTL")
	assert.GreaterOrEqual(t, end5, 5*time.Second-5*time.Second/3-500*time.Millisecond-100*time.Millisecond,
		"the 5 s lease ended before its deadline")
	assert.LessOrEqual(t, end5, 5*time.Second, "the 5 s lease outlived its TTL")
	p.Resume()
	p.ResetConns()
}

// Bad TTLs fail before anything is written, with a *TTLError.
func TestLeaseTTLValidation(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(cli, WithSafetyMargin(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Hour,
		2 * time.Second} { // the last: not more than twice the Client's margin
		_, err := c.Acquire(ctx, "bad-ttl", WithLeaseTTL(d))
		var te *TTLError
		require.ErrorAs(t, err, &te, "TTL %v", d)
		assert.ErrorIs(t, err, ErrInvalidOption)
		assert.False(t, errors.Is(err, ErrRetryable))
		assert.Equal(t, d, te.TTL)
		_, err = c.AcquireAll(ctx, []string{"bad-a", "bad-b"}, WithLeaseTTL(d))
		require.ErrorAs(t, err, &te, "set, TTL %v", d)
	}
	resp, err := cli.Get(ctx, DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count, "a refused TTL wrote something")
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Empty(t, leases.Leases, "a refused TTL granted a session")
	l, err := c.Acquire(ctx, "good-ttl", WithLeaseTTL(3*time.Second))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// Semaphores, read/write locks and elections take WithLeaseTTL, and only
// it.
func TestLeaseTTLOfRecipes(t *testing.T) {
	cl := etcdtest.Start(t)
	cli := etcdtest.Client(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(cli)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ttl := WithLeaseTTL(3 * time.Second)

	sem, err := c.Semaphore("ttl-sem", 2)
	require.NoError(t, err)
	p, err := sem.Acquire(ctx, ttl)
	require.NoError(t, err)
	q, err := sem.TryAcquire(ctx, ttl)
	require.NoError(t, err)
	rw, err := c.RWMutex("ttl-rw")
	require.NoError(t, err)
	r, err := rw.RLock(ctx, ttl)
	require.NoError(t, err)
	el, err := c.Election("ttl-el")
	require.NoError(t, err)
	term, err := el.Campaign(ctx, "me", ttl)
	require.NoError(t, err)
	for _, l := range []*Lease{p.l, q.l, r.l, term.l} {
		assert.Equal(t, 3*time.Second, l.sess.ttl)
		resp, err := cli.TimeToLive(ctx, l.sess.id)
		require.NoError(t, err)
		assert.EqualValues(t, 3, resp.GrantedTTL)
	}
	require.NoError(t, p.Release(ctx))
	require.NoError(t, q.Release(ctx))
	require.NoError(t, r.Release(ctx))
	require.NoError(t, term.Resign(ctx))

	for name, call := range map[string]func() error{
		"semaphore max hold":  func() error { _, err := sem.Acquire(ctx, WithMaxHold(time.Second)); return err },
		"write lock metadata": func() error { _, err := rw.TryLock(ctx, WithMetadata("x")); return err },
		"campaign metadata":   func() error { _, err := el.Campaign(ctx, "me", WithMetadata("x")); return err },
		"campaign bad ttl":    func() error { _, err := el.Campaign(ctx, "me", WithLeaseTTL(time.Millisecond)); return err },
		"nil option":          func() error { _, err := rw.Lock(ctx, nil); return err },
	} {
		assert.ErrorIs(t, call(), ErrInvalidOption, name)
	}
}

// A session of another TTL than the Client's is revoked once it has held
// and waited for nothing for idleAfter (and three renewals); while a lease
// of that TTL is held it stays, and the next acquisition with the TTL
// grants a new one. The Client's own session stays however idle.
func TestIdleLeaseTTLSessionRetires(t *testing.T) {
	cl := etcdtest.Start(t)
	direct := etcdtest.Client(t, cl)
	c, err := New(etcdtest.Client(t, cl))
	require.NoError(t, err)
	c.sessions.idleAfter = 0 // three renewals: 2 s at TTL 2 s
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	own, err := c.Acquire(ctx, "idle-own")
	require.NoError(t, err)
	require.NoError(t, own.Release(ctx))
	held, err := c.Acquire(ctx, "idle-held", WithLeaseTTL(2*time.Second))
	require.NoError(t, err)
	time.Sleep(3 * time.Second) // 4 renewals of the 2 s session, all with a record
	require.NoError(t, held.Err(), "a held lease's session retired")
	require.False(t, leaseGone(t, direct, held.sess.id))

	require.NoError(t, held.Release(ctx))
	deadline := time.Now().Add(10 * time.Second)
	for !leaseGone(t, direct, held.sess.id) {
		require.True(t, time.Now().Before(deadline), "the idle 2 s session was not revoked")
		time.Sleep(100 * time.Millisecond)
	}
	assert.False(t, leaseGone(t, direct, own.sess.id), "the Client's own session was revoked")

	again, err := c.Acquire(ctx, "idle-held", WithLeaseTTL(2*time.Second))
	require.NoError(t, err)
	assert.NotEqual(t, held.sess, again.sess, "an acquisition used the retired session")
	resp, err := direct.TimeToLive(ctx, again.sess.id)
	require.NoError(t, err)
	assert.Equal(t, int64(2), resp.GrantedTTL)
	require.NoError(t, again.Release(ctx))
}

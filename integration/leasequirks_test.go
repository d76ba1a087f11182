//go:build unix

package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd's lease quirks, seen from fencekit's waiters.

// leaderRenewMargin is what a dead holder's lock may stay taken beyond
// the TTL after an etcd leader change, besides the election: a new leader
// renews every lease it finds (lessor.Promote, etcd#9395) to its full TTL
// plus one election timeout, and then looks for expired leases every
// 500 ms; 1 s more covers the revoke's raft round, the successor's watch
// and read, and a loaded test machine.
const leaderRenewMargin = etcdElection + 500*time.Millisecond + time.Second

// A holder process is killed (SIGKILL) while a successor waits, and
// halfway through its TTL, while etcd still keeps its session, the etcd
// leader is killed too (3 members, etcd's default timing). The new leader
// renews the dead holder's lease to a full TTL: the successor must start
// within the election, the TTL and leaderRenewMargin of the leader's kill,
// and only once the holder's record is gone (no two holders at once).
func TestLeaderKillWhileLeasePending(t *testing.T) {
	if testing.Short() {
		t.Skip("kills holder processes and etcd members")
	}
	c := startEtcd(t, 3)
	// Five election timeouts: the package doc's TTL rule, so that the
	// successor's own session survives the election.
	const ttl = 5 * time.Second
	tk := newTakeover(t, c, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, tok := startHolder(t, holderConf{Endpoints: c.Endpoints(), Prefix: tk.prefix, TTL: ttl, Clients: 1, Locks: 1, Name: "pending"}, time.Minute)
	dir := tk.prefix + "pending/"
	got, err := tk.queue(ctx, "pending")
	if err != nil {
		t.Fatal(err)
	}
	holderLease := leaseOf(ctx, t, tk.admin, dir, tok)
	killed := h.kill()
	time.Sleep(ttl / 2)
	lead := c.Leader()
	if lead == nil {
		t.Fatal("no etcd leader")
	}
	lead.Kill()
	leaderKilled := time.Now()
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	elected := time.Since(leaderKilled)
	var a admitted
	select {
	case a = <-got:
	case <-ctx.Done():
		t.Fatal("the successor was not admitted")
	}
	if a.err != nil {
		t.Fatalf("successor: %v", a.err)
	}
	checkSoleHolder(ctx, t, tk.admin, dir, a.l.Fence(), holderLease)
	took := a.at.Sub(leaderKilled)
	bound := elected + ttl + leaderRenewMargin
	t.Logf("holder killed; %v later the etcd leader %s was killed, a new one elected after %v; the successor started %v after the leader's kill (bound %v), %v after the holder's (TTL %v: without the leader change, at most TTL + 0.5 s)",
		leaderKilled.Sub(killed).Round(time.Millisecond), lead.Name(), elected.Round(time.Millisecond), took.Round(time.Millisecond),
		bound.Round(time.Millisecond), a.at.Sub(killed).Round(time.Millisecond), ttl)
	if took > bound {
		t.Errorf("the successor started %v after the leader was killed; want within the election (%v) + TTL + %v", took, elected, leaderRenewMargin)
	}
	if err := releaseRetrying(ctx, a.l); err != nil {
		t.Error(err)
	}
}

// leaseOf returns the etcd lease of the record in dir whose creation
// revision is tok's.
func leaseOf(ctx context.Context, t *testing.T, cli *clientv3.Client, dir string, tok fence.Token) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == tok.Revision {
			return clientv3.LeaseID(kv.Lease)
		}
	}
	t.Fatalf("no record of %v under %s", tok, dir)
	return 0
}

// checkSoleHolder checks, just after a successor with token tok was
// admitted, that its record heads dir's queue and that the dead
// holder's lease is gone: nobody else holds the lock.
func checkSoleHolder(ctx context.Context, t *testing.T, cli *clientv3.Client, dir string, tok fence.Token, dead clientv3.LeaseID) {
	t.Helper()
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != tok.Revision {
		t.Errorf("the successor (%v) was admitted while another record heads the queue: %d records", tok, len(resp.Kvs))
	}
	ttl, err := cli.TimeToLive(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Errorf("the successor was admitted while the dead holder's lease lives (TTL %d s left)", ttl.TTL)
	}
}

// massN is the number of holders of TestMassExpiry:
// FENCEKIT_MASS_EXPIRY_N, or 1,000 (500 under the race detector, which
// slows the holder process several times over).
func massN() int {
	if n, err := strconv.Atoi(os.Getenv("FENCEKIT_MASS_EXPIRY_N")); err == nil && n > 0 {
		return n
	}
	if raceDetector {
		return 500
	}
	return 1000
}

// Many holders die at once: one process holds N locks, each on a
// lease.Client of its own (N etcd sessions, TTL 10 s), and is killed
// while a successor waits for each lock. etcd revokes expired leases at a
// bounded rate (at most 500 every 500 ms, 16 at a time through raft), so
// the successors' starts queue once more than 1,000 sessions expire per
// second: every one must start, within the TTL plus 5 ms per holder plus
// 10 s, and the tail is logged. FENCEKIT_MASS_EXPIRY_N sets N (default
// 1,000, 500 under the race detector: 1,000 sessions at TTL 5 s starved
// their renewals in a race-built holder on a 2-core machine at load 35;
// raise it, or lower the TTL, to see the rate limit bite).
func TestMassExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process of thousands of holders")
	}
	c := startEtcd(t, 1)
	n := massN()
	const ttl = 10 * time.Second
	took, revoked := massExpiry(t, c, n, ttl)
	limit := ttl + time.Duration(n)*5*time.Millisecond + 10*time.Second
	first, last := took[0], took[len(took)-1]
	t.Logf("%d holders killed at once: etcd expired %v leases; successors started after p50 %v, p99 %v, first %v, last %v (limit %v): %.0f per second between the first and the last",
		n, revoked, quantile(took, 0.5).Round(time.Millisecond), quantile(took, 0.99).Round(time.Millisecond),
		first.Round(time.Millisecond), last.Round(time.Millisecond), limit, float64(n-1)/(last-first).Seconds())
	if worst := took[len(took)-1]; worst > limit {
		t.Errorf("the last successor started %v after the kill; want within %v", worst, limit)
	}
}

// massExpiry runs one mass expiry of n holders on c and returns the
// successors' start times after the kill, sorted, and the leases etcd
// found expired and revoked meanwhile. It fails tb unless every successor starts.
func massExpiry(tb testing.TB, c *etcdproc.Cluster, n int, ttl time.Duration) ([]time.Duration, float64) {
	tb.Helper()
	tk := newTakeover(tb, c, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), ttl+4*time.Minute)
	defer cancel()
	h, _ := startHolder(tb, holderConf{Endpoints: c.Endpoints(), Prefix: tk.prefix, TTL: ttl, Clients: n, Locks: 1, Name: "mass"}, 3*time.Minute)
	hc := holderConf{Clients: n, Locks: 1, Name: "mass"}
	var (
		mu   sync.Mutex
		ats  []time.Time
		held []*lease.Lease
		errs int
		wg   sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			l, err := tk.succ.Acquire(ctx, hc.lockName(i))
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if errs++; errs == 1 {
					tb.Errorf("successor of %s: %v", hc.lockName(i), err)
				}
				return
			}
			ats = append(ats, at)
			held = append(held, l)
		})
	}
	// Every successor queued behind a live holder; one admitted already
	// means a holder's session ended before the kill (its renewals
	// starved: too many sessions for this machine at this TTL).
	for {
		resp, err := tk.admin.Get(ctx, tk.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		mu.Lock()
		early := len(ats) + errs
		mu.Unlock()
		if early > 0 {
			tb.Fatalf("%d successors started, or failed, before the holders were killed: their holders' sessions ended first", early)
		}
		if err == nil && resp.Count >= int64(2*n) {
			break
		}
		if ctx.Err() != nil {
			tb.Fatalf("the successors did not all queue: %v", ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before, err := etcdCounter(ctx, c, "etcd_debugging_server_lease_expired_total")
	if err != nil {
		tb.Fatal(err)
	}
	killed := h.kill()
	wg.Wait()
	after, err := etcdCounter(ctx, c, "etcd_debugging_server_lease_expired_total")
	if err != nil {
		tb.Fatal(err)
	}
	if errs > 0 {
		tb.Fatalf("%d of %d successors failed", errs, n)
	}
	took := make([]time.Duration, len(ats))
	for i, at := range ats {
		if took[i] = at.Sub(killed); took[i] < 0 {
			tb.Errorf("a successor started %v before its holder was killed", -took[i])
		}
	}
	// Every lock is the successor's alone now.
	if resp, err := tk.admin.Get(ctx, tk.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != int64(n) {
		tb.Errorf("%v records left under the prefix (%v), want the %d successors'", resp, err, n)
	}
	for _, l := range held {
		if err := releaseRetrying(ctx, l); err != nil {
			tb.Fatal(err)
		}
	}
	slices.Sort(took)
	return took, after - before
}

// etcdCounter reads one metric of c's members, summed (etcdproc.Metric).
func etcdCounter(ctx context.Context, c *etcdproc.Cluster, name string) (float64, error) {
	v, err := c.Metric(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("metric %s: %w", name, err)
	}
	return v, nil
}

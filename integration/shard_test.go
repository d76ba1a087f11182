//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/integration/check"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/integration/faults"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// envShardSoak selects the long shard soak: a Go duration (e.g. 10m).
const envShardSoak = "FENCEKIT_SHARD_SOAK"

// shardTTL is the members' TTL: 2 s, or 4 s with the race detector,
// whose slower process (8 members and their writers) would otherwise
// miss renewals on a loaded machine.
var shardTTL = map[bool]time.Duration{false: 2 * time.Second, true: 4 * time.Second}[raceDetector]

// soakShards is the number of shards of the soak and the join test: 256,
// or 64 with the race detector (its 8 members' 256 acquisitions at once
// stalled the instrumented process past its sessions' TTL on a loaded
// 2-core machine).
var soakShards = map[bool]int{false: 256, true: 64}[raceDetector]

// writeEvery is the pace of each owned shard's writer.
var writeEvery = map[bool]time.Duration{false: 40 * time.Millisecond, true: 150 * time.Millisecond}[raceDetector]

// fleet is a group of sharded members in one test process, each with its
// own etcd connection (through proxies, for faults), lease.Client and
// Member, writing every shard it owns through one guard. Every
// ownership is recorded on the process's monotonic clock.
type fleet struct {
	t      testing.TB
	cl     *etcdtest.Cluster
	group  string
	n      int
	guard  *guard.Guard
	opts   []shard.Option
	cfg    func(member string) clientv3.Config // nil: the cluster's
	quiet  bool                                // no writers
	ttl    time.Duration                       // 0: shardTTL
	hist   []*check.History
	seq    atomic.Int64
	writes atomic.Int64 // applied
	stale  atomic.Int64 // refused as stale
	late   atomic.Int64 // writes tried after the shard's context ended
	wg     sync.WaitGroup

	mu    sync.Mutex
	wins  [][]ownWin // per shard
	nodes []*fnode
}

// ownWin is one ownership of a shard: from its lease's admission to the
// moment its context was seen cancelled.
type ownWin struct {
	member     string
	rev        int64
	start, end time.Time
}

type fnode struct {
	name    string
	proxies []*faults.Proxy
	cli     *clientv3.Client
	locks   *lease.Client
	group   *shard.Group
	m       *shard.Member
	done    chan struct{}
	killed  bool
	left    bool
}

func newFleet(t testing.TB, cl *etcdtest.Cluster, group string, n int, opts ...shard.Option) *fleet {
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, cl: cl, group: group, n: n, guard: g, opts: opts, wins: make([][]ownWin, n)}
	for range n {
		f.hist = append(f.hist, &check.History{})
	}
	return f
}

// join starts a member called name.
func (f *fleet) join(name string, weight int) *fnode {
	t := f.t
	nd := &fnode{name: name, done: make(chan struct{})}
	for _, m := range f.cl.Members() {
		p, err := f.cl.NewProxy(m)
		if err != nil {
			t.Fatal(err)
		}
		nd.proxies = append(nd.proxies, p)
	}
	var err error
	if f.cfg == nil {
		nd.cli, err = f.cl.NewClientThrough(nd.proxies...)
	} else {
		cfg := f.cfg(name)
		for _, p := range nd.proxies {
			cfg.Endpoints = append(cfg.Endpoints, "http://"+p.Addr())
		}
		nd.cli, err = clientv3.New(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	ttl := shardTTL
	if f.ttl > 0 {
		ttl = f.ttl
	}
	if nd.locks, err = lease.New(nd.cli, lease.WithTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	opts := append([]shard.Option{shard.WithTTL(ttl)}, f.opts...)
	if os.Getenv("FENCEKIT_SHARD_DEBUG") != "" {
		opts = append(opts, shard.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)))
	}
	if nd.group, err = shard.NewGroup(nd.locks, nd.cli, f.group, shard.Count(f.n), opts...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if nd.m, err = nd.group.Join(ctx, name, weight); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.nodes = append(f.nodes, nd)
	f.mu.Unlock()
	f.wg.Add(1)
	go f.consume(nd)
	return nd
}

// consume records nd's ownerships and writes each shard it owns.
func (f *fleet) consume(nd *fnode) {
	defer f.wg.Done()
	defer close(nd.done)
	for ev := range nd.m.Events() {
		if ev.Kind != shard.Gained {
			continue
		}
		i, _ := strconv.Atoi(ev.Shard)
		l, ok := lease.FromContext(ev.Context, ev.Fence.Lock)
		if !ok {
			panic("shard context without its lease")
		}
		f.mu.Lock()
		f.wins[i] = append(f.wins[i], ownWin{member: nd.name, rev: ev.Fence.Revision, start: l.Acquired()})
		f.mu.Unlock()
		f.wg.Add(2)
		go func() {
			defer f.wg.Done()
			<-ev.Context.Done()
			end := time.Now()
			f.mu.Lock()
			for k := range f.wins[i] {
				if w := &f.wins[i][k]; w.rev == ev.Fence.Revision && w.end.IsZero() {
					w.end = end
				}
			}
			f.mu.Unlock()
		}()
		if f.quiet {
			f.wg.Done()
		} else {
			go f.writer(i, ev.Fence, ev.Context)
		}
	}
}

// writer writes shard i under tok while ctx lives, then once more after
// it ended, as a writer that checked ctx just before a pause would: the
// guard must refuse that write once a successor has written.
func (f *fleet) writer(i int, tok fence.Token, ctx context.Context) {
	defer f.wg.Done()
	tgt := guard.Target{Resource: "shard-" + strconv.Itoa(i), Lock: tok.Lock}
	write := func(c context.Context) {
		elem := f.seq.Add(1)
		err := f.guard.Do(c, tgt, tok, func(context.Context) error {
			f.hist[i].Apply(tok.Revision, elem)
			f.writes.Add(1)
			return nil
		})
		switch {
		case err == nil:
			f.hist[i].Ack(elem)
		case errors.Is(err, fence.ErrStale):
			f.stale.Add(1)
		}
	}
	for ctx.Err() == nil {
		write(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(writeEvery):
		}
	}
	// A writer that checked ctx and then paused (GC, a slow disk) for
	// 100 ms: by then the successor has written, and the guard refuses.
	time.Sleep(100 * time.Millisecond)
	f.late.Add(1)
	write(context.Background())
}

// alive returns the members neither killed nor gone.
func (f *fleet) alive() []*fnode {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fnode
	for _, nd := range f.nodes {
		if !nd.killed && !nd.left {
			out = append(out, nd)
		}
	}
	return out
}

// balanced reports whether the live members own every shard, each
// within one shard of the others (equal weights).
func (f *fleet) balanced() (bool, []int) {
	var counts []int
	sum := 0
	for _, nd := range f.alive() {
		c := len(nd.m.Owned())
		counts = append(counts, c)
		sum += c
	}
	if sum != f.n || len(counts) == 0 {
		return false, counts
	}
	return slices.Max(counts)-slices.Min(counts) <= 1, counts
}

func (f *fleet) waitBalanced(d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		ok, counts := f.balanced()
		if ok {
			return counts
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("not balanced within %v: %v\n%s", d, counts, f.describe())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// describe summarises the group's status, for a failure.
func (f *fleet) describe() string {
	alive := f.alive()
	if len(alive) == 0 {
		return "no members"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := alive[0].group.Status(ctx)
	if err != nil {
		return err.Error()
	}
	assigned, owner := map[string]int{}, map[string]int{}
	moving, waiting := 0, 0
	for _, s := range st.Shards {
		assigned[s.Assigned]++
		owner[s.Owner]++
		if s.Moving() {
			moving++
		}
		waiting += len(s.Waiting)
	}
	return fmt.Sprintf("members %v term %d\nassigned %v\nowners %v\nmoving %d, waiting records %d", st.Members, st.Term, assigned, owner, moving, waiting)
}

func (f *fleet) describeShards(shards map[string]fence.Token) string {
	alive := f.alive()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := alive[0].group.Status(ctx)
	if err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("members %v term %d\n", st.Members, st.Term)
	for _, s := range st.Shards {
		if _, ok := shards[s.Shard]; ok && (s.Moving() || s.Owner == "") {
			out += fmt.Sprintf("%+v\n", s)
		}
	}
	return out
}

// moves returns the number of ownerships so far that went to another
// member than the shard's previous owner (an owner that lost a shard and
// took it again, as after a session's deadline, did not move it).
func (f *fleet) moves() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, ws := range f.wins {
		for k := 1; k < len(ws); k++ {
			if ws[k].member != ws[k-1].member {
				n++
			}
		}
	}
	return n
}

// leave drains nd.
func (f *fleet) leave(nd *fnode) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	f.mu.Lock()
	nd.left = true
	f.mu.Unlock()
	if err := nd.m.Leave(ctx); err != nil {
		f.t.Errorf("leave %s: %v", nd.name, err)
	}
	<-nd.done
	nd.locks.Close()
	nd.cli.Close()
	closeProxies(nd.proxies)
}

// kill cuts nd off from etcd for good: a dead process, as etcd sees it.
func (f *fleet) kill(nd *fnode) {
	f.mu.Lock()
	nd.killed = true
	f.mu.Unlock()
	for _, p := range nd.proxies {
		p.Blackhole()
		p.ResetConns()
	}
}

// stop closes every member left, killed ones included.
func (f *fleet) stop() {
	f.mu.Lock()
	nodes := slices.Clone(f.nodes)
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, nd := range nodes {
		if nd.left {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.m.Close()
			<-nd.done
			nd.locks.Close()
			nd.cli.Close()
			closeProxies(nd.proxies)
		}()
	}
	wg.Wait()
	f.wg.Wait()
}

func closeProxies(ps []*faults.Proxy) {
	for _, p := range ps {
		_ = p.Close()
	}
}

// verify checks every shard's history (tokens never go back, never
// interleave, no acknowledged write lost) and ownerships (tokens rise, no
// two overlap on the monotonic clock), and returns the number of
// ownerships.
func (f *fleet) verify() int {
	t := f.t
	for i, h := range f.hist {
		var final []int64
		for _, w := range h.Applied() {
			final = append(final, w.Elem)
		}
		rep, err := h.CheckFinal(final)
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		if !rep.OK() {
			t.Errorf("shard %d: %v", i, rep)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for i, ws := range f.wins {
		total += len(ws)
		for k := 1; k < len(ws); k++ {
			a, b := ws[k-1], ws[k]
			if b.rev <= a.rev {
				t.Errorf("shard %d: token %d (%s) after %d (%s)", i, b.rev, b.member, a.rev, a.member)
			}
			if a.end.IsZero() || b.start.Before(a.end) {
				t.Errorf("shard %d: %s (token %d) owned it from %v, before %s (token %d) stopped at %v",
					i, b.member, b.rev, b.start, a.member, a.rev, a.end)
			}
		}
	}
	return total
}

// reowned returns, for the shards nd owned when it was killed at at, how
// long after at each was owned again by another member (-1: not yet).
func (f *fleet) reowned(shards map[string]fence.Token, at time.Time) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Duration
	for s := range shards {
		i, _ := strconv.Atoi(s)
		d := time.Duration(-1)
		for _, w := range f.wins[i] {
			if w.start.After(at) {
				d = w.start.Sub(at)
				break
			}
		}
		out = append(out, d)
	}
	return out
}

// TestShardSoak runs 8 members over 256 shards while members join, leave,
// are killed, paused and partitioned, on 1 and 3 etcd members; every
// shard's writes go through a guard. It checks each shard's history
// (integration/check), that ownerships never overlap and their tokens
// rise, that a killed member's shards are owned again within TTL + 1 s,
// and that the fleet balances (max − min ≤ 1) once faults heal. CI runs
// it for about 20 s per cluster size; FENCEKIT_SHARD_SOAK=10m runs longer.
func TestShardSoak(t *testing.T) {
	d := 20 * time.Second
	if v := os.Getenv(envShardSoak); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s=%q: %v", envShardSoak, v, err)
		}
	} else if testing.Short() {
		d = 8 * time.Second
	}
	for _, members := range []int{1, 3} {
		t.Run(fmt.Sprintf("etcd=%d", members), func(t *testing.T) {
			soak(t, etcdtest.Start(t, etcdtest.WithMembers(members)), d)
		})
	}
}

type soakCounts struct {
	joins, leaves, kills, pauses, partitions int
	reown                                    []time.Duration
}

func soak(t *testing.T, cl *etcdtest.Cluster, d time.Duration) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	f := newFleet(t, cl, "soak", soakShards)
	id := 0
	next := func() string { id++; return fmt.Sprintf("m%02d", id) }
	for range 8 {
		f.join(next(), 1)
	}
	f.waitBalanced(15 * time.Second)
	var c soakCounts
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		alive := f.alive()
		nd := alive[rng.IntN(len(alive))]
		hold := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		switch k := rng.IntN(5); {
		case k == 0 && len(alive) < 10:
			f.join(next(), 1)
			c.joins++
		case k == 1 && len(alive) > 5:
			f.leave(nd)
			c.leaves++
		case k == 2 && len(alive) > 5:
			owned, at := nd.m.Owned(), time.Now()
			f.kill(nd)
			c.kills++
			time.Sleep(shardTTL + 1500*time.Millisecond)
			r := f.reowned(owned, at)
			if slices.Contains(r, -1) {
				t.Logf("killed %s at %v: not all owned again:\n%s", nd.name, at, f.describeShards(owned))
			}
			c.reown = append(c.reown, r...)
		case k == 3:
			for _, p := range nd.proxies {
				p.Pause()
			}
			time.Sleep(hold)
			for _, p := range nd.proxies {
				p.Resume()
			}
			c.pauses++
		default:
			// A partition: nothing passes, and the connections it cut
			// are found broken when it heals (the proxy swallowed bytes
			// of their streams; TCP would have timed them out).
			for _, p := range nd.proxies {
				p.Blackhole()
			}
			time.Sleep(hold)
			for _, p := range nd.proxies {
				p.ResetConns()
				p.Resume()
			}
			c.partitions++
		}
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
	}
	counts := f.waitBalanced(6*shardTTL + 10*time.Second)
	f.stop()
	owns := f.verify()
	var worst time.Duration
	for _, r := range c.reown {
		if r < 0 || r > shardTTL+time.Second {
			t.Errorf("a killed member's shard was owned again after %v (TTL %v)", r, shardTTL)
		}
		worst = max(worst, r)
	}
	t.Logf("%d shards, %d joins, %d leaves, %d kills, %d pauses, %d partitions; %d ownerships, %d writes applied, %d refused as stale, %d late writes tried; 0 overlaps; killed members' %d shards owned again within %v at worst; final shares %v",
		f.n, c.joins, c.leaves, c.kills, c.pauses, c.partitions, owns, f.writes.Load(), f.stale.Load(), f.late.Load(), len(c.reown), worst, counts)
}

// TestShardJoinMoves: each join into a settled fleet of 256 shards moves
// at most ceil(256/members) + 1 shards (the plan moves exactly
// floor(256/members) with equal weights), and the fleet is balanced after.
func TestShardJoinMoves(t *testing.T) {
	cl := etcdtest.Start(t)
	f := newFleet(t, cl, "joins", soakShards)
	defer f.stop()
	for i := 1; i <= 4; i++ {
		f.join(fmt.Sprintf("m%d", i), 1)
	}
	f.waitBalanced(10 * time.Second)
	for i := 5; i <= 8; i++ {
		before := f.moves()
		f.join(fmt.Sprintf("m%d", i), 1)
		counts := f.waitBalanced(10 * time.Second)
		time.Sleep(300 * time.Millisecond) // nothing else moves
		moves := f.moves() - before
		bound := (f.n+i-1)/i + 1
		t.Logf("join of member %d moved %d shards (bound %d), shares %v", i, moves, bound, counts)
		if moves > bound {
			t.Errorf("join of member %d moved %d shards, bound %d", i, moves, bound)
		}
	}
	f.verify()
}

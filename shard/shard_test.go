package shard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/internal/testsupport/etcdtest"
	"github.com/fencekit/fencekit/internal/testsupport/testkit"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/shard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.EtcdLeaks...)
}

const ttl = 2 * time.Second

// node is one member's process: its etcd client (through a proxy, for
// faults), lease.Client, Group and Member, and what it has seen.
type node struct {
	proxy *faultproxy.Proxy
	cli   *clientv3.Client
	locks *lease.Client
	group *shard.Group
	m     *shard.Member
	done  chan struct{} // closed once Events is closed
	log   *ownLog
}

// ownLog records every ownership window, per shard, on the one monotonic
// clock of the test process.
type ownLog struct {
	mu   sync.Mutex
	wins map[string][]window
}

type window struct {
	member     string
	rev        int64
	start, end time.Time
}

func (l *ownLog) open(s, member string, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wins[s] = append(l.wins[s], window{member: member, rev: rev, start: time.Now()})
}

// close ends the window of (s, rev) at the moment its context ended.
func (l *ownLog) close(s string, rev int64, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.wins[s] {
		if w := &l.wins[s][i]; w.rev == rev && w.end.IsZero() {
			w.end = end
		}
	}
}

// check returns an error for two windows of one shard that overlap or
// whose tokens do not rise.
func (l *ownLog) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, ws := range l.wins {
		for i := 1; i < len(ws); i++ {
			a, b := ws[i-1], ws[i]
			if b.rev <= a.rev {
				return fmt.Errorf("shard %s: token %d after %d", s, b.rev, a.rev)
			}
			if a.end.IsZero() || b.start.Before(a.end) {
				return fmt.Errorf("shard %s: %s (rev %d) gained it before %s (rev %d) stopped", s, b.member, b.rev, a.member, a.rev)
			}
		}
	}
	return nil
}

func startNode(t *testing.T, c *etcdtest.Cluster, log *ownLog, group string, shards shard.Shards, name string, weight int, opts ...shard.Option) *node {
	t.Helper()
	p, err := faultproxy.New(c.Members[0].ClientURL[len("http://"):])
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	locks, err := lease.New(cli, lease.WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { locks.Close() })
	g, err := shard.NewGroup(locks, cli, group, shards, append([]shard.Option{shard.WithTTL(ttl)}, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := g.Join(ctx, name, weight)
	require.NoError(t, err)
	n := &node{proxy: p, cli: cli, locks: locks, group: g, m: m, done: make(chan struct{}), log: log}
	go n.consume()
	t.Cleanup(func() { m.Close(); <-n.done })
	return n
}

// consume records the member's events: a window opens at Gained and
// closes when the shard's context is cancelled.
func (n *node) consume() {
	defer close(n.done)
	for ev := range n.m.Events() {
		if ev.Kind != shard.Gained {
			continue
		}
		if tok, ok := fence.FromContext(ev.Context); !ok || tok != ev.Fence {
			panic(fmt.Sprintf("context carries %v, %v; event %v", tok, ok, ev.Fence))
		}
		n.log.open(ev.Shard, n.m.Name(), ev.Fence.Revision)
		go func(s string, rev int64, ctx context.Context) {
			<-ctx.Done()
			n.log.close(s, rev, time.Now())
		}(ev.Shard, ev.Fence.Revision, ev.Context)
	}
}

func newLog() *ownLog { return &ownLog{wins: map[string][]window{}} }

// owned returns how many shards each node owns.
func owned(nodes ...*node) []int {
	var out []int
	for _, n := range nodes {
		out = append(out, len(n.m.Owned()))
	}
	return out
}

func settled(total int, want []int, nodes ...*node) func() bool {
	return func() bool {
		got := owned(nodes...)
		sum := 0
		for i := range got {
			sum += got[i]
			if want != nil && got[i] != want[i] {
				return false
			}
		}
		return sum == total
	}
}

func TestOneMemberOwnsAll(t *testing.T) {
	c := etcdtest.Start(t)
	log := newLog()
	a := startNode(t, c, log, "g1", shard.Count(16), "a", 1)
	require.Eventually(t, settled(16, []int{16}, a), 10*time.Second, 10*time.Millisecond)
	for s, tok := range a.m.Owned() {
		lock, ok := a.group.Lock(s)
		require.True(t, ok)
		require.Equal(t, lock, tok.Lock)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.m.Leave(ctx))
	<-a.done
	require.NoError(t, log.check())
	require.Len(t, log.wins, 16)
}

// TestJoinHandsOff: a second and third member join; shards move by
// hand-off, balanced, never overlapping, each moved once.
func TestJoinHandsOff(t *testing.T) {
	c := etcdtest.Start(t)
	log := newLog()
	reg := prometheus.NewRegistry()
	a := startNode(t, c, log, "g2", shard.Count(30), "a", 1, shard.WithMetrics(reg))
	require.Eventually(t, settled(30, []int{30}, a), 10*time.Second, 10*time.Millisecond)
	b := startNode(t, c, log, "g2", shard.Count(30), "b", 1, shard.WithMetrics(reg))
	cc := startNode(t, c, log, "g2", shard.Count(30), "c", 2, shard.WithMetrics(reg))
	require.Eventually(t, settled(30, []int{8, 7, 15}, a, b, cc), 10*time.Second, 10*time.Millisecond, "owned %v", owned(a, b, cc))
	require.NoError(t, log.check())
	moves := 0
	for _, ws := range log.wins {
		moves += len(ws) - 1
	}
	require.LessOrEqual(t, moves, 22, "shards moved more than once")

	st, err := a.group.Status(context.Background())
	require.NoError(t, err)
	require.Len(t, st.Members, 3)
	for _, s := range st.Shards {
		require.False(t, s.Moving(), "%+v", s)
		require.NotZero(t, s.Fence)
	}
	// Leave hands a's shards to b and c.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.m.Leave(ctx))
	require.Eventually(t, settled(30, []int{10, 20}, b, cc), 10*time.Second, 10*time.Millisecond, "owned %v", owned(b, cc))
	require.NoError(t, log.check())
}

// TestDeadMemberShardsMove: a member cut off from etcd loses its shards
// (its contexts end first) and the others own them within TTL + 1 s.
func TestDeadMemberShardsMove(t *testing.T) {
	c := etcdtest.Start(t)
	log := newLog()
	a := startNode(t, c, log, "g3", shard.Count(20), "a", 1)
	b := startNode(t, c, log, "g3", shard.Count(20), "b", 1)
	require.Eventually(t, settled(20, []int{10, 10}, a, b), 10*time.Second, 10*time.Millisecond)
	cut := time.Now()
	b.proxy.Blackhole()
	require.Eventually(t, settled(20, []int{20, 0}, a, b), ttl+3*time.Second, 5*time.Millisecond, "owned %v", owned(a, b))
	took := time.Since(cut)
	t.Logf("all shards owned again %v after the cut", took)
	require.Less(t, took, ttl+time.Second)
	require.NoError(t, log.check())
	b.proxy.Resume()
	// b registers again and gets its share back.
	require.Eventually(t, settled(20, []int{10, 10}, a, b), 3*ttl, 10*time.Millisecond, "owned %v", owned(a, b))
	require.NoError(t, log.check())
}

func TestInvalid(t *testing.T) {
	c := etcdtest.Start(t)
	cli := etcdtest.Client(t, c)
	locks, err := lease.New(cli)
	require.NoError(t, err)
	defer locks.Close()
	for _, tc := range []struct {
		name   string
		shards shard.Shards
		opts   []shard.Option
	}{
		{"a/b", shard.Count(1), nil},
		{"a:b", shard.Count(1), nil},
		{"g", shard.Count(0), nil},
		{"g", shard.Named("x", "x"), nil},
		{"g", shard.Named("x/y"), nil},
		{"g", shard.Count(1), []shard.Option{shard.WithTTL(time.Second)}},
		{"g", shard.Count(1), []shard.Option{shard.WithPrefix("p")}},
	} {
		_, err := shard.NewGroup(locks, cli, tc.name, tc.shards, tc.opts...)
		require.ErrorIs(t, err, shard.ErrInvalidConfig, tc.name)
	}
	g, err := shard.NewGroup(locks, cli, "g", shard.Count(2))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = g.Join(ctx, "m", 0)
	require.ErrorIs(t, err, shard.ErrInvalidConfig)
	m, err := g.Join(ctx, "m", 1)
	require.NoError(t, err)
	_, err = g.Join(ctx, "m", 1)
	require.ErrorIs(t, err, shard.ErrMemberExists)
	go func() {
		for range m.Events() {
		}
	}()
	require.NoError(t, m.Close())
	require.True(t, errors.Is(m.SetWeight(ctx, 2), shard.ErrLeft))
}

// TestSetWeight: raising a member's weight moves shards to it by
// hand-off until each share is within one shard of its weighted fair
// share.
func TestSetWeight(t *testing.T) {
	c := etcdtest.Start(t)
	log := newLog()
	a := startNode(t, c, log, "g4", shard.Count(30), "a", 1)
	b := startNode(t, c, log, "g4", shard.Count(30), "b", 1)
	require.Eventually(t, settled(30, []int{15, 15}, a, b), 10*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.m.SetWeight(ctx, 3))
	// Fair shares 7.5 and 22.5.
	require.Eventually(t, func() bool {
		got := owned(a, b)
		return got[0]+got[1] == 30 && got[0] >= 7 && got[0] <= 8
	}, 10*time.Second, 10*time.Millisecond, "owned %v", owned(a, b))
	require.NoError(t, log.check())
	require.ErrorIs(t, b.m.SetWeight(ctx, shard.MaxWeight+1), shard.ErrInvalidConfig)
}

//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// takeover runs crash takeover trials on one etcd cluster: a holder
// process holds a lock (TTL ttl) that a successor Client in this process
// waits for; the holder is killed (SIGKILL) or frozen (SIGSTOP), and the
// trial measures how long until the successor's Acquire returns.
type takeover struct {
	tb      testing.TB
	etcd    *etcdproc.Cluster
	admin   *clientv3.Client
	succ    *lease.Client
	ttl     time.Duration
	prefix  string
	started time.Time    // when the successor Client was made
	renews  atomic.Int64 // keep-alive requests the successor Client sent
}

func newTakeover(tb testing.TB, c *etcdproc.Cluster, ttl time.Duration) *takeover {
	tb.Helper()
	tk := &takeover{tb: tb, etcd: c, admin: etcdClient(tb, c), ttl: ttl,
		prefix: fmt.Sprintf("takeover-%d/", rand.Uint32())}
	cfg := c.ClientConfig()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainStreamInterceptor(countKeepAlives(&tk.renews))}
	cli, err := clientv3.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	if tk.succ, err = lease.New(cli, lease.WithTTL(ttl), lease.WithPrefix(tk.prefix)); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tk.succ.Close() })
	tk.started = time.Now()
	return tk
}

// keepAlivesPerSecond is the successor Client's keep-alive requests per
// second since it was made: the renewal cost of one Client at this TTL.
func (tk *takeover) keepAlivesPerSecond() float64 {
	return float64(tk.renews.Load()) / time.Since(tk.started).Seconds()
}

// countKeepAlives counts the requests sent on LeaseKeepAlive streams.
func countKeepAlives(n *atomic.Int64) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
			return cs, err
		}
		return countedStream{cs, n}, nil
	}
}

type countedStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countedStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

// trialResult is what one takeover trial saw.
type trialResult struct {
	took  time.Duration // SIGKILL (or SIGSTOP) to the successor's start
	pause bool
	// For a frozen holder, after SIGCONT: its writes the guard refused
	// and those it accepted (must be none) once the successor had written.
	lateRefused, lateAccepted int
	stale                     int // stale writes the register accepted
}

// admitted is a successor's Acquire outcome.
type admitted struct {
	l   *lease.Lease
	err error
	at  time.Time
}

// trial runs one takeover of lock name. The holder process writes to a
// fenced register with its token every 10 ms; once the successor is
// admitted it writes there too. With pause the holder is frozen instead
// of killed and continued after the successor wrote: its late writes must
// all be refused.
func (tk *takeover) trial(ctx context.Context, name string, pause bool) (trialResult, error) {
	res := trialResult{pause: pause}
	reg := newFencedRegister(tk.tb, name)
	h, tok := startHolder(tk.tb, holderConf{Endpoints: tk.etcd.Endpoints(), Prefix: tk.prefix, TTL: tk.ttl,
		Clients: 1, Locks: 1, Name: name, GuardURL: reg.srv.URL}, time.Minute)
	got, err := tk.queue(ctx, name)
	if err != nil {
		return res, err
	}
	for { // the holder writes
		if a, _, _ := reg.counts(tok.Revision); a > 0 {
			break
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Any phase of the holder's renewal cycle (a third of a TTL).
	time.Sleep(rand.N(tk.ttl / 3))
	var stopped time.Time
	if pause {
		h.signal(syscall.SIGSTOP)
		stopped = time.Now()
	} else {
		stopped = h.kill()
	}
	var a admitted
	select {
	case a = <-got:
	case <-time.After(tk.ttl + 30*time.Second):
		return res, fmt.Errorf("successor not admitted within %v of the holder's end", tk.ttl+30*time.Second)
	}
	if a.err != nil {
		return res, fmt.Errorf("successor: %w", a.err)
	}
	res.took = a.at.Sub(stopped)
	if a.l.Fence().Revision <= tok.Revision {
		return res, fmt.Errorf("successor's token %v not above the holder's %v", a.l.Fence(), tok)
	}
	if st, err := reg.write(ctx, a.l.Fence()); err != nil || st != http.StatusNoContent {
		return res, fmt.Errorf("successor's write: status %d, %v", st, err)
	}
	if pause {
		if err := tk.lateWrites(ctx, h, reg, tok, &res); err != nil {
			return res, err
		}
	}
	_, _, res.stale = reg.counts(tok.Revision)
	return res, releaseRetrying(ctx, a.l)
}

// queue starts the successor's Acquire of name, whose holder holds it,
// and returns once its record waits behind the holder's; the channel
// delivers the outcome.
func (tk *takeover) queue(ctx context.Context, name string) (<-chan admitted, error) {
	got := make(chan admitted, 1)
	go func() {
		l, err := tk.succ.Acquire(ctx, name)
		got <- admitted{l, err, time.Now()}
	}()
	return got, waitQueued(ctx, tk.admin, tk.prefix+name+"/", 2)
}

// lateWrites continues the frozen holder and counts its writes after the
// successor's: it waits for at least one to be refused.
func (tk *takeover) lateWrites(ctx context.Context, h *holderProc, reg *fencedRegister, tok fence.Token, res *trialResult) error {
	acc0, ref0, _ := reg.counts(tok.Revision)
	h.signal(syscall.SIGCONT)
	deadline := time.Now().Add(10 * time.Second)
	for {
		acc, ref, _ := reg.counts(tok.Revision)
		res.lateAccepted, res.lateRefused = acc-acc0, ref-ref0
		if res.lateRefused > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A few more of its writes, then stop it.
	time.Sleep(50 * time.Millisecond)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_ = h.w.Stop(sctx)
	acc, ref, _ := reg.counts(tok.Revision)
	res.lateAccepted, res.lateRefused = acc-acc0, ref-ref0
	if res.lateRefused == 0 {
		return errors.New("the continued holder made no late write within 10 s")
	}
	return nil
}

// releaseRetrying releases l, resending while the outcome is unknown.
func releaseRetrying(ctx context.Context, l *lease.Lease) error {
	for {
		err := l.Release(ctx)
		if !errors.Is(err, lease.ErrOutcomeUnknown) || ctx.Err() != nil {
			return err
		}
	}
}

// trials runs kills kill trials and pauses pause trials, parallel at a
// time, and returns their results: kill trials first, in order of
// completion.
func (tk *takeover) trials(ctx context.Context, kills, pauses, parallel int) ([]trialResult, error) {
	var (
		mu   sync.Mutex
		out  []trialResult
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	n := kills + pauses
	for range min(parallel, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				// The pause trials are spread among the kills.
				pause := (i+1)*pauses/n != i*pauses/n
				r, err := tk.trial(ctx, "lock-"+strconv.Itoa(i), pause)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("trial %d: %w", i, err))
				} else {
					out = append(out, r)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortStableFunc(out, func(a, b trialResult) int {
		switch {
		case a.pause == b.pause:
			return 0
		case b.pause:
			return -1
		}
		return 1
	})
	return out, errors.Join(errs...)
}

// The holder process of a lock is killed (SIGKILL) while a successor
// waits, with a 2 s TTL on one member: the successor starts within the
// TTL plus etcd's expiry sweep (500 ms) and a margin for a loaded machine
// (1.5 s; BenchmarkCrashTakeover measures the distribution). Then the
// killed-but-paused variant: the holder is frozen (SIGSTOP) instead,
// the successor takes over and writes through the guard, and the holder
// is continued (SIGCONT): every write it sends with its old token after
// the successor's must be refused as stale, and the register must never
// have accepted a write older than one it accepted before.
func TestCrashTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and freezes holder processes")
	}
	c := startEtcd(t, 1)
	const ttl = 2 * time.Second
	tk := newTakeover(t, c, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kill, err := tk.trial(ctx, "killed", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL: successor started after %v", kill.took.Round(time.Millisecond))
	if limit := ttl + 2*time.Second; kill.took > limit {
		t.Errorf("successor started %v after the holder was killed; want within %v", kill.took, limit)
	}
	pause, err := tk.trial(ctx, "paused", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGSTOP: successor started after %v; after SIGCONT the holder's late writes: %d refused, %d accepted",
		pause.took.Round(time.Millisecond), pause.lateRefused, pause.lateAccepted)
	if pause.lateAccepted != 0 || pause.stale != 0 {
		t.Errorf("the continued holder had %d writes accepted after its successor's (%d stale writes in all); want none",
			pause.lateAccepted, pause.stale)
	}
	if pause.took < ttl*2/3-100*time.Millisecond {
		t.Errorf("successor started %v after the holder froze: before its session could have expired (TTL %v)", pause.took, ttl)
	}
}

// BenchmarkCrashTakeover measures crash takeover: a holder process holds a
// lock that a successor Client in the test process waits for, on etcd
// processes with etcd's default raft timing (100 ms heartbeat, 1 s
// election timeout), fsync on, 1 and 3 members. The holder is killed with
// SIGKILL at a random phase of its renewal cycle; the figure is the time
// from the kill to the successor's Acquire returning, over kill trials
// (FENCEKIT_BENCH_TRIALS each; default 20 at TTL 2 s, 10 at 5 s, 8 at
// 10 s), run 4 at a time, each with its own lock and holder process:
//
//	p50-ms, p99-ms, max-ms   takeover, nearest rank (with fewer than 100
//	                         trials p99 is the largest but one or the max)
//	keepalives/s             keep-alive requests the successor Client sent
//	                         per second over the run: one Client's renewal
//	                         cost at this TTL
//	late-refused             writes of frozen holders refused as stale:
//	                         2 more trials freeze the holder (SIGSTOP)
//	                         instead, the successor takes over and writes
//	                         through guard's HTTP middleware, the holder is
//	                         continued (SIGCONT) and keeps writing with its
//	                         old token
//	stale-writes             writes the register accepted with a token
//	                         below one it accepted before (must be 0)
//
// It ignores b.N.
func BenchmarkCrashTakeover(b *testing.B) {
	for _, members := range []int{1, 3} {
		c := startEtcd(b, members)
		for _, ttl := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second} {
			b.Run(fmt.Sprintf("fencekit/m=%d,ttl=%v", members, ttl), func(b *testing.B) {
				benchTakeover(b, c, ttl)
			})
		}
		c.Close()
	}
}

func benchTakeover(b *testing.B, c *etcdproc.Cluster, ttl time.Duration) {
	kills := map[time.Duration]int{2 * time.Second: 20, 5 * time.Second: 10, 10 * time.Second: 8}[ttl]
	if n, err := strconv.Atoi(os.Getenv("FENCEKIT_BENCH_TRIALS")); err == nil && n > 0 {
		kills = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	tk := newTakeover(b, c, ttl)
	res, err := tk.trials(ctx, kills, 2, 4)
	if err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	var refused, accepted, stale int
	for _, r := range res {
		if !r.pause {
			took = append(took, r.took)
		}
		refused += r.lateRefused
		accepted += r.lateAccepted
		stale += r.stale
	}
	slices.Sort(took)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(quantile(took, 0.5)), "p50-ms")
	b.ReportMetric(ms(quantile(took, 0.99)), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
	b.ReportMetric(float64(len(took)), "trials")
	b.ReportMetric(tk.keepAlivesPerSecond(), "keepalives/s")
	b.ReportMetric(float64(refused), "late-refused")
	b.ReportMetric(float64(accepted+stale), "stale-writes")
	b.Logf("%d members, TTL %v: takeover p50 %v, p99 %v, max %v over %d kills; frozen holders' late writes: %d refused, %d accepted",
		len(c.Members()), ttl, quantile(took, 0.5).Round(time.Millisecond),
		quantile(took, 0.99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), len(took), refused, accepted)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

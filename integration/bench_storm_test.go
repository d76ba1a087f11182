//go:build unix

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/etcdproc"
	"github.com/fencekit/fencekit/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkRevokeStorm measures what an unrelated Client sees when a
// Client holding N locks dies: a holder process takes N = 1k, 10k, 100k
// locks on one lease.Client (TTL 10 s) and is killed with SIGKILL; etcd
// expires its session and deletes every record attached to it. Meanwhile a
// probe Client in the test process, on its own connection, starts one
// cycle (Acquire + Release of a lock of its own) every 5 ms, whether the
// previous ones have returned or not (an open loop: a stall delays every
// cycle started during it, as it would a service's requests), and each
// cycle's latency counts from its scheduled start. etcd is one member
// process, etcd's default raft timing, fsync on.
//
// Each round starts a holder, lets the probe run, and compares two
// windows of the same round: quiet, the W = TTL + 1.5 s before the kill
// (the holder alive with its N locks), and death, from the kill until W
// later or 1 s after the holder's records were seen gone (a watch of one
// of them), whichever is later. Per N it reports, as medians over rounds
// (FENCEKIT_BENCH_ROUNDS; default 5, 3 at 100k):
//
//	quiet-p99-ms, death-p99-ms   the probe's p99 cycle latency per window
//	p99-ratio (-min, -max)       death p99 / quiet p99 of the same round:
//	                             median and min–max over rounds
//	death-max-ms                 the slowest cycle of the death window
//	revoke-apply-ms              etcd's own time applying the revocation:
//	                             the growth of the member's
//	                             etcd_server_apply_duration_seconds_sum
//	                             {op="LeaseRevoke"} over the round
//	revokes                      LeaseRevoke applies in that time
//	kill-to-gone-ms              kill to the watch seeing a record deleted
//
// It ignores b.N. FENCEKIT_BENCH_STORM_N (comma-separated) chooses the Ns.
func BenchmarkRevokeStorm(b *testing.B) {
	c := startEtcd(b, 1)
	ns := []int{1_000, 10_000, 100_000}
	if s := os.Getenv("FENCEKIT_BENCH_STORM_N"); s != "" {
		ns = ns[:0]
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("FENCEKIT_BENCH_STORM_N: %q", s)
			}
			ns = append(ns, n)
		}
	}
	for _, n := range ns {
		b.Run(fmt.Sprintf("fencekit/N=%d", n), func(b *testing.B) {
			rounds := 5
			if n >= 100_000 {
				rounds = 3
			}
			if r, err := strconv.Atoi(os.Getenv("FENCEKIT_BENCH_ROUNDS")); err == nil && r > 0 {
				rounds = r
			}
			benchStorm(b, c, n, rounds)
		})
	}
}

// stormRound is what one round of BenchmarkRevokeStorm measured.
type stormRound struct {
	quietP99, deathP99, deathMax time.Duration
	apply                        time.Duration // etcd's LeaseRevoke apply time
	revokes                      float64
	gone                         time.Duration // kill to a record seen deleted
	cycles, errs                 int
}

func benchStorm(b *testing.B, c *etcdproc.Cluster, n, rounds int) {
	// lease's default: with 2 s and 5 s, a holder taking 100k locks on a
	// loaded machine (load 35 on 2 cores) lost its session before it held
	// them all.
	const ttl = 10 * time.Second
	admin := etcdClient(b, c)
	probeCli := etcdClient(b, c)
	probe, err := lease.New(probeCli, lease.WithPrefix("storm-probe/"))
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close()
	var rs []stormRound
	for r := range rounds {
		rs = append(rs, stormOnce(b, c, admin, probe, n, ttl, r))
		last := rs[len(rs)-1]
		b.Logf("N=%d round %d: p99 quiet %v, death %v (max %v); etcd applied %v revokes in %v; a record gone %v after the kill; %d cycles, %d errors",
			n, r, last.quietP99.Round(10*time.Microsecond), last.deathP99.Round(10*time.Microsecond), last.deathMax.Round(10*time.Microsecond),
			last.revokes, last.apply.Round(10*time.Microsecond), last.gone.Round(time.Millisecond), last.cycles, last.errs)
	}
	med := func(f func(stormRound) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		slices.Sort(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	ratios := make([]float64, len(rs))
	errs := 0
	for i, r := range rs {
		ratios[i] = float64(r.deathP99) / float64(r.quietP99)
		errs += r.errs
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(med(func(r stormRound) float64 { return ms(r.quietP99) }), "quiet-p99-ms")
	b.ReportMetric(med(func(r stormRound) float64 { return ms(r.deathP99) }), "death-p99-ms")
	b.ReportMetric(med(func(r stormRound) float64 { return float64(r.deathP99) / float64(r.quietP99) }), "p99-ratio")
	b.ReportMetric(slices.Min(ratios), "p99-ratio-min")
	b.ReportMetric(slices.Max(ratios), "p99-ratio-max")
	b.ReportMetric(med(func(r stormRound) float64 { return ms(r.deathMax) }), "death-max-ms")
	b.ReportMetric(med(func(r stormRound) float64 { return ms(r.apply) }), "revoke-apply-ms")
	b.ReportMetric(med(func(r stormRound) float64 { return r.revokes }), "revokes")
	b.ReportMetric(med(func(r stormRound) float64 { return ms(r.gone) }), "kill-to-gone-ms")
	b.ReportMetric(float64(len(rs)), "rounds")
	if errs > 0 {
		b.Errorf("%d probe cycles failed", errs)
	}
}

// stormOnce runs one round of BenchmarkRevokeStorm.
func stormOnce(b *testing.B, c *etcdproc.Cluster, admin *clientv3.Client, probe *lease.Client, n int, ttl time.Duration, round int) stormRound {
	const every = 5 * time.Millisecond
	window := ttl + 1500*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("storm-%d-%d/", rand.Uint32(), round)
	h, _ := startHolder(b, holderConf{Endpoints: c.Endpoints(), Prefix: prefix, TTL: ttl, Clients: 1, Locks: n, Name: "held"}, 15*time.Minute)
	one, err := admin.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err != nil || len(one.Kvs) == 0 {
		b.Fatalf("no record under %s: %v", prefix, err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	deleted := admin.Watch(wctx, string(one.Kvs[0].Key), clientv3.WithRev(one.Header.Revision+1), clientv3.WithFilterPut())
	p := startProbe(ctx, probe, every)
	time.Sleep(500 * time.Millisecond) // the probe's first cycles
	quietFrom := time.Now()
	time.Sleep(window)
	before, err := revokeApply(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	killed := h.kill()
	var gone time.Time
	select {
	case wr := <-deleted:
		if err := wr.Err(); err != nil || len(wr.Events) == 0 {
			b.Fatalf("watch of a held record: %v", err)
		}
		gone = time.Now()
	case <-time.After(ttl + 5*time.Minute):
		b.Fatal("the killed holder's records were not deleted within 5 minutes of its TTL")
	}
	deathTo := killed.Add(window)
	if g := gone.Add(time.Second); g.After(deathTo) {
		deathTo = g
	}
	time.Sleep(time.Until(deathTo))
	samples := p.stop()
	after, err := revokeApply(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	if err := waitGone(ctx, admin, prefix); err != nil {
		b.Fatal(err)
	}
	quiet, death := within(samples, quietFrom, quietFrom.Add(window)), within(samples, killed, deathTo)
	r := stormRound{quietP99: quantile(quiet, 0.99), deathP99: quantile(death, 0.99), deathMax: death[len(death)-1],
		apply:   time.Duration((after.sum - before.sum) * float64(time.Second)),
		revokes: after.count - before.count, gone: gone.Sub(killed), cycles: len(samples)}
	for _, s := range samples {
		if s.err != nil {
			r.errs++
			if r.errs == 1 {
				b.Logf("probe cycle: %v", s.err)
			}
		}
	}
	return r
}

// within returns the sorted latencies of the samples scheduled in
// [from, to).
func within(ss []sample, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		if !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s.lat)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		out = append(out, 0)
	}
	return out
}

// waitGone waits until nothing is left under prefix.
func waitGone(ctx context.Context, cli *clientv3.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("records left under %s: %w", prefix, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sample is one probe cycle: when it was scheduled, its latency from
// then, and its error.
type sample struct {
	at  time.Time
	lat time.Duration
	err error
}

// probe runs open-loop cycles (see BenchmarkRevokeStorm).
type probe struct {
	mu      sync.Mutex
	samples []sample
	quit    chan struct{}
	loop    sync.WaitGroup
	cycles  sync.WaitGroup
}

// startProbe starts a cycle of c every period: cycle i at start + i×every,
// each in its own goroutine, on 1,024 lock names in turn.
func startProbe(ctx context.Context, c *lease.Client, every time.Duration) *probe {
	p := &probe{quit: make(chan struct{})}
	start := time.Now()
	p.loop.Go(func() {
		for i := 0; ; i++ {
			at := start.Add(time.Duration(i) * every)
			select {
			case <-p.quit:
				return
			case <-time.After(time.Until(at)):
			}
			name := "probe-" + strconv.Itoa(i%1024)
			p.cycles.Go(func() {
				l, err := c.Acquire(ctx, name)
				if err == nil {
					err = releaseRetrying(ctx, l)
				}
				lat := time.Since(at)
				p.mu.Lock()
				p.samples = append(p.samples, sample{at, lat, err})
				p.mu.Unlock()
			})
		}
	})
	return p
}

// stop ends the probe, waits for its cycles under way and returns every
// sample.
func (p *probe) stop() []sample {
	close(p.quit)
	p.loop.Wait()
	p.cycles.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.samples
}

// applyTotals are the sum (seconds) and count of etcd's LeaseRevoke applies.
type applyTotals struct{ sum, count float64 }

// revokeApply reads, from every running member's metrics, the totals of
// etcd_server_apply_duration_seconds for op="LeaseRevoke", summed over
// members.
func revokeApply(ctx context.Context, c *etcdproc.Cluster) (applyTotals, error) {
	var t applyTotals
	for _, m := range c.Members() {
		if !m.Running() {
			continue
		}
		body, err := httpGet(ctx, m.MetricsURL()+"/metrics")
		if err != nil {
			return t, err
		}
		sc := lineScanner(strings.NewReader(body))
		for sc.Scan() {
			l := sc.Text()
			if !strings.Contains(l, `op="LeaseRevoke"`) {
				continue
			}
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				continue
			}
			switch {
			case strings.HasPrefix(l, "etcd_server_apply_duration_seconds_sum{"):
				t.sum += v
			case strings.HasPrefix(l, "etcd_server_apply_duration_seconds_count{"):
				t.count += v
			}
		}
		if err := sc.Err(); err != nil {
			return t, err
		}
	}
	return t, nil
}

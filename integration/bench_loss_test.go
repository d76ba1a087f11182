//go:build unix

package integration_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/faultproxy"
	"github.com/fencekit/fencekit/lease"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// trials is the number of trials of a LossSignal case:
// FENCEKIT_BENCH_TRIALS, or def.
func trials(def int) int {
	n, err := strconv.Atoi(os.Getenv("FENCEKIT_BENCH_TRIALS"))
	if err != nil || n < 1 {
		return def
	}
	return n
}

// BenchmarkLossSignal measures how a holder learns it lost its lease; it
// ignores b.N and runs a fixed number of trials per case
// (FENCEKIT_BENCH_TRIALS overrides it).
//
//   - revoke: an external revoke of the holder's session lease; ms/signal
//     is the median time from sending the revoke to Done, max-ms/signal
//     the slowest trial.
//   - delete, overwrite (fencekit only: etcd's Mutex never notices): the
//     holder's record is deleted, or overwritten with another value, by
//     another etcd client; the same figures.
//   - partition: the holder's connection is paused; another client
//     acquires as soon as it can; margin_ms is how long before that
//     acquisition the holder's Done closed in the worst trial (negative:
//     the holder still believed it held the lock while another did),
//     median-margin_ms the median, early_pct the share of trials where
//     Done came first.
func BenchmarkLossSignal(b *testing.B) {
	cl, cli := benchEtcd(b)
	// Benchmarks have no -timeout: bound every wait.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	target := strings.TrimPrefix(cl.Members()[0].ClientURL(), "http://")

	b.Run("fencekit/revoke", func(b *testing.B) {
		c := benchLocks(b, cli, lease.WithTTL(5*time.Second), lease.WithPrefix("loss-revoke-fk/"))
		signalTrials(b, trials(10), func() (<-chan struct{}, func() error) {
			l, err := c.Acquire(ctx, "lock")
			if err != nil {
				b.Fatal(err)
			}
			id := clientv3.LeaseID(recordOf(b, cli, "loss-revoke-fk/", l).Lease)
			return l.Done(), func() error { _, err := cli.Revoke(ctx, id); return err }
		}, nil)
	})
	b.Run("etcdmutex/revoke", func(b *testing.B) {
		var last *concurrency.Session
		signalTrials(b, trials(10), func() (<-chan struct{}, func() error) {
			if last != nil {
				last.Close()
			}
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
			if err != nil {
				b.Fatal(err)
			}
			last = s
			if err := concurrency.NewMutex(s, "loss-revoke-em/lock").Lock(ctx); err != nil {
				b.Fatal(err)
			}
			return s.Done(), func() error { _, err := cli.Revoke(ctx, s.Lease()); return err }
		}, nil)
		last.Close()
	})
	for _, kind := range []string{"delete", "overwrite"} {
		b.Run("fencekit/"+kind, func(b *testing.B) {
			prefix := "loss-" + kind + "-fk/"
			c := benchLocks(b, cli, lease.WithTTL(5*time.Second), lease.WithPrefix(prefix))
			signalTrials(b, trials(10), func() (<-chan struct{}, func() error) {
				l, err := c.Acquire(ctx, "lock")
				if err != nil {
					b.Fatal(err)
				}
				key := string(recordOf(b, cli, prefix, l).Key)
				if kind == "delete" {
					return l.Done(), func() error { _, err := cli.Delete(ctx, key); return err }
				}
				return l.Done(), func() error {
					_, err := cli.Put(ctx, key, "intruder#1", clientv3.WithIgnoreLease())
					return err
				}
			}, func() error {
				// An overwritten record is no longer the holder's to
				// delete, and would head the queue of the next trial:
				// the intruder removes it.
				_, err := cli.Delete(ctx, prefix, clientv3.WithPrefix())
				return err
			})
		})
	}
	b.Run("fencekit/partition", func(b *testing.B) {
		lossTrials(b, trials(6), target, func(via, direct *clientv3.Client) (<-chan struct{}, func() error, func()) {
			holder, err := lease.New(via, lease.WithTTL(time.Second), lease.WithPrefix("loss-part-fk/"))
			if err != nil {
				b.Fatal(err)
			}
			other, err := lease.New(direct, lease.WithTTL(time.Second), lease.WithPrefix("loss-part-fk/"))
			if err != nil {
				b.Fatal(err)
			}
			l, err := holder.Acquire(ctx, "lock")
			if err != nil {
				b.Fatal(err)
			}
			acquire := func() error {
				l2, err := other.Acquire(ctx, "lock")
				if err == nil {
					err = l2.Release(ctx)
				}
				return err
			}
			return l.Done(), acquire, func() { holder.Close(); other.Close() }
		})
	})
	b.Run("etcdmutex/partition", func(b *testing.B) {
		lossTrials(b, trials(6), target, func(via, direct *clientv3.Client) (<-chan struct{}, func() error, func()) {
			hs, err := concurrency.NewSession(via, concurrency.WithTTL(1))
			if err != nil {
				b.Fatal(err)
			}
			if err := concurrency.NewMutex(hs, "loss-part-em/lock").Lock(ctx); err != nil {
				b.Fatal(err)
			}
			others, err := concurrency.NewSession(direct, concurrency.WithTTL(1))
			if err != nil {
				b.Fatal(err)
			}
			acquire := func() error {
				m := concurrency.NewMutex(others, "loss-part-em/lock")
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			}
			return hs.Done(), acquire, func() { hs.Orphan(); others.Close() }
		})
	})
}

// recordOf returns l's record: the key under prefix whose creation
// revision is l's fencing token (public facts only, whatever the record
// layout under the prefix).
func recordOf(b *testing.B, cli *clientv3.Client, prefix string, l *lease.Lease) *mvccpb.KeyValue {
	b.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		b.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == l.Fence().Revision {
			return kv
		}
	}
	b.Fatalf("no record under %s created at revision %d", prefix, l.Fence().Revision)
	return nil
}

// signalTrials runs n trials of setup, which holds a lock and returns its
// Done channel and the action that takes it away, and reports the median
// and the slowest time from starting the action to Done. after, when not
// nil, runs after each trial, untimed.
func signalTrials(b *testing.B, n int, setup func() (<-chan struct{}, func() error), after func() error) {
	b.Helper()
	lat := make([]float64, 0, n)
	for range n {
		done, take := setup()
		start := time.Now()
		if err := take(); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Fatal("Done never closed")
		}
		lat = append(lat, ms(time.Since(start)))
		if after != nil {
			if err := after(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(lat), "ms/signal")
	b.ReportMetric(slices.Max(lat), "max-ms/signal")
	b.ReportMetric(float64(n), "trials")
}

// lossTrials runs partition trials: setup gets a client through a fresh
// proxy and a direct one, and returns the holder's Done, an acquire by
// another client, and a cleanup.
func lossTrials(b *testing.B, n int, target string,
	setup func(via, direct *clientv3.Client) (<-chan struct{}, func() error, func())) {
	b.Helper()
	var (
		early   int
		margins []float64
	)
	for range n {
		p, err := faultproxy.New(target)
		if err != nil {
			b.Fatal(err)
		}
		via := benchClient(b, p.URL())
		direct := benchClient(b, "http://"+target)
		done, acquire, cleanup := setup(via, direct)
		p.Pause()
		var doneAt time.Time
		seen := make(chan struct{})
		go func() { <-done; doneAt = time.Now(); close(seen) }()
		if err := acquire(); err != nil {
			b.Fatal(err)
		}
		acquiredAt := time.Now()
		select {
		case <-seen:
		case <-time.After(10 * time.Second):
			b.Fatal("holder's Done never closed")
		}
		m := acquiredAt.Sub(doneAt)
		if m > 0 {
			early++
		}
		margins = append(margins, ms(m))
		p.Resume()
		cleanup()
		via.Close()
		direct.Close()
		p.Close()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(slices.Min(margins), "margin_ms")
	b.ReportMetric(median(margins), "median-margin_ms")
	b.ReportMetric(100*float64(early)/float64(n), "early_pct")
	b.ReportMetric(float64(n), "trials")
}

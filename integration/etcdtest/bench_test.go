package etcdtest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fencekit/integration/etcdtest"
)

// BenchmarkStart measures the time from StartCluster to a ready cluster
// (Close is not timed) and reports the median as ms/start-median.
func BenchmarkStart(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  etcdtest.Config
	}{
		{"members=1", etcdtest.Config{}},
		{"members=1/nofsync", etcdtest.Config{NoFsync: true}},
		{"members=3", etcdtest.Config{Members: 3}},
		{"members=3/nofsync", etcdtest.Config{Members: 3, NoFsync: true}},
		{"members=1/tls+auth", etcdtest.Config{TLS: true, RootPassword: "pw"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				cfg := tc.cfg
				cfg.Dir = b.TempDir()
				start := time.Now()
				c, err := etcdtest.StartCluster(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				b.StopTimer()
				c.Close()
				b.StartTimer()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "ms/start-median")
		})
	}
}

package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkDoStale is the cost of the refused path: Do with a token older
// than the resource's mark, on a MemoryStore, without and with the
// Guard's metrics. Run it with -benchmem: the allocations are the figure
// to watch.
func BenchmarkDoStale(b *testing.B) {
	ctx := context.Background()
	write := func(context.Context) error { return nil }
	for _, name := range []string{"plain", "metrics"} {
		b.Run(name, func(b *testing.B) {
			var opts []guard.Option
			if name == "metrics" {
				opts = append(opts, guard.WithMetrics(prometheus.NewRegistry()))
			}
			g, err := guard.New(guard.NewMemoryStore(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			tgt := guard.Target{Resource: "orders", Lock: "orders-lock"}
			if err := g.Do(ctx, tgt, fence.Token{Lock: tgt.Lock, Revision: 100}, write); err != nil {
				b.Fatal(err)
			}
			stale := fence.Token{Lock: tgt.Lock, Revision: 42}
			b.ReportAllocs()
			for b.Loop() {
				if err := g.Do(ctx, tgt, stale, write); !errors.Is(err, fence.ErrStale) {
					b.Fatalf("Do with a stale token: %v, want fence.ErrStale", err)
				}
			}
		})
	}
}

//go:build unix

package integration_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks only run under -bench; these tests keep their harness
// (interleave, relay) honest in every `go test` run, without etcd.

// TestInterleaveReportsMediansAndRatios runs two arms whose operations take
// 2 ms and 1 ms and checks the reported figures.
func TestInterleaveReportsMediansAndRatios(t *testing.T) {
	var order []string
	sleepy := func(name string, d time.Duration) arm {
		return arm{name, func(ops int) error {
			order = append(order, name)
			for range ops {
				time.Sleep(d)
			}
			return nil
		}}
	}
	res := testing.Benchmark(func(b *testing.B) {
		order = order[:0]
		interleave(b, plan{rounds: 4, ops: 5, warmup: 1}, []arm{
			sleepy("slow", 2*time.Millisecond), sleepy("fast", time.Millisecond),
		}, [][2]string{{"slow", "fast"}})
	})
	// Warm-up slow fast, then the first arm rotates each round.
	if got, want := order, []string{"slow", "fast", "slow", "fast", "fast", "slow", "slow", "fast", "fast", "slow"}; !equal(got, want) {
		t.Errorf("block order %v, want %v", got, want)
	}
	x := res.Extra
	if x["rounds"] != 4 || x["ops/block"] != 5 {
		t.Errorf("rounds %v, ops/block %v", x["rounds"], x["ops/block"])
	}
	if v := x["slow-ms/op"]; v < 2 || v > 4 {
		t.Errorf("slow-ms/op = %v, want about 2", v)
	}
	r, lo, hi := x["ratio:slow/fast"], x["ratio:slow/fast-min"], x["ratio:slow/fast-max"]
	if r < 1.3 || r > 2.7 || lo > r || hi < r {
		t.Errorf("ratio %v (%v–%v), want about 2 within its spread", r, lo, hi)
	}
	if _, ok := x["cpuratio:slow/fast"]; !ok {
		t.Error("no cpuratio")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRelayCountsHandoffs passes a sync.Mutex among 4 contenders and
// checks that each block is exactly ops acquisitions, that the lock stays
// held between blocks, and that stop lets every contender leave.
func TestRelayCountsHandoffs(t *testing.T) {
	var (
		mu       sync.Mutex
		acquired atomic.Int64
		holding  atomic.Int64
	)
	r, err := startRelay(context.Background(), 4, func(ctx context.Context, i int) (func() error, error) {
		mu.Lock()
		if holding.Add(1) != 1 {
			t.Error("two holders at once")
		}
		acquired.Add(1)
		return func() error { holding.Add(-1); mu.Unlock(); return nil }, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := acquired.Load(); got != 1 {
		t.Fatalf("%d acquisitions before the first block, want 1", got)
	}
	for _, ops := range []int{3, 10} {
		before := acquired.Load()
		if err := r.block(ops); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // nobody may acquire while parked
		if got := acquired.Load() - before; got != int64(ops) {
			t.Errorf("block(%d) made %d acquisitions", ops, got)
		}
		if holding.Load() != 1 {
			t.Error("the lock is not held between blocks")
		}
	}
	done := make(chan struct{})
	go func() { r.stop(t); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return")
	}
	if holding.Load() != 0 {
		t.Error("the lock is held after stop")
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const sample = `goos: linux
BenchmarkCycle/fencekit/uncontended-2   100  1800000 ns/op
BenchmarkCycle/fencekit/uncontended-2   100  1600000 ns/op
BenchmarkCycle/fencekit/uncontended-2   100  9900000 ns/op
BenchmarkCycle/etcdmutex/uncontended-2  100  1700000 ns/op
BenchmarkCycle/floor/uncontended-2      100  1700000 ns/op
BenchmarkHandoff/fencekit/n=2-2   10  1 ns/op  1.5 ms/handoff
BenchmarkHandoff/etcdmutex/n=2-2  10  1 ns/op  45 ms/handoff
BenchmarkHandoff/fencekit/n=16-2  10  1 ns/op  4.0 ms/handoff
BenchmarkGuard/floor/http-2     1000  200 ns/op
BenchmarkGuard/fencekit/http-2  1000  9000 ns/op
PASS
`

func TestTable(t *testing.T) {
	vals, order, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := vals[key{"Cycle", "uncontended", "ns/op"}]["fencekit"]; len(got) != 3 {
		t.Fatalf("fencekit cycle values: %v", got)
	}
	var out bytes.Buffer
	write(&out, vals, order, "test machine", "cmd")
	table := out.String()
	for _, want := range []string{
		// median of 1.6, 1.8, 9.9 ms is 1.8 ms: the outlier does not count
		"| Cycle | uncontended | ns/op | 1.800 ms | 1.700 ms | 1.700 ms | 1.06x | 1.06x | MISSED: <= 1.10x floor and <= etcdmutex |",
		"met: <= 2x cycle (0.83x); >= 20x faster than etcdmutex (30.0x)",
		"MISSED: <= 2x cycle (2.22x)",
		"MISSED: < 5 µs added (8.80 µs)",
		"on test machine",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
		ok   bool
	}{{nil, 0, false}, {[]float64{3}, 3, true}, {[]float64{4, 1, 3, 2}, 2.5, true}} {
		got, ok := median(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("median(%v) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// Package promtest reads metric values back from a Prometheus registry in
// tests.
package promtest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Values returns the series of the metric family name in reg, keyed by
// their label pairs in name order ("op=fence,outcome=stale"; "" without
// labels): a counter's or a gauge's value, or a histogram's sample count.
func Values(t testing.TB, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue()
			if g := m.GetGauge(); g != nil {
				v = g.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			out[strings.Join(kv, ",")] = v
		}
	}
	return out
}

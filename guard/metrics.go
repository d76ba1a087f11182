package guard

import (
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Guard's Prometheus collectors. The outcome label takes the
// fixed words of fence.Outcome.String; the resource label exists only with
// WithResourceLabel.
type metrics struct {
	decisions *prometheus.CounterVec // outcome[, resource]
	resource  bool
}

func newMetrics(resource bool) *metrics {
	labels := []string{"outcome"}
	help := "Fencing decisions by outcome: accepted, stale, wrong_lock, mark_ahead (stale, but the current holder's: reset the mark), unverified (newer token the verifier did not confirm), missing, malformed, failed (store or verifier error, invalid target or request ended while waiting)."
	if resource {
		labels = append(labels, "resource")
		help += " Labelled with the resource name."
	}
	return &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_guard_decisions_total",
			Help: help,
		}, labels),
		resource: resource,
	}
}

// register registers m's collector on reg. A collector that an earlier
// Guard registered there with the same labels is shared, so several Guards
// can report to one registry. A Guard with WithResourceLabel and one
// without cannot share a registry: the second fails to register.
func (m *metrics) register(reg prometheus.Registerer) error {
	decisions, err := promreg.Register(reg, m.decisions)
	if err != nil {
		return fmt.Errorf("guard: register metrics: %w", err)
	}
	m.decisions = decisions
	if !m.resource {
		for _, o := range fence.Outcomes() {
			m.decisions.WithLabelValues(o.String())
		}
	}
	return nil
}

func (m *metrics) observe(e event) {
	if m.resource {
		m.decisions.WithLabelValues(e.outcome.String(), e.resource).Inc()
		return
	}
	m.decisions.WithLabelValues(e.outcome.String()).Inc()
}

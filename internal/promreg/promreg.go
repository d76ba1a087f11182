// Package promreg registers fencekit's Prometheus collectors on a caller's
// registry, sharing a collector that an earlier instance registered there.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it; when reg already holds an
// equal collector (same names, labels and help, registered by an earlier
// instance) it returns that one instead, so several instances report to
// one registry. Any other failure is returned as the error, with c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

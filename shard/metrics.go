package shard

import (
	"errors"

	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Group's Prometheus collectors. Label values are group and
// member names (chosen by the operator, one per process) and fixed words,
// never shard names or tokens.
type metrics struct {
	owned *prometheus.GaugeVec     // group, member
	moves *prometheus.CounterVec   // group, cause
	wait  *prometheus.HistogramVec // cause
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencekit_shard_owned",
			Help: "Shards a member owns now (holds the lock of, with its context live).",
		}, []string{"group", "member"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_shard_moves_total",
			Help: "Shards the leader's assignments gave a new owner, by cause: initial (had none), rebalance (a join or a weight change), departed (the owner's registration ended: death or Close), drain (the owner is leaving).",
		}, []string{"group", "cause"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencekit_shard_gain_wait_seconds",
			Help:    "Time from an assignment giving this member a shard to owning it, by cause: handoff (an owner was asked to let go), free (nobody held the lock when asked, or its owner's session had to expire).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"cause"}),
	}
	if reg == nil {
		return m, nil
	}
	var err, e error
	m.owned, e = promreg.Register(reg, m.owned)
	err = errors.Join(err, e)
	m.moves, e = promreg.Register(reg, m.moves)
	err = errors.Join(err, e)
	m.wait, e = promreg.Register(reg, m.wait)
	return m, errors.Join(err, e)
}

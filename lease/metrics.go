package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Client's Prometheus collectors. Label values are fixed
// words: no lock names, no tokens.
type metrics struct {
	acquisitions *prometheus.CounterVec // outcome: acquired, held, cancelled, error
	wait         prometheus.Histogram
	hold         prometheus.Histogram
	results      *prometheus.CounterVec // op, outcome: done, not_owner, not_found, unknown, denied
	losses       *prometheus.CounterVec // cause
	duplicates   prometheus.Counter
	foreign      prometheus.Counter
	leading      prometheus.Gauge
	terms        prometheus.Counter
	renew        prometheus.Histogram // round trip of confirmed session renewals
	waiting      prometheus.Gauge     // acquisitions waiting in a queue
	watchEvents  prometheus.Counter   // events the Clients' watches received
	watches      prometheus.Gauge     // watches the Clients keep
	headroom     *headroomCollector

	// Children of the vectors above that every acquisition and call
	// touches, looked up once (see resolve).
	succeeded, held, cancelled, failed prometheus.Counter
	done                               [opTransfer + 1]prometheus.Counter // results{op, "done"}, by opKind
}

func newMetrics() *metrics {
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	m := &metrics{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_lease_acquisitions_total",
			Help: "Acquire and TryAcquire calls by outcome: acquired, held (TryAcquire found it taken), cancelled (ctx ended), error.",
		}, []string{"outcome"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencekit_lease_acquire_wait_seconds",
			Help:    "Time from Acquire to holding the lock, for successful acquisitions.",
			Buckets: buckets,
		}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencekit_lease_hold_seconds",
			Help:    "Time from acquiring a lease to its end (released, lost or closed).",
			Buckets: buckets,
		}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_lease_results_total",
			Help: "Release, renew, reenter, proclaim and transfer results by outcome: done, not_owner, not_found, unknown (transport), denied (permission), not_candidate (transfer).",
		}, []string{"op", "outcome"}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_lease_losses_total",
			Help: "Leases lost, by cause: deleted, overwritten, session (expired or revoked), deadline, not_owner, not_found, max_hold.",
		}, []string{"cause"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencekit_lease_duplicate_releases_total",
			Help: "Release calls on a lease its holder had already released.",
		}),
		foreign: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencekit_lease_foreign_records_total",
			Help: "Times a waiter found the record ahead of it kept by no session (an outsider's write): it blocks the lock until deleted.",
		}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencekit_election_leading",
			Help: "Elections this process's Clients lead now.",
		}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencekit_election_terms_total",
			Help: "Election terms won (leadership transitions to these Clients).",
		}),
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencekit_lease_renew_seconds",
			Help:    "Round trip of confirmed session renewals (keep-alives), background and Lease.Renew: a rising tail warns before renewals start to fail.",
			Buckets: buckets,
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencekit_lease_waiting",
			Help: "Acquisitions of this process's Clients waiting in a lock's queue now.",
		}),
		watchEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencekit_lease_watch_events_total",
			Help: "Watch events received by this process's Clients: changes of their own records, of the records their waiters wait behind, and in the directories of the semaphores they wait for.",
		}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencekit_lease_watches",
			Help: "Keys and semaphore directories this process's Clients watch now (each an etcd watcher).",
		}),
		headroom: newHeadroomCollector(),
	}
	m.resolve()
	return m
}

// register registers m's collectors on reg. A collector that an earlier
// Client already registered there is shared, so several Clients can report
// to one registry.
func (m *metrics) register(reg prometheus.Registerer) error {
	var errs [14]error
	m.acquisitions, errs[0] = promreg.Register(reg, m.acquisitions)
	m.wait, errs[1] = promreg.Register(reg, m.wait)
	m.hold, errs[2] = promreg.Register(reg, m.hold)
	m.results, errs[3] = promreg.Register(reg, m.results)
	m.losses, errs[4] = promreg.Register(reg, m.losses)
	m.duplicates, errs[5] = promreg.Register(reg, m.duplicates)
	m.foreign, errs[6] = promreg.Register(reg, m.foreign)
	m.leading, errs[7] = promreg.Register(reg, m.leading)
	m.terms, errs[8] = promreg.Register(reg, m.terms)
	m.renew, errs[9] = promreg.Register(reg, m.renew)
	m.waiting, errs[10] = promreg.Register(reg, m.waiting)
	m.headroom, errs[11] = promreg.Register(reg, m.headroom)
	m.watchEvents, errs[12] = promreg.Register(reg, m.watchEvents)
	m.watches, errs[13] = promreg.Register(reg, m.watches)
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("lease: register metrics: %w", err)
	}
	m.resolve() // the shared collectors' children
	return nil
}

// resolve looks up the vectors' children on the hot paths once: a lookup
// by label values hashes them on every call.
func (m *metrics) resolve() {
	m.succeeded = m.acquisitions.WithLabelValues("acquired")
	m.held = m.acquisitions.WithLabelValues("held")
	m.cancelled = m.acquisitions.WithLabelValues("cancelled")
	m.failed = m.acquisitions.WithLabelValues("error")
	for op := range m.done {
		m.done[op] = m.results.WithLabelValues(opKind(op).String(), "done")
	}
}

// Events counts watch events received (see watchmux.Stats).
func (m *metrics) Events(n int) { m.watchEvents.Add(float64(n)) }

// Watching counts watches started (delta 1) and stopped (delta -1).
func (m *metrics) Watching(delta int) { m.watches.Add(float64(delta)) }

// result is the counter of op's calls with outcome result.
func (m *metrics) result(op opKind, result string) prometheus.Counter {
	if result == "done" {
		return m.done[op]
	}
	return m.results.WithLabelValues(op.String(), result)
}

func lossCause(err error) string {
	switch {
	case errors.Is(err, ErrKeyDeleted):
		return "deleted"
	case errors.Is(err, ErrKeyOverwritten):
		return "overwritten"
	case errors.Is(err, ErrSessionExpired):
		return "session"
	case errors.Is(err, ErrDeadline):
		return "deadline"
	case errors.Is(err, ErrNotOwner):
		return "not_owner"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrMaxHold):
		return "max_hold"
	}
	return "other"
}

func (m *metrics) acquired(wait time.Duration) {
	m.succeeded.Inc()
	m.wait.Observe(wait.Seconds())
}

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
	revokedEarly prometheus.Counter // sessions etcd ended before their TTL ran out
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
	m := &metrics{
		acquisitions: counterVec("fencekit_lease_acquisitions_total",
			"Acquire and TryAcquire calls by outcome: acquired, held (TryAcquire found it taken), cancelled (ctx ended), error.", "outcome"),
		wait: histogram("fencekit_lease_acquire_wait_seconds", "Time from Acquire to holding the lock, for successful acquisitions."),
		hold: histogram("fencekit_lease_hold_seconds", "Time from acquiring a lease to its end (released, lost or closed)."),
		results: counterVec("fencekit_lease_results_total",
			"Release, renew, reenter, proclaim and transfer results by outcome: done, not_owner, not_found, unknown (transport), denied (permission), not_candidate (transfer).",
			"op", "outcome"),
		losses: counterVec("fencekit_lease_losses_total",
			"Leases lost, by cause: deleted, overwritten, session (expired or revoked), deadline, not_owner, not_found, max_hold.", "cause"),
		duplicates: counter("fencekit_lease_duplicate_releases_total", "Release calls on a lease its holder had already released."),
		foreign: counter("fencekit_lease_foreign_records_total",
			"Times a waiter found the record ahead of it kept by no session (an outsider's write): it blocks the lock until deleted."),
		revokedEarly: counter("fencekit_lease_sessions_revoked_early_total",
			"Sessions etcd ended before the TTL of their last confirmed renewal ran out (ErrRevokedEarly): revoked by someone, or by etcd itself after a frozen leader continued. Their locks may have been taken over before their holders learned."),
		leading: gauge("fencekit_election_leading", "Elections this process's Clients lead now."),
		terms:   counter("fencekit_election_terms_total", "Election terms won (leadership transitions to these Clients)."),
		renew: histogram("fencekit_lease_renew_seconds",
			"Round trip of confirmed session renewals (keep-alives), background and Lease.Renew: a rising tail warns before renewals start to fail."),
		waiting: gauge("fencekit_lease_waiting", "Acquisitions of this process's Clients waiting in a lock's queue now."),
		watchEvents: counter("fencekit_lease_watch_events_total",
			"Watch events received by this process's Clients: changes of their own records, of the records their waiters wait behind, and in the directories of the semaphores they wait for."),
		watches: gauge("fencekit_lease_watches",
			"Keys and semaphore directories this process's Clients watch now (each an etcd watcher)."),
		headroom: newHeadroomCollector(),
	}
	m.resolve()
	return m
}

// The constructors of the Client's collectors; histograms of durations in
// seconds share one set of buckets, from 0.5 ms to 5 min.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func histogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help,
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}})
}

// register registers m's collectors on reg. A collector that an earlier
// Client already registered there is shared, so several Clients can report
// to one registry.
func (m *metrics) register(reg prometheus.Registerer) error {
	var errs [15]error
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
	m.revokedEarly, errs[14] = promreg.Register(reg, m.revokedEarly)
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

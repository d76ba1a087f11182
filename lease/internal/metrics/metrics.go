// Package metrics is a lease.Client's Prometheus collectors: their
// names, help texts and label words (dashboards depend on them), their
// registration on a shared registry, and the headroom gauge over every
// Client registered there. It knows nothing of leases but the words they
// report. It is internal to the lease module.
package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a Client's Prometheus collectors, each field named after its
// metric. Label values are fixed words: no lock names, no tokens.
type Metrics struct {
	Acquisitions *prometheus.CounterVec // outcome: acquired, held, cancelled, error
	Wait         prometheus.Histogram
	Hold         prometheus.Histogram
	Results      *prometheus.CounterVec // op, outcome: done, not_owner, not_found, unknown, denied
	Losses       *prometheus.CounterVec // cause
	Duplicates   prometheus.Counter
	Foreign      prometheus.Counter
	RevokedEarly prometheus.Counter // sessions etcd ended before their TTL ran out
	Leading      prometheus.Gauge
	Terms        prometheus.Counter
	Renew        prometheus.Histogram // round trip of confirmed session renewals
	Waiting      prometheus.Gauge     // acquisitions waiting in a queue
	WatchEvents  prometheus.Counter   // events the Clients' watches received
	Watches      prometheus.Gauge     // watches the Clients keep
	Headroom     *Headroom

	// Children of the vectors above that every acquisition and call
	// touches, looked up once (see resolve).
	Succeeded, Held, Cancelled, Failed prometheus.Counter
	done                               map[string]prometheus.Counter // Results{op, "done"}, by op
}

// New returns unregistered collectors; ops are the words of the calls
// whose results are counted (see Result).
func New(ops ...string) *Metrics {
	m := &Metrics{
		Acquisitions: counterVec("fencekit_lease_acquisitions_total",
			"Acquire and TryAcquire calls by outcome: acquired, held (TryAcquire found it taken), cancelled (ctx ended), error.", "outcome"),
		Wait: histogram("fencekit_lease_acquire_wait_seconds", "Time from Acquire to holding the lock, for successful acquisitions."),
		Hold: histogram("fencekit_lease_hold_seconds", "Time from acquiring a lease to its end (released, lost or closed)."),
		Results: counterVec("fencekit_lease_results_total",
			"Release, renew, reenter, proclaim and transfer results by outcome: done, not_owner, not_found, unknown (transport), denied (permission), not_candidate (transfer).",
			"op", "outcome"),
		Losses: counterVec("fencekit_lease_losses_total",
			"Leases lost, by cause: deleted, overwritten, session (expired or revoked), deadline, not_owner, not_found, max_hold.", "cause"),
		Duplicates: counter("fencekit_lease_duplicate_releases_total", "Release calls on a lease its holder had already released."),
		Foreign: counter("fencekit_lease_foreign_records_total",
			"Times a waiter found the record ahead of it kept by no session (an outsider's write): it blocks the lock until deleted."),
		RevokedEarly: counter("fencekit_lease_sessions_revoked_early_total",
			"Sessions etcd ended before the TTL of their last confirmed renewal ran out (ErrRevokedEarly): revoked by someone, or by etcd itself after a frozen leader continued. Their locks may have been taken over before their holders learned."),
		Leading: gauge("fencekit_election_leading", "Elections this process's Clients lead now."),
		Terms:   counter("fencekit_election_terms_total", "Election terms won (leadership transitions to these Clients)."),
		Renew: histogram("fencekit_lease_renew_seconds",
			"Round trip of confirmed session renewals (keep-alives), background and Lease.Renew: a rising tail warns before renewals start to fail."),
		Waiting: gauge("fencekit_lease_waiting", "Acquisitions of this process's Clients waiting in a lock's queue now."),
		WatchEvents: counter("fencekit_lease_watch_events_total",
			"Watch events received by this process's Clients: changes of their own records, of the records their waiters wait behind, and in the directories of the semaphores they wait for."),
		Watches: gauge("fencekit_lease_watches",
			"Keys and semaphore directories this process's Clients watch now (each an etcd watcher)."),
		Headroom: newHeadroom(),
		done:     make(map[string]prometheus.Counter, len(ops)),
	}
	for _, op := range ops {
		m.done[op] = nil
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

// Register registers m's collectors on reg. A collector that an earlier
// Client already registered there is shared, so several Clients can report
// to one registry.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	var errs [15]error
	m.Acquisitions, errs[0] = promreg.Register(reg, m.Acquisitions)
	m.Wait, errs[1] = promreg.Register(reg, m.Wait)
	m.Hold, errs[2] = promreg.Register(reg, m.Hold)
	m.Results, errs[3] = promreg.Register(reg, m.Results)
	m.Losses, errs[4] = promreg.Register(reg, m.Losses)
	m.Duplicates, errs[5] = promreg.Register(reg, m.Duplicates)
	m.Foreign, errs[6] = promreg.Register(reg, m.Foreign)
	m.Leading, errs[7] = promreg.Register(reg, m.Leading)
	m.Terms, errs[8] = promreg.Register(reg, m.Terms)
	m.Renew, errs[9] = promreg.Register(reg, m.Renew)
	m.Waiting, errs[10] = promreg.Register(reg, m.Waiting)
	m.Headroom, errs[11] = promreg.Register(reg, m.Headroom)
	m.WatchEvents, errs[12] = promreg.Register(reg, m.WatchEvents)
	m.Watches, errs[13] = promreg.Register(reg, m.Watches)
	m.RevokedEarly, errs[14] = promreg.Register(reg, m.RevokedEarly)
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("lease: register metrics: %w", err)
	}
	m.resolve() // the shared collectors' children
	return nil
}

// resolve looks up the vectors' children on the hot paths once: a lookup
// by label values hashes them on every call.
func (m *Metrics) resolve() {
	m.Succeeded = m.Acquisitions.WithLabelValues("acquired")
	m.Held = m.Acquisitions.WithLabelValues("held")
	m.Cancelled = m.Acquisitions.WithLabelValues("cancelled")
	m.Failed = m.Acquisitions.WithLabelValues("error")
	for op := range m.done {
		m.done[op] = m.Results.WithLabelValues(op, "done")
	}
}

// Events counts watch events received (see watchmux.Stats).
func (m *Metrics) Events(n int) { m.WatchEvents.Add(float64(n)) }

// Watching counts watches started (delta 1) and stopped (delta -1).
func (m *Metrics) Watching(delta int) { m.Watches.Add(float64(delta)) }

// Result is the counter of op's calls with outcome result.
func (m *Metrics) Result(op, result string) prometheus.Counter {
	if c := m.done[op]; c != nil && result == "done" {
		return c
	}
	return m.Results.WithLabelValues(op, result)
}

// Acquired counts an acquisition that waited wait.
func (m *Metrics) Acquired(wait time.Duration) {
	m.Succeeded.Inc()
	m.Wait.Observe(wait.Seconds())
}

package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A Source is a Client whose headroom the gauge reports: the time until
// the earliest local validity deadline of its sessions, ok false while it
// has none.
type Source interface {
	Headroom() (d time.Duration, ok bool)
}

// Headroom reports, as one gauge, the smallest Headroom of the
// Clients that share it (every Client registered on one registry), and
// nothing while none of them has a session.
type Headroom struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	clients map[Source]struct{}
}

func newHeadroom() *Headroom {
	return &Headroom{
		desc: prometheus.NewDesc("fencekit_lease_headroom_seconds",
			"Seconds until the earliest local validity deadline of the sessions of this process's Clients (the smallest Client.Headroom): it falls towards 0 when renewals stop being confirmed, before any lease is lost.",
			nil, nil),
		clients: map[Source]struct{}{},
	}
}

// Describe implements prometheus.Collector.
func (h *Headroom) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector.
func (h *Headroom) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	clients := make([]Source, 0, len(h.clients))
	for c := range h.clients {
		clients = append(clients, c)
	}
	h.mu.Unlock()
	var least time.Duration
	found := false
	for _, c := range clients {
		if d, ok := c.Headroom(); ok && (!found || d < least) {
			least, found = d, true
		}
	}
	if found {
		ch <- prometheus.MustNewConstMetric(h.desc, prometheus.GaugeValue, least.Seconds())
	}
}

// Add counts c in.
func (h *Headroom) Add(c Source) {
	h.mu.Lock()
	h.clients[c] = struct{}{}
	h.mu.Unlock()
}

// Remove counts c out.
func (h *Headroom) Remove(c Source) {
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
}

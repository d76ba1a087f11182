package objguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/observe"
	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// The ops of metrics, logs and spans: the Guard's writing methods.
const (
	opPut    = "put"
	opDelete = "delete"
	opPurge  = "purge"
)

// errEmptyKey refuses an empty key before anything is sent: the
// "invalid" condition (sqlguard's word).
var errEmptyKey = errors.New("objguard: empty key")

// spec is how a Guard observes its writes (see WithMetrics, WithLogger and
// WithTracerProvider): the outcomes of fence.Outcome it decides, and
// "invalid" for an empty key.
var spec = observe.Spec{
	Package:  "objguard",
	Help:     "Fenced Put, Delete and Purge calls by op and outcome: accepted, stale, wrong_lock, malformed, missing, unverified, invalid, failed.",
	Ops:      []string{opPut, opDelete, opPurge},
	Outcomes: []fence.Outcome{fence.Accepted, fence.Stale, fence.WrongLock, fence.Malformed, fence.Missing, fence.Unverified, fence.Failed},
	Conditions: []observe.Condition{
		{Word: "invalid", Errs: []error{errEmptyKey},
			Report: observe.Report{Level: slog.LevelWarn, Msg: "objguard: fenced write refused before sending", Error: true}},
	},
	Reports: map[fence.Outcome]observe.Report{
		fence.Accepted: {Level: slog.LevelDebug, Msg: "objguard: fenced write applied"},
		fence.Missing:  {Level: slog.LevelWarn, Msg: "objguard: fencing token refused", Status: "objguard: missing fencing token"},
		fence.Failed:   {Level: slog.LevelError, Msg: "objguard: fenced write failed", Error: true},
	},
	NoFenceLock: true,
}

// event describes one decision, for the Guard's Observer, and how many
// reads-and-writes it made.
type event struct {
	observe.Decision
	attempts int
}

// setErr records err and its outcome.
func (ev *event) setErr(err error) {
	ev.Err = err
	var r *fence.RefusedError
	if !errors.As(err, &r) {
		ev.Outcome = fence.Failed // or, for errEmptyKey, "invalid"
		return
	}
	ev.Outcome = r.Outcome
	if r.Outcome == fence.WrongLock {
		ev.Lock = r.Mark.Lock // the object's lock
	}
}

// WithMetrics registers the Guard's Prometheus metrics on reg (nothing is
// registered globally): fencekit_objguard_decisions_total{op,outcome}
// counts each Put, Delete and Purge (op "put", "delete", "purge") by
// outcome, in the words of fence.Outcome: "accepted", "stale",
// "wrong_lock", "malformed", "missing", "unverified", "failed"; and
// "invalid" for an empty key. fencekit_objguard_conflicts_total{op}
// counts conditional requests the store refused because the object had
// changed (each is followed by a read). Label values are fixed words,
// never keys, lock names or tokens. Guards registering on the same reg
// share the counters.
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Registerer, reg, errors.New("objguard: nil metrics registerer"))
	})
}

// WithLogger makes the Guard log its decisions to l: accepted at Debug,
// refusals at Warn, failures at Error. Records carry the field names of
// packages lease, guard and redisguard: "op", "outcome", "resource" (the
// object's key), "lock" (a hash of the lock name, see guard.LockHash),
// "fence" (the token's revision), "mark" (the object's mark's revision,
// when known), "attempts" and, for failed and unverified, "error" with
// lock names replaced by their hashes. Never an object's bytes. By
// default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.Logger, l, errors.New("objguard: nil logger"))
	})
}

// WithTracerProvider makes the Guard record an OpenTelemetry span, through
// tp's tracer "github.com/fencekit/fencekit/objguard", for each Put,
// Delete and Purge, a child of the span in the call's context:
// "fencekit.objguard.put", ".delete" and ".purge". A span covers the
// reads, the verifier's call and the conditional writes. It carries the
// log's fields: "fencekit.op", "fencekit.outcome" (the metrics' words),
// "fencekit.resource" (the key), "fencekit.lock" (a hash of the lock
// name), "fencekit.fence" and "fencekit.mark" (revisions, int64). A span
// whose outcome is not accepted has status Error, with a description that
// names no lock. Without this option no span is started; the global
// TracerProvider is never used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		return observe.Set(&c.obs.TracerProvider, tp, errors.New("objguard: nil TracerProvider"))
	})
}

// newConflicts registers fencekit_objguard_conflicts_total{op} on reg,
// each op's series at zero.
func newConflicts(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencekit_objguard_conflicts_total",
		Help: "Conditional writes the object store refused because the object had changed since it was read (412), by op.",
	}, []string{"op"}))
	if err != nil {
		return nil, fmt.Errorf("objguard: register metrics: %w", err)
	}
	for _, op := range spec.Ops {
		c.WithLabelValues(op)
	}
	return c, nil
}

// observe counts, logs and traces the decision ev, ending span.
func (g *Guard) observe(ctx context.Context, span trace.Span, ev event) {
	ev.Attrs = []slog.Attr{slog.Int("attempts", ev.attempts)}
	g.obs.Observe(ctx, span, ev.Decision)
}

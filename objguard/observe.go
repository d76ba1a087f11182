package objguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/observe"
	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The ops of metrics, logs and spans: the Guard's writing methods.
const (
	opPut    = "put"
	opDelete = "delete"
	opPurge  = "purge"
)

// The outcomes: the words of fence.Outcome, and "invalid" for bad input.
var (
	outAccepted   = fence.Accepted.String()
	outStale      = fence.Stale.String()
	outWrongLock  = fence.WrongLock.String()
	outMalformed  = fence.Malformed.String()
	outMissing    = fence.Missing.String()
	outUnverified = fence.Unverified.String()
	outFailed     = fence.Failed.String()
)

const outInvalid = "invalid" // an empty key, refused before sending (sqlguard's word)

var (
	metricOps      = []string{opPut, opDelete, opPurge}
	metricOutcomes = []string{outAccepted, outStale, outWrongLock, outMalformed, outMissing, outUnverified, outInvalid, outFailed}
)

// event describes one decision, for metrics, the log and the span.
type event struct {
	op, outcome string
	key, lock   string      // the object, the token's lock
	token       fence.Token // the token decided
	mark        fence.Token // the object's mark, when known
	attempts    int         // reads-and-writes made
	err         error       // nil when accepted
}

// setErr records err and its outcome.
func (ev *event) setErr(err error) {
	ev.err = err
	var r *fence.RefusedError
	switch {
	case errors.As(err, &r):
		ev.outcome = r.Outcome.String()
		if r.Outcome == fence.WrongLock {
			ev.lock = r.Mark.Lock // the object's lock
		}
	case ev.attempts == 0: // refused before any request
		ev.outcome = outInvalid
	default:
		ev.outcome = outFailed
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
	return optionFunc(func(c *config) error { return observe.Set(&c.obs.Logger, l, errors.New("objguard: nil logger")) })
}

type metrics struct {
	decisions *prometheus.CounterVec // op, outcome
	conflicts *prometheus.CounterVec // op
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	d := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencekit_objguard_decisions_total",
		Help: "Fenced Put, Delete and Purge calls by op and outcome: accepted, stale, wrong_lock, malformed, missing, unverified, invalid, failed.",
	}, []string{"op", "outcome"})
	d, err := promreg.Register(reg, d)
	if err != nil {
		return nil, fmt.Errorf("objguard: register metrics: %w", err)
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencekit_objguard_conflicts_total",
		Help: "Conditional writes the object store refused because the object had changed since it was read (412), by op.",
	}, []string{"op"})
	c, err = promreg.Register(reg, c)
	if err != nil {
		return nil, fmt.Errorf("objguard: register metrics: %w", err)
	}
	for _, op := range metricOps {
		c.WithLabelValues(op)
		for _, o := range metricOutcomes {
			d.WithLabelValues(op, o)
		}
	}
	return &metrics{decisions: d, conflicts: c}, nil
}

// observe counts and logs the decision e.
func (g *Guard) observe(ctx context.Context, e event) {
	if g.met != nil {
		g.met.decisions.WithLabelValues(e.op, e.outcome).Inc()
	}
	level, msg := slog.LevelWarn, "objguard: fencing token refused"
	switch e.outcome {
	case outAccepted:
		level, msg = slog.LevelDebug, "objguard: fenced write applied"
	case outInvalid:
		msg = "objguard: fenced write refused before sending"
	case outFailed:
		level, msg = slog.LevelError, "objguard: fenced write failed"
	}
	if !g.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("op", e.op), logattr.Outcome(e.outcome),
		slog.String("resource", e.key), logattr.Lock(e.lock))
	if !e.token.IsZero() {
		attrs = append(attrs, logattr.Fence(e.token.Revision))
	}
	if !e.mark.IsZero() {
		attrs = append(attrs, slog.Int64("mark", e.mark.Revision))
	}
	attrs = append(attrs, slog.Int("attempts", e.attempts))
	if e.err != nil && (e.outcome == outFailed || e.outcome == outUnverified || e.outcome == outInvalid) {
		attrs = append(attrs, slog.String("error", redact(e)))
	}
	g.log.LogAttrs(ctx, level, msg, attrs...)
}

// redact is e's error text with lock names replaced by their hashes.
func redact(e event) string {
	return logattr.Redact(e.err.Error(), e.lock, e.token.Lock, e.mark.Lock)
}

// tracerName names the instrumentation scope of the Guard's spans.
const tracerName = "github.com/fencekit/fencekit/objguard"

// Span attributes carry what the log records carry, under the keys of
// packages lease, guard and redisguard.
const (
	attrOp       = attribute.Key("fencekit.op")
	attrOutcome  = attribute.Key("fencekit.outcome")
	attrResource = attribute.Key("fencekit.resource")
	attrLock     = attribute.Key("fencekit.lock")
	attrFence    = attribute.Key("fencekit.fence")
	attrMark     = attribute.Key("fencekit.mark")
)

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

// startSpan starts the span of one call; ctx and a nil span when the
// Guard has no tracer.
func (g *Guard) startSpan(ctx context.Context, op, key string, t fence.Token) (context.Context, trace.Span) {
	if g.tracer == nil {
		return ctx, nil
	}
	return g.tracer.Start(ctx, "fencekit.objguard."+op, trace.WithAttributes(attrOp.String(op),
		attrResource.String(key), attrLock.String(logattr.Hash(t.Lock))))
}

// endSpan records e on span, when there is one, and ends it.
func endSpan(span trace.Span, e event) {
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{attrOutcome.String(e.outcome)}
	if !e.token.IsZero() {
		attrs = append(attrs, attrFence.Int64(e.token.Revision))
	}
	if !e.mark.IsZero() {
		attrs = append(attrs, attrMark.Int64(e.mark.Revision))
	}
	span.SetAttributes(attrs...)
	if e.outcome != outAccepted {
		span.SetStatus(otelcodes.Error, statusText(e))
	}
	span.End()
}

// statusText describes a refusal for a span's status without lock names.
func statusText(e event) string {
	switch e.outcome {
	case outStale:
		return "objguard: stale fencing token"
	case outWrongLock:
		return "objguard: fencing token for another lock"
	case outMalformed:
		return "objguard: malformed fencing token"
	case outMissing:
		return "objguard: missing fencing token"
	}
	if e.err == nil {
		return "objguard: " + e.outcome
	}
	return redact(e)
}

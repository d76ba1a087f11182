package redisguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The ops of metrics, logs and spans: the Guard's methods.
const (
	opSet    = "set"
	opHSet   = "hset"
	opDel    = "del"
	opIncrBy = "incrby"
	opExec   = "exec"
	opClaim  = "claim"
)

// The outcomes: the words of fence.Outcome for a fencing decision, and
// sqlguard's for bad input and a missing mark.
var (
	outAccepted   = fence.Accepted.String()   // the token passed; the commands ran
	outStale      = fence.Stale.String()      // older than the mark
	outWrongLock  = fence.WrongLock.String()  // another lock's token or mark
	outMalformed  = fence.Malformed.String()  // an invalid token
	outUnverified = fence.Unverified.String() // the verifier did not confirm the token
	outFailed     = fence.Failed.String()     // no decision, or Redis refused a command
)

const (
	outInvalid  = "invalid"   // bad input refused before sending (sqlguard's word)
	outNotFound = "not_found" // no mark of this server life: ErrUnclaimed (sqlguard's word)
)

var (
	metricOps      = []string{opSet, opHSet, opDel, opIncrBy, opExec, opClaim}
	metricOutcomes = []string{outAccepted, outStale, outWrongLock, outMalformed, outInvalid, outUnverified, outNotFound, outFailed}
)

// event describes one decision, for metrics, the log and the span.
type event struct {
	op, outcome    string
	resource, lock string      // the Target
	token          fence.Token // the token decided
	mark           fence.Token // the mark, when known
	err            error       // nil when accepted
}

// setVerifyErr records the verifier's refusal or failure.
func (ev *event) setVerifyErr(err error) {
	ev.outcome, ev.err = outFailed, err
	if errors.Is(err, fence.ErrUnverified) {
		ev.outcome = outUnverified
	}
}

// classifyEarly names the outcome of a request refused before sending.
func classifyEarly(err error) string {
	switch {
	case errors.Is(err, fence.ErrInvalid):
		return outMalformed
	case errors.Is(err, fence.ErrWrongLock):
		return outWrongLock
	}
	return outInvalid
}

// WithMetrics registers the Guard's Prometheus metrics on reg (nothing is
// registered globally): fencekit_redisguard_decisions_total{op,outcome}
// counts each Set, HSet, Del, IncrBy, Exec and Claim call (op "set",
// "hset", "del", "incrby", "exec", per resource of "claim") by outcome, in
// the words of packages guard and sqlguard: "accepted", "stale",
// "wrong_lock", "malformed" (an invalid token), "invalid" (a bad target,
// command or key, refused before sending), "unverified", "not_found" (no
// mark of this Redis server's life: ErrUnclaimed) and "failed" (Redis or
// the verifier failed, ctx ended, or Redis refused a command:
// ErrCommand). Label values are fixed words, never resource or lock names
// or tokens. Guards registering on the same reg share the counter.
func WithMetrics(reg prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		if reg == nil {
			return errors.New("redisguard: nil metrics registerer")
		}
		c.registerer = reg
		return nil
	})
}

// WithLogger makes the Guard log its decisions to l: accepted at Debug,
// refusals at Warn, failures at Error, and ResetMark at Warn. Records
// carry the field names of packages lease, guard and sqlguard: "op",
// "outcome", "resource", "lock" (a hash of the lock name, see
// guard.LockHash), "fence" (the token's revision), "mark" (the mark's
// revision, when known), "fence_lock" (a hash of the token's lock when it
// is not the resource's) and, for failed and unverified, "error" with
// lock names replaced by their hashes. Never a key's value, and never an
// owner token: those never reach this package. By default nothing is
// logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("redisguard: nil logger")
		}
		c.logger = l
		return nil
	})
}

type metrics struct {
	decisions *prometheus.CounterVec // op, outcome
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencekit_redisguard_decisions_total",
		Help: "Fenced Set, HSet, Del, IncrBy, Exec and Claim calls by op and outcome: accepted, stale, wrong_lock, malformed, invalid, unverified, not_found (no mark of this Redis server's life), failed.",
	}, []string{"op", "outcome"})
	c, err := promreg.Register(reg, c)
	if err != nil {
		return nil, fmt.Errorf("redisguard: register metrics: %w", err)
	}
	for _, op := range metricOps {
		for _, o := range metricOutcomes {
			c.WithLabelValues(op, o)
		}
	}
	return &metrics{decisions: c}, nil
}

// observe counts and logs the decision e.
func (g *Guard) observe(ctx context.Context, e event) {
	if g.met != nil {
		g.met.decisions.WithLabelValues(e.op, e.outcome).Inc()
	}
	level, msg := slog.LevelWarn, "redisguard: fencing token refused"
	switch e.outcome {
	case outAccepted:
		level, msg = slog.LevelDebug, "redisguard: fenced write applied"
	case outInvalid:
		msg = "redisguard: fenced write refused before sending"
	case outFailed:
		level, msg = slog.LevelError, "redisguard: fenced write failed"
	}
	if !g.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("op", e.op), logattr.Outcome(e.outcome),
		slog.String("resource", e.resource), logattr.Lock(e.lock))
	if !e.token.IsZero() {
		attrs = append(attrs, logattr.Fence(e.token.Revision))
		if e.token.Lock != e.lock {
			attrs = append(attrs, slog.String("fence_lock", logattr.Hash(e.token.Lock)))
		}
	}
	if !e.mark.IsZero() {
		attrs = append(attrs, slog.Int64("mark", e.mark.Revision))
	}
	if e.err != nil && (e.outcome == outFailed || e.outcome == outUnverified || e.outcome == outInvalid) {
		attrs = append(attrs, slog.String("error", redact(e)))
	}
	g.log.LogAttrs(ctx, level, msg, attrs...)
}

// logReset logs an operator's ResetMark.
func (g *Guard) logReset(ctx context.Context, resource string, old, next fence.Token) {
	g.log.LogAttrs(ctx, slog.LevelWarn, "redisguard: mark reset by operator",
		slog.String("resource", resource), logattr.Lock(next.Lock),
		slog.Int64("mark_old", old.Revision), slog.Int64("mark", next.Revision))
}

// redact is e's error text with lock names replaced by their hashes.
func redact(e event) string {
	return logattr.Redact(e.err.Error(), e.lock, e.token.Lock, e.mark.Lock)
}

// tracerName names the instrumentation scope of the Guard's spans.
const tracerName = "github.com/fencekit/fencekit/redisguard"

// Span attributes carry what the log records carry, under the keys of
// packages lease, guard and sqlguard.
const (
	attrOp        = attribute.Key("fencekit.op")
	attrOutcome   = attribute.Key("fencekit.outcome")
	attrResource  = attribute.Key("fencekit.resource")
	attrLock      = attribute.Key("fencekit.lock")
	attrFence     = attribute.Key("fencekit.fence")
	attrFenceLock = attribute.Key("fencekit.fence_lock")
	attrMark      = attribute.Key("fencekit.mark")
)

// WithTracerProvider makes the Guard record an OpenTelemetry span, through
// tp's tracer "github.com/fencekit/fencekit/redisguard", for each fenced
// call, a child of the span in the call's context: "fencekit.redisguard.set",
// ".hset", ".del", ".incrby", ".exec" and, per resource, ".claim". A span
// covers the checks, the script (and a retry after a verification) and
// the verifier's calls. It carries the log's fields: "fencekit.op",
// "fencekit.outcome" (the metrics' words), "fencekit.resource",
// "fencekit.lock" (a hash of the lock name), "fencekit.fence" and
// "fencekit.mark" (revisions, int64) and "fencekit.fence_lock". A span
// whose outcome is not accepted has status Error, with a description that
// names no lock. Without this option no span is started; the global
// TracerProvider is never used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		if tp == nil {
			return errors.New("redisguard: nil TracerProvider")
		}
		c.tracer = tp.Tracer(tracerName)
		return nil
	})
}

// startSpan starts the span of one call for tgt; ctx and a nil span when
// the Guard has no tracer.
func (g *Guard) startSpan(ctx context.Context, op string, tgt guard.Target) (context.Context, trace.Span) {
	if g.tracer == nil {
		return ctx, nil
	}
	return g.tracer.Start(ctx, "fencekit.redisguard."+op, trace.WithAttributes(attrOp.String(op),
		attrResource.String(tgt.Resource), attrLock.String(logattr.Hash(tgt.Lock))))
}

// endSpan records e on span, when there is one, and ends it.
func endSpan(span trace.Span, e event) {
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{attrOutcome.String(e.outcome)}
	if !e.token.IsZero() {
		attrs = append(attrs, attrFence.Int64(e.token.Revision))
		if e.token.Lock != e.lock {
			attrs = append(attrs, attrFenceLock.String(logattr.Hash(e.token.Lock)))
		}
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
		return "redisguard: stale fencing token"
	case outWrongLock:
		return "redisguard: fencing token for another lock"
	case outMalformed:
		return "redisguard: malformed fencing token"
	case outNotFound:
		return "redisguard: resource not claimed on this Redis server"
	}
	if e.err == nil {
		return "redisguard: " + e.outcome
	}
	return redact(e)
}

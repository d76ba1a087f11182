package guard

import (
	"context"
	"errors"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/logattr"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the instrumentation scope of the Guard's spans.
const tracerName = "github.com/fencekit/fencekit/guard"

// Span attributes carry what the log records carry, under the keys of
// package lease's spans; never a lock name (only its hash), never an owner
// token (those never reach this package).
const (
	attrOutcome   = attribute.Key("fencekit.outcome")    // as the log's "outcome"
	attrResource  = attribute.Key("fencekit.resource")   // as the log's "resource"
	attrLock      = attribute.Key("fencekit.lock")       // hash of the Target's lock name, as the log's "lock"
	attrFence     = attribute.Key("fencekit.fence")      // the token's revision, as the log's "fence"
	attrFenceLock = attribute.Key("fencekit.fence_lock") // hash of the token's lock, when it is not the Target's
	attrMark      = attribute.Key("fencekit.mark")       // the resource's mark, as the log's "mark"
)

// WithTracerProvider makes the Guard record an OpenTelemetry span, through
// tp's tracer "github.com/fencekit/fencekit/guard", for each fencing
// decision: one per Do, per Serve (so per request of the HTTP middleware
// and per call of package grpcguard's server interceptors) and per
// resource of Claim, named "fencekit.guard.do", "fencekit.guard.serve" and
// "fencekit.guard.claim". A span is a child of the span in the caller's
// context (the request's, with otelhttp or otelgrpc). It covers the wait
// for the resource and the check (the Store and the Verifier, whose own
// spans are its children), and ends before write runs: write's context is
// the caller's, not a child of the Guard's span.
//
// Each span carries the fields of the log records of WithLogger:
// "fencekit.outcome" (the fence.Outcome: accepted, stale, wrong_lock,
// mark_ahead, unverified, missing, malformed, failed), "fencekit.resource" (the resource name),
// "fencekit.lock" (LockHash of the Target's lock, the "fencekit.lock" of
// package lease's spans), "fencekit.fence" (the token's revision, an
// int64), "fencekit.fence_lock" (LockHash of the token's lock, when it is
// another) and "fencekit.mark" (the mark's revision, when known). A span
// whose outcome is not accepted has status Error with a description that
// names no lock: the outcome's words, or for failed and unverified the
// error with lock names replaced by their hashes. Owner tokens never reach
// this package.
//
// Without it the Guard records no spans and costs nothing; it never uses
// the global TracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		if tp == nil {
			return errors.New("guard: nil TracerProvider")
		}
		c.tracer = tp.Tracer(tracerName)
		return nil
	})
}

// The operations a decision span is named after.
const (
	opDo    = "fencekit.guard.do"
	opServe = "fencekit.guard.serve"
	opClaim = "fencekit.guard.claim"
)

// startSpan starts the span of one decision for tgt. It returns ctx and a
// nil span when the Guard has no tracer.
func (g *Guard) startSpan(ctx context.Context, name string, tgt Target) (context.Context, trace.Span) {
	if g.tracer == nil {
		return ctx, nil
	}
	return g.tracer.Start(ctx, name, trace.WithAttributes(
		attrResource.String(tgt.Resource), attrLock.String(LockHash(tgt.Lock))))
}

// endSpan records the decision e on span, when there is one, and ends it.
func endSpan(span trace.Span, e event) {
	if span == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attrOutcome.String(e.outcome.String()))
	if !e.token.IsZero() {
		attrs = append(attrs, attrFence.Int64(e.token.Revision))
		if e.token.Lock != e.lock {
			attrs = append(attrs, attrFenceLock.String(LockHash(e.token.Lock)))
		}
	}
	if !e.mark.IsZero() {
		attrs = append(attrs, attrMark.Int64(e.mark.Revision))
	}
	span.SetAttributes(attrs...)
	if e.outcome != fence.Accepted {
		span.SetStatus(otelcodes.Error, statusText(e))
	}
	span.End()
}

// statusText describes a refusal for a span's status without lock names.
func statusText(e event) string {
	switch {
	case e.outcome == fence.MarkAhead:
		return "guard: mark ahead of the lock service; reset it (Guard.ResetMark)"
	case e.outcome == fence.Stale:
		return "guard: stale fencing token"
	case e.outcome == fence.WrongLock:
		return "guard: fencing token for another lock"
	case e.outcome == fence.Missing:
		return "guard: fencing token missing"
	case e.outcome == fence.Malformed:
		return "guard: malformed fencing token"
	case e.err == nil:
		return "guard: " + e.outcome.String()
	}
	return logattr.Redact(e.err.Error(), e.lock, e.token.Lock)
}

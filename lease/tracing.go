package lease

import (
	"context"
	"errors"

	"github.com/fencekit/fencekit/internal/logattr"
	"github.com/fencekit/fencekit/internal/observe"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerName names the instrumentation scope of the Client's spans.
const tracerName = "github.com/fencekit/fencekit/lease"

// Span attributes carry what the logs carry, never an owner token.
const (
	attrLock     = attribute.Key("fencekit.lock")     // hash of the lock name, as logs' "lock"
	attrOwner    = attribute.Key("fencekit.owner")    // owner token digest
	attrFence    = attribute.Key("fencekit.fence")    // fencing revision
	attrKind     = attribute.Key("fencekit.kind")     // exclusive lock, read lock, semaphore of n
	attrPosition = attribute.Key("fencekit.position") // records ahead that blocked the acquisition when it queued
	attrWaited   = attribute.Key("fencekit.waited_ms")
)

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// traced runs a call on l in a span named after op.
func (l *Lease) traced(ctx context.Context, op opKind, call func(context.Context) error) error {
	if l == nil {
		return errNilLease
	}
	ctx, span := l.c.tracer.Start(ctx, "fencekit.lease."+op.String())
	if span.IsRecording() {
		span.SetAttributes(attrLock.String(logattr.Hash(l.name)), attrOwner.String(l.owner.Digest()), attrFence.Int64(l.rev))
	}
	err := call(ctx)
	endSpan(span, err)
	return err
}

// endSpan records err's outcome on span and ends it.
func endSpan(span trace.Span, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	o := "done"
	if err != nil {
		o = outcomeLabel(err)
		switch {
		case errors.Is(err, ErrHeld):
			o = "held"
		case errors.Is(err, ErrReleased):
			o = "released"
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			o = "cancelled"
		}
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.SetAttributes(observe.AttrOutcome.String(o)) // as the metrics' outcome label
	span.End()
}

// outcomeLabel is the metrics and log label of a call's error.
func outcomeLabel(err error) string {
	switch {
	case errors.Is(err, ErrPermissionDenied):
		return "denied"
	case errors.Is(err, ErrNotOwner):
		return "not_owner"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	}
	return "unknown"
}

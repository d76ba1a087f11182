package spantest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/internal/testsupport/spantest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Spans are listed as they end, with their parent, the last value of each
// attribute, their events, and the SDK's status rules.
func TestRecorder(t *testing.T) {
	rec := spantest.NewRecorder()
	var tp trace.TracerProvider = rec
	ctx, parent := tp.Tracer("outer").Start(context.Background(), "parent")
	_, child := tp.Tracer("inner").Start(ctx, "child", trace.WithAttributes(attribute.String("k", "a")))
	child.SetAttributes(attribute.String("k", "b"), attribute.Int("n", 1))
	child.RecordError(errors.New("boom"))
	child.SetStatus(codes.Error, "failed")
	child.End()
	parent.SetStatus(codes.Ok, "ignored")
	parent.SetStatus(codes.Error, "too late")
	parent.End()
	parent.SetName("renamed after End")

	spans := rec.GetSpans()
	if len(spans) != 2 || spans[0].Name != "child" || spans[1].Name != "parent" {
		t.Fatalf("spans %+v, want child then parent", spans)
	}
	c, p := spans[0], spans[1]
	if c.Scope != "inner" || p.Scope != "outer" {
		t.Errorf("scopes %q, %q", c.Scope, p.Scope)
	}
	if c.Parent.SpanID() != p.SpanContext.SpanID() || c.SpanContext.TraceID() != p.SpanContext.TraceID() || p.Parent.IsValid() {
		t.Errorf("child's parent %v, parent %v (its parent %v)", c.Parent, p.SpanContext, p.Parent)
	}
	if len(c.Attributes) != 2 || c.Attributes[0] != attribute.String("k", "b") || c.Attributes[1] != attribute.Int("n", 1) {
		t.Errorf("attributes %v, want k=b, n=1", c.Attributes)
	}
	if len(c.Events) != 1 || c.Events[0].Name != "exception" {
		t.Errorf("events %v, want one exception", c.Events)
	}
	if c.Status != (spantest.Status{Code: codes.Error, Description: "failed"}) {
		t.Errorf("child status %+v", c.Status)
	}
	if p.Status != (spantest.Status{Code: codes.Ok}) || p.Name != "parent" {
		t.Errorf("parent %q status %+v, want Ok without description", p.Name, p.Status)
	}
	if p.EndTime.Before(p.StartTime) {
		t.Errorf("parent ended %v before it started %v", p.EndTime, p.StartTime)
	}
	rec.Reset()
	if n := len(rec.GetSpans()); n != 0 {
		t.Errorf("%d spans after Reset", n)
	}
}

package grpcguard_test

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/internal/testsupport/spantest"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The interceptors decide through the Guard, so its tracer records one
// "fencekit.guard.serve" span per fenced call, unary or stream, with the
// Guard's attributes; unfenced calls record none.
func TestGRPCTracing(t *testing.T) {
	exp := spantest.NewRecorder()
	tp := exp
	_, conn := startRPC(t, newGuard(t, guard.WithTracerProvider(tp)))
	ctx := context.Background()

	if err := put(fence.NewContext(ctx, tok("items", 5)), conn, "a"); err != nil {
		t.Fatalf("put 5: %v", err)
	}
	put(fence.NewContext(ctx, tok("items", 3)), conn, "a")
	put(fence.NewContext(ctx, tok("other", 9)), conn, "a")
	put(ctx, conn, "a")
	if err := appendStream(fence.NewContext(ctx, tok("items", 7)), conn, 2); err != nil {
		t.Fatalf("append 7: %v", err)
	}
	if err := conn.Invoke(fence.NewContext(ctx, tok("items", 1)), peekMethod, wrapperspb.String("a"), new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("peek (unfenced): %v", err)
	}

	type row struct {
		outcome, resource string
		fence, mark       int64
		err               bool
	}
	var got []row
	for _, s := range exp.GetSpans() {
		if s.Name != "fencekit.guard.serve" {
			t.Errorf("span %q", s.Name)
			continue
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes {
			a[kv.Key] = kv.Value
		}
		if a["fencekit.lock"].AsString() != guard.LockHash("items") {
			t.Errorf("lock attribute %q, want the hash of the lock name", a["fencekit.lock"].AsString())
		}
		got = append(got, row{a["fencekit.outcome"].AsString(), a["fencekit.resource"].AsString(),
			a["fencekit.fence"].AsInt64(), a["fencekit.mark"].AsInt64(), s.Status.Code == otelcodes.Error})
	}
	want := []row{
		{"accepted", "a", 5, 5, false},
		{"stale", "a", 3, 5, true},
		{"wrong_lock", "a", 9, 0, true},
		{"missing", "a", 0, 0, true},
		{"accepted", "log", 7, 7, false},
	}
	if len(got) != len(want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
